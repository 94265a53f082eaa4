"""Scenarios of sharded tables, run under ``mpirun`` by tests/test_sharding_mpi.py and on virtual
ranks by the same test, which compares the two bit for bit (SHARD-9).

    mpirun -np N python tests/sharding_child.py OUT train          # train, evict, save to OUT/<backend>
    mpirun -np M python tests/sharding_child.py OUT reload         # load OUT/<backend> on M ranks, go on
    mpirun -np 2 python tests/sharding_child.py OUT reload kill-save   # ... then rank 1 is killed in a save
    mpirun -np 2 python tests/sharding_child.py OUT raise-value      # rank 1 raises: the job ends (SHARD-21)

Each phase runs for both backends in one launch (a launch costs a second or more) and rank 0 writes
what every rank saw to ``OUT/<phase>-<ranks>.npz``.
"""
from __future__ import annotations

import os
import signal
import sys

import numpy as np

from mxrec_ref import checkpoint
from mxrec_ref.config import TableConfig
from mxrec_ref.distributed import ReplicatedStore, ShardedStore, world
from mxrec_ref.errors import UsageError
from mxrec_ref.optimizers import Adagrad
from mxrec_ref.store import open_store

BACKENDS = ("ref", "fast")
DIM = 8


def config() -> TableConfig:
    return TableConfig(name="clicks", dim=DIM, device_vocabulary_size=128, dynamic_expansion=True,
                       access_threshold=2, eviction_threshold=4, faae_coefficient=1)


def batches(seed: int, steps: int, ranks: int):
    """Zipf-like keys, some negative, some padding: each step's global batch split into rank slices."""
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        keys = (rng.zipf(1.3, size=24 * ranks) % 300).astype(np.int64) - 20
        keys[rng.random(keys.size) < 0.1] = -1
        yield np.array_split(keys, ranks)


def gradient_for(step: int, rank: int, keys: np.ndarray) -> np.ndarray:
    base = keys.astype(np.float64)[:, None] * 0.37 + np.arange(DIM) * 0.11 + step * 0.05 + rank * 0.013
    return np.sin(base).astype(np.float32)


def train(rank, store, first_step: int, steps: int, seed: int) -> dict:
    out = {}
    comm_size = store.rank_size
    for step, slices in enumerate(batches(seed, steps, comm_size), start=first_step):
        result = store.lookup(slices[rank], step=step)
        out[f"forward{step}"] = result.embeddings()
        store.apply_gradients(result, gradient_for(step, rank, result.unique_keys), step=step)
        if step % 3 == 2:
            out[f"evicted{step}"] = store.evict()
    out["eval"] = store.lookup(np.arange(-5, 40), train=False).embeddings()
    return out


def phase(name: str, rank: int, comm, folder: str, backend: str) -> dict:
    store = ShardedStore(open_store(config(), Adagrad(learning_rate=0.05), backend=backend), comm)
    if name == "train":
        out = train(rank, store, 0, 7, seed=1)
        store.save(f"{folder}/{backend}")
    else:
        store.load(f"{folder}/{backend}")
        out = train(rank, store, 7, 4, seed=2)
        store.save(f"{folder}/{backend}-reloaded-{comm.size}")
    state = store.export()
    for field in ("keys", "values", "counts", "last_seen", "pending_keys", "pending_counts", "pending_last_seen"):
        out[f"state_{field}"] = getattr(state, field)
    out["state_accumulator"] = state.slots["accumulator"]
    out["size"] = np.int64(store.size())
    return out


def replica_phase(kind: str, rank: int, comm, backend: str) -> dict:
    """SHARD-16 (``dp``: a data-parallel table) and SHARD-20 (``hot``: hot rows replicated on every rank,
    refreshed every 2 steps), trained as the train phase trains."""
    local = open_store(config(), Adagrad(learning_rate=0.05), backend=backend)
    store = ReplicatedStore(local, comm) if kind == "dp" else ShardedStore(local, comm, hot_rows=6, hot_update_step=2)
    out = train(rank, store, 0, 7, seed=1)
    state = store.export()
    out.update(state_keys=state.keys, state_values=state.values, state_counts=state.counts,
               state_last_seen=state.last_seen, state_accumulator=state.slots["accumulator"],
               size=np.int64(store.size()), hot_hits=np.int64(store.stats()["hot_hit_positions"]))
    if kind == "dp":
        local_state = local.export()
        out.update(replica_values=local_state.values, replica_handles=local.row_handles(local_state.keys))
    return out


def run(name: str, rank: int, comm, folder: str) -> dict:
    """Every backend's phase; rank-local arrays are gathered so rank 0 holds what every rank saw."""
    results = {}
    for backend in BACKENDS:
        mine = phase(name, rank, comm, folder, backend)
        for r, theirs in enumerate(comm.allgather(mine)):
            results.update({f"{backend}/rank{r}/{key}": value for key, value in theirs.items()})
        if name == "train" and backend == "fast":     # the virtual-rank tests cover both backends
            for kind in ("dp", "hot"):
                mine = replica_phase(kind, rank, comm, backend)
                for r, theirs in enumerate(comm.allgather(mine)):
                    results.update({f"{kind}-{backend}/rank{r}/{key}": value for key, value in theirs.items()})
    return results


def hang(rank: int, comm) -> None:
    """Rank 1 skips a step: rank 0 waits in the lookup until the watchdog ends the job (SHARD-15)."""
    store = ShardedStore(open_store(config(), backend="ref"), comm)
    store.lookup([1, 2], step=0)
    if rank == 0:
        store.lookup([3], step=1)
    comm.barrier()


def raising(rank: int, comm, kind: str) -> None:
    """Rank 1 raises before its first lookup while rank 0 waits in it: the job must end at once (SHARD-21),
    not when the watchdog's timeout ends rank 0's wait (SHARD-15)."""
    store = ShardedStore(open_store(config(), backend="ref"), comm)
    if rank == 1:
        raise (UsageError if kind == "usage" else ValueError)(f"rank 1 fails on purpose ({kind})")
    store.lookup([1, 2], step=0)


def killed_save(rank: int, comm, folder: str) -> None:
    """The reload's checkpoint saved again one step later, and rank 1 SIGKILLed once its slice is
    written, while rank 0 waits for it: the launch dies and the reload's checkpoint stays (SHARD-10)."""
    store = ShardedStore(open_store(config(), Adagrad(learning_rate=0.05), backend="ref"), comm)
    target = f"{folder}/ref-reloaded-{comm.size}"
    store.load(target)
    train(rank, store, 11, 1, seed=3)
    if rank == 1:
        checkpoint.fault_hook = lambda step: step == "fsync manifest.json" and os.kill(os.getpid(), signal.SIGKILL)
    store.save(target)


if __name__ == "__main__":
    out_folder, phase_name = sys.argv[1], sys.argv[2]
    comm = world()
    if phase_name == "hang":
        hang(comm.rank, comm)
        sys.exit(0)
    if phase_name.startswith("raise-"):
        raising(comm.rank, comm, phase_name.split("-", 1)[1])
        sys.exit(0)
    gathered = run(phase_name, comm.rank, comm, out_folder)
    if comm.rank == 0:
        np.savez(f"{out_folder}/{phase_name}-{comm.size}.npz", **gathered)
    comm.barrier()
    if sys.argv[3:] == ["kill-save"]:
        killed_save(comm.rank, comm, out_folder)
