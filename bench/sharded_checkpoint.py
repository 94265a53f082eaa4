"""Checkpoint time and peak memory per rank of a sharded table (spec/sharding.md, SHARD-10, SHARD-11):

    .venv/bin/python bench/sharded_checkpoint.py FOLDER [KEYS]                       # 1 rank
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \\
        .venv/bin/mpirun --oversubscribe -np 2 .venv/bin/python bench/sharded_checkpoint.py FOLDER [KEYS]

A table of KEYS admitted keys (default 1,000,000; dim 16, Adagrad, fast backend) split over the ranks is
saved into FOLDER and loaded back on the same number of ranks, by two protocols:

* ``sliced``: ShardedStore.save / load (each rank writes its slice, rank 0 merges them streaming; each
  rank streams the files and keeps its keys);
* ``gathered``: what the first version did, for comparison -- every rank gathers the whole table, rank 0
  writes it with the one-process writer; every rank reads the whole checkpoint and slices it.

Per operation and rank: wall time between two barriers (the slowest rank's) and peak resident memory
above the resident memory just before (VmHWM, reset through /proc/self/clear_refs; Linux).  Rank 0
prints one JSON line; bench/README.md ("Sharded checkpoints") keeps the numbers as ratios.
"""
from __future__ import annotations

import gc
import json
import sys
import time

import numpy as np

from mxrec_ref import Adagrad, TableConfig, open_store
from mxrec_ref import checkpoint
from mxrec_ref.distributed import ShardedStore, merge_states, slice_state, world
from mxrec_ref.state import TableState

DIM = 16


def memory_kb(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def measured(comm, work) -> tuple[float, float]:
    """(seconds over all ranks, this rank's peak MiB above the memory before ``work``)."""
    gc.collect()
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")                      # VmHWM := VmRSS
    before = memory_kb("VmRSS")
    comm.barrier()
    start = time.perf_counter()
    work()
    comm.barrier()
    seconds = time.perf_counter() - start
    return seconds, (memory_kb("VmHWM") - before) / 1024


def owned_state(keys: int, rank: int, size: int, optimizer) -> TableState:
    mine = np.arange(rank, keys, size, dtype=np.int64)
    rng = np.random.default_rng(rank)
    n = len(mine)
    return TableState(keys=mine, values=rng.standard_normal((n, DIM), dtype=np.float32),
                      slots={name: np.full((n, DIM), 0.1, np.float32) for name in optimizer.slot_names},
                      counts=np.full(n, 3, np.int64), last_seen=np.full(n, 7, np.int64),
                      pending_keys=np.zeros(0, np.int64), pending_counts=np.zeros(0, np.int64),
                      pending_last_seen=np.zeros(0, np.int64), clock=7, clock_source="step")


def main(folder: str, keys: int) -> None:
    comm = world()
    config = TableConfig("item", dim=DIM, device_vocabulary_size=1 << 10, dynamic_expansion=True)
    optimizer = Adagrad(0.05)

    def fresh() -> ShardedStore:
        return ShardedStore(open_store(config, optimizer, backend="fast"), comm)

    store = fresh()
    store.local.import_state(owned_state(keys, comm.rank, comm.size, optimizer))
    sliced, gathered = f"{folder}/sliced-{comm.size}", f"{folder}/gathered-{comm.size}"
    out = {}

    def gathered_save():
        state = merge_states(comm.allgather(store.local.export()))
        if comm.rank == 0:
            checkpoint.write_table(gathered, config, optimizer, state)
        comm.barrier()

    out["save sliced"] = measured(comm, lambda: store.save(sliced))
    out["save gathered"] = measured(comm, gathered_save)
    del store
    target = fresh()
    out["load sliced"] = measured(comm, lambda: target.load(sliced))
    assert target.size() == keys
    del target
    target = fresh()

    def gathered_load():
        state = checkpoint.read_table(gathered, config, optimizer)
        mine = slice_state(state, comm.rank, comm.size)
        del state
        target.local.import_state(mine)

    out["load gathered"] = measured(comm, gathered_load)
    everyone = comm.allgather(out)
    if comm.rank == 0:
        print(json.dumps({"ranks": comm.size, "keys": keys, "dim": DIM, **{
            name: {"seconds": round(max(r[name][0] for r in everyone), 3),
                   "peak_mib_per_rank": [round(r[name][1], 1) for r in everyone]} for name in out}}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000)
