"""What sharding costs per training step on real ranks (spec/sharding.md), run under mpirun:

    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \\
        .venv/bin/mpirun --oversubscribe -np 2 .venv/bin/python bench/mpi_exchange.py [KEYS_PER_RANK]

Each rank trains on Zipf 1.05 batches of KEYS_PER_RANK keys (default 65,536; dim 16, fast backend; the
keys of bench/workloads.py) per step.  Measured on every rank, minimum over the timed steps (the least
disturbed on a shared machine), reported for the slowest rank:

* ``local``: the same batch on a rank-unaware store (what one process does with this rank's batch);
* ``sharded``: ShardedStore.lookup + apply_gradients, the exchanges included, hot replicas off;
* ``alltoall``: the step's all-to-alls alone (keys + counts out, rows back, gradient rows out), same counts;
* ``hot``: the sharded step with the hottest rows replicated on every rank (SHARD-20, default hot_rows),
  and an evaluation lookup with and without them;
* bytes each rank sends to other ranks per step (bench/sharding_workload.py's CountingCommunicator).

Rank 0 prints one JSON line; bench/README.md ("Sharding over MPI") keeps the numbers as ratios.
bench/test_shard_bench.py measures the same on virtual ranks under pytest-benchmark.
"""
from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from mxrec_ref import Adagrad, TableConfig, hot, open_store  # noqa: E402
from mxrec_ref.distributed import route, world  # noqa: E402
from mxrec_ref.distributed.sharded import dedup  # noqa: E402
from sharding_workload import CountingCommunicator, batches, hit_ratios, sharded_table, train_step  # noqa: E402
from workloads import DIM, UNIVERSE  # noqa: E402

WARM, TIMED = 4, 8


def timed(comm, call) -> float:
    comm.barrier()
    tick = time.perf_counter()
    call()
    return time.perf_counter() - tick


def main(keys_per_rank: int) -> None:
    comm = CountingCommunicator(world())
    mine = batches(comm.rank, WARM + TIMED + 1, keys_per_rank)
    config = TableConfig("item", dim=DIM, device_vocabulary_size=UNIVERSE, dynamic_expansion=True)
    local = open_store(config, Adagrad(0.05), backend="fast", hot_rows=0)
    plain = sharded_table(comm, 0, WARM)
    replicated = sharded_table(comm, hot.hot_rows("item", DIM, None), WARM)
    times = {name: [] for name in ("local", "sharded", "alltoall", "hot", "eval", "hot_eval")}
    sent = {}
    for step in range(WARM + TIMED):
        keys = mine[step]
        t_local = timed(comm, lambda: train_step(local, keys, step))
        before = sum(comm.sent.values())
        t_sharded = timed(comm, lambda: train_step(plain, keys, step))
        sent["sharded"] = sum(comm.sent.values()) - before
        before = sum(comm.sent.values())
        t_hot = timed(comm, lambda: train_step(replicated, keys, step))
        sent["hot"] = sum(comm.sent.values()) - before
        if step == WARM - 1:         # the hot set was chosen after the warm-up; then HOT-1's default interval
            replicated._hot.update_step = hot.DEFAULT_UPDATE_STEP
        before = sum(comm.sent.values())
        t_eval = timed(comm, lambda: plain.lookup(mine[-1], train=False))
        sent["eval"] = sum(comm.sent.values()) - before
        before = sum(comm.sent.values())
        t_hot_eval = timed(comm, lambda: replicated.lookup(mine[-1], train=False))
        sent["hot_eval"] = sum(comm.sent.values()) - before
        unique, _, _ = dedup(keys, None)
        order, counts = route(unique, comm.size)
        received = np.asarray(comm.allgather(counts))[:, comm.rank]
        pairs = np.zeros((len(unique), 2), np.int64)
        rows = np.zeros((int(received.sum()), DIM), np.float32)
        grads = np.zeros((len(unique), DIM), np.float32)
        t_alltoall = timed(comm, lambda: (comm.alltoallv(pairs, counts, received),
                                          comm.alltoallv(rows, received, counts),
                                          comm.alltoallv(grads, counts, received)))
        if step >= WARM:
            for name, value in (("local", t_local), ("sharded", t_sharded), ("alltoall", t_alltoall),
                                ("hot", t_hot), ("eval", t_eval), ("hot_eval", t_hot_eval)):
                times[name].append(value)
    positions, distinct = hit_ratios(replicated, mine[-1])
    best = {name: min(values) for name, values in times.items()}
    report = comm.allgather({"best": best, "sent": sent, "unique": len(np.unique(mine[-1])),
                             "hit": (positions, distinct)})
    if comm.rank == 0:
        slowest = {name: max(r["best"][name] for r in report) * 1e3 for name in best}
        busiest = {name: max(r["sent"][name] for r in report) for name in sent}
        print(json.dumps({"ranks": comm.size, "keys_per_rank": keys_per_rank, "dim": DIM,
                          **{f"{name}_ms": value for name, value in slowest.items()},
                          **{f"bytes_{name}": value for name, value in busiest.items()},
                          "unique_per_rank": max(r["unique"] for r in report),
                          "hot_rows": replicated.stats()["hot_rows"],
                          "hit_ratio_positions": report[0]["hit"][0], "hit_ratio_distinct": report[0]["hit"][1]}))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 65_536)
