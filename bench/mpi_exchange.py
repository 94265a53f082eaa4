"""What sharding costs per training step (spec/sharding.md), run under mpirun:

    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \\
        .venv/bin/mpirun --oversubscribe -np 2 .venv/bin/python bench/mpi_exchange.py [KEYS_PER_RANK]

Each rank looks up and trains a Zipf batch of KEYS_PER_RANK keys (default 65,536; dim 16, fast backend) per
step.  Measured on every rank, minimum over the timed steps (the least disturbed on a shared machine):

* ``local``: the same batch on a rank-unaware store (what one process does with this rank's batch);
* ``sharded``: ShardedStore.lookup + apply_gradients, the exchanges included;
* ``alltoall``: the step's two all-to-alls of keys (+ occurrence counts) and of rows alone, same counts;
* bytes each rank sends to other ranks per step (keys, counts, rows, flags, gradient keys and rows).

Rank 0 prints one JSON line; bench/README.md ("Sharding over MPI") keeps the numbers as ratios.
"""
from __future__ import annotations

import json
import sys
import time

import numpy as np

from mxrec_ref import Adagrad, TableConfig, open_store
from mxrec_ref.distributed import ShardedStore, route, world
from mxrec_ref.distributed.sharded import dedup

DIM, WARM, TIMED = 16, 3, 8


def main(keys_per_rank: int) -> None:
    comm = world()
    config = TableConfig("item", dim=DIM, device_vocabulary_size=1 << 20, dynamic_expansion=True)
    sharded = ShardedStore(open_store(config, Adagrad(0.05), backend="fast"), comm)
    local = open_store(config, Adagrad(0.05), backend="fast")
    rng = np.random.default_rng(comm.rank)
    times = {"local": [], "sharded": [], "alltoall": []}
    sent = 0
    for step in range(WARM + TIMED):
        keys = (rng.zipf(1.05, keys_per_rank) % 2_000_000).astype(np.int64)
        grads = lambda result: np.full((len(result.unique_keys), DIM), 0.01, np.float32)  # noqa: E731
        tick = time.perf_counter()
        result = local.lookup(keys, step=step)
        local.apply_gradients(result, grads(result), step=step)
        local_s = time.perf_counter() - tick
        comm.barrier()
        tick = time.perf_counter()
        result = sharded.lookup(keys, step=step)
        sharded.apply_gradients(result, grads(result), step=step)
        sharded_s = time.perf_counter() - tick
        unique, _, occurrences = dedup(keys, None)
        order, counts = route(unique, comm.size)
        received = np.asarray(comm.allgather(counts))[:, comm.rank]
        pairs = np.stack([unique[order], occurrences[order]], axis=1)
        rows = np.zeros((int(received.sum()), DIM), np.float32)
        comm.barrier()
        tick = time.perf_counter()
        comm.alltoallv(pairs, counts, received)
        comm.alltoallv(rows, received, counts)
        alltoall_s = time.perf_counter() - tick
        others = int(counts.sum() - counts[comm.rank])
        # lookup: key + count out, row + flag back; apply: key + row out
        sent = others * (16 + 8 + 4 * DIM) + int(received.sum() - received[comm.rank]) * (4 * DIM + 1)
        if step >= WARM:
            times["local"].append(local_s)
            times["sharded"].append(sharded_s)
            times["alltoall"].append(alltoall_s)
    best = {name: min(values) for name, values in times.items()}
    report = comm.allgather({**best, "bytes_sent": sent, "unique": len(unique)})
    if comm.rank == 0:
        print(json.dumps({"ranks": comm.size, "keys_per_rank": keys_per_rank, "dim": DIM,
                          "local_ms": max(r["local"] for r in report) * 1e3,
                          "sharded_ms": max(r["sharded"] for r in report) * 1e3,
                          "alltoall_ms": max(r["alltoall"] for r in report) * 1e3,
                          "bytes_sent_per_rank": max(r["bytes_sent"] for r in report),
                          "unique_per_rank": max(r["unique"] for r in report)}))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 65_536)
