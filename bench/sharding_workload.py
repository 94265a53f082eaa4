"""What a step of a sharded table costs, shared by bench/test_shard_bench.py (virtual ranks, pytest-benchmark)
and bench/mpi_exchange.py (real ranks under mpirun): Zipf 1.05 batches, a byte-counting communicator, and
one training step (lookup + apply_gradients) with hot replicas on or off (spec/sharding.md, SHARD-20)."""
from __future__ import annotations

import pickle
from collections import Counter

import numpy as np

from mxrec_ref import Adagrad, TableConfig, open_store
from mxrec_ref.distributed import ShardedStore
from mxrec_ref.distributed.comm import Communicator

from workloads import DIM, UNIVERSE, scramble, zipf_ranks


class CountingCommunicator(Communicator):
    """Another communicator, counting the bytes this rank sends to the other ranks: rows of every
    all-to-all (``alltoallv``, what the keys, counts, rows and gradients travel by) and the pickled
    headers of ``allgather``/``bcast`` (sent to every other rank)."""

    def __init__(self, inner: Communicator):
        self.inner, self.rank, self.size = inner, inner.rank, inner.size
        self.sent = Counter()

    def allgather(self, obj) -> list:
        self.sent["headers"] += len(pickle.dumps(obj)) * (self.size - 1)
        return self.inner.allgather(obj)

    def bcast(self, obj, root: int = 0):
        if self.rank == root:
            self.sent["headers"] += len(pickle.dumps(obj)) * (self.size - 1)
        return self.inner.bcast(obj, root)

    def barrier(self) -> None:
        self.inner.barrier()

    def _alltoallv(self, send, send_counts, recv_counts):
        row_bytes = send.dtype.itemsize * int(np.prod(send.shape[1:], dtype=np.int64))
        self.sent["alltoall"] += (int(send_counts.sum()) - int(send_counts[self.rank])) * row_bytes
        return self.inner._alltoallv(send, send_counts, recv_counts)

    def allgather_array(self, array):
        self.sent["headers"] += np.asarray(array).nbytes * (self.size - 1)
        return self.inner.allgather_array(array)


def batches(rank: int, steps: int, keys_per_rank: int) -> list[np.ndarray]:
    """This rank's Zipf 1.05 batches (workloads.py's keys), different on every rank."""
    rng = np.random.default_rng(100 + rank)
    return [scramble(zipf_ranks(rng, keys_per_rank)) for _ in range(steps)]


def sharded_table(comm: Communicator, hot_rows: int, warm_steps: int) -> ShardedStore:
    """A fast-backend table sharded over ``comm``; hot replicas (if any) refreshed after the warm-up."""
    config = TableConfig("item", dim=DIM, device_vocabulary_size=UNIVERSE, dynamic_expansion=True)
    return ShardedStore(open_store(config, Adagrad(0.05), backend="fast", hot_rows=0), comm, hot_rows=hot_rows,
                        hot_update_step=warm_steps)


def train_step(store, keys: np.ndarray, step: int):
    result = store.lookup(keys, step=step)
    store.apply_gradients(result, np.full((len(result.unique_keys), DIM), 0.01, np.float32), step=step)
    return result


def hit_ratios(store, keys: np.ndarray) -> tuple[float, float]:
    """(positions, distinct keys) of ``keys`` that the hot replica answers."""
    if store._hot is None:
        return 0.0, 0.0
    unique = np.unique(keys)
    return float(store._hot.is_hot(keys).mean()), float(store._hot.is_hot(unique).mean())
