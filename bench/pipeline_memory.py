"""Memory with the key pipeline on and off (issue 32's target: memory per row unchanged, plus at most the
rows of the batches in flight):

    PYTHONPATH=$PWD .venv/bin/python bench/pipeline_memory.py [--steps 64]

The 26-table model's key stream (bench/criteo26.py: one fast store per field, dim 16, Adagrad,
truncated-normal rows, tables from empty) through ``KeyPipeline`` (depth 1, worker thread) with the
pipeline on and off, each in its own process (so the peak RSS is its own), one after the other.  Each
step pushes batch t+1, pops batch t and applies a gradient; before the pop and after the apply it waits for
the next batch's work ahead and records the bytes the finished work ahead holds (``Prepared``'s dedup,
probe hints and initial rows; the batch's own keys are the caller's and not counted).  Reports per process: the stores' ``memory_breakdown()``
(written) and ``memory_breakdown(allocated=True)`` summed over the 26 tables, bytes per key, keys, the
peak bytes held ahead, VmRSS at the end and the peak RSS (``ru_maxrss``), and a digest of every store's
``export()``; the two digests must be equal (the script fails otherwise).  Prints one JSON object.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import criteo26  # noqa: E402


def held_bytes(value) -> int:
    """Bytes of the numpy arrays in ``value`` (a Prepared's fields, tuples of arrays)."""
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, (tuple, list)):
        return sum(held_bytes(v) for v in value)
    return 0


def ahead_bytes(pipeline) -> int:
    """Bytes the pending batches' finished work ahead holds (their keys and counts excepted: the caller's)."""
    total = 0
    for pushed in pipeline._pushed:              # a measurement: reads the pipeline's queue
        if not pushed.ahead.done():              # the worker resolves batch t+1 only once t is popped (PIPE-5)
            continue
        for batch in pushed.ahead.result() or []:
            prepared = batch.prepared
            total += sum(held_bytes(getattr(prepared, name)) for name in ("deduped", "init_at", "init_rows", "hints"))
    return total


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return -1


def one_process(pipeline_on: bool, steps: int) -> dict:
    from mxrec_ref import Initializer, TableConfig, open_store
    from mxrec_ref.optimizers import Adagrad
    from mxrec_ref.pipeline import KeyPipeline

    stream = criteo26.make_stream(steps)
    batches = [criteo26.batch(stream, step, "keys") for step in range(steps)]
    initializer = Initializer(kind="truncated_normal", stddev=criteo26.STDDEV)
    stores = [open_store(TableConfig(name=field, dim=criteo26.DIM, dynamic_expansion=True, initializer=initializer),
                         Adagrad(criteo26.SPARSE_LR, criteo26.INITIAL_ACCUMULATOR), backend="fast")
              for field in criteo26.FIELDS]
    keys_of = [[batch[field] for field in criteo26.FIELDS] for batch in batches]
    peak_ahead = 0
    with KeyPipeline(stores, enabled=pipeline_on) as pipeline:
        pipeline.push(keys_of[0])
        for step in range(steps):
            if step + 1 < steps:
                pipeline.push(keys_of[step + 1])
            pipeline.wait_next()                     # batch t made ahead; t+1 waits for t's pop
            peak_ahead = max(peak_ahead, ahead_bytes(pipeline))
            results = pipeline.pop(step=step)
            for store, result in zip(stores, results):
                store.apply_gradients(result, np.full((len(result.unique_keys), criteo26.DIM), 1e-3, np.float32),
                                      step=step)
            pipeline.wait_next()                     # batch t+1 made ahead, t's results still held here
            peak_ahead = max(peak_ahead, ahead_bytes(pipeline))
    digest = hashlib.sha256()
    for store in stores:
        state = store.export()
        for name in ("keys", "values", "counts", "last_seen", "pending_keys", "pending_counts", "pending_last_seen"):
            digest.update(np.ascontiguousarray(getattr(state, name)).tobytes())
        for name in sorted(state.slots):
            digest.update(np.ascontiguousarray(state.slots[name]).tobytes())
    written = [store.memory_breakdown() for store in stores]
    allocated = [store.memory_breakdown(allocated=True) for store in stores]
    keys = sum(store.size() for store in stores)
    by_structure = {name: sum(w[name] for w in written) for name in written[0]}
    return {"pipeline": "on" if pipeline_on else "off", "keys": keys, "written_bytes": sum(by_structure.values()),
            "written_by_structure": by_structure,
            "allocated_bytes": sum(sum(a.values()) for a in allocated),
            "bytes_per_key": sum(by_structure.values()) / keys, "peak_bytes_ahead": peak_ahead,
            "rss_end_bytes": rss_bytes(), "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "state_digest": digest.hexdigest()}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench/pipeline_memory.py")
    parser.add_argument("--steps", type=int, default=criteo26.WARM_STEPS + criteo26.TIMED_STEPS)
    parser.add_argument("--one", choices=["on", "off"], help=argparse.SUPPRESS)   # the child process
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(one_process(args.one == "on", args.steps)))
        return 0
    runs = {}
    for setting in ("on", "off"):
        done = subprocess.run([sys.executable, __file__, "--steps", str(args.steps), "--one", setting],
                              capture_output=True, text=True, env=dict(os.environ), check=True)
        runs[setting] = json.loads(done.stdout.strip().splitlines()[-1])
    on, off = runs["on"], runs["off"]
    if on["state_digest"] != off["state_digest"]:
        raise RuntimeError("pipeline on and off: the stores' exports differ")
    report = {"steps": args.steps, "on": on, "off": off,
              "bytes_per_key on / off": on["bytes_per_key"] / off["bytes_per_key"],
              "allocated on / off": on["allocated_bytes"] / off["allocated_bytes"],
              "max RSS on - off (bytes)": on["max_rss_bytes"] - off["max_rss_bytes"],
              "peak bytes ahead / written store bytes": on["peak_bytes_ahead"] / on["written_bytes"]}
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
