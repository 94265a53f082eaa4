"""The key pipeline at store level (issue 32, item 6): how much of the store's work leaves a training
step's critical path when batch t+1's keys resolve while step t computes.

The workload is bench/criteo26_store.py's (bench/criteo26.py): the 26-table Criteo-shaped key stream,
one fast store per field (dim 16, Adagrad, truncated-normal initial rows), 64 steps of 4,096 examples,
run as a training loop with a simulated dense step between the lookups and the applies, in three modes:

- ``serial``: per step, ``store.lookup(keys, train=True, step=t)`` on every table, the dense step,
  ``store.apply_gradients(result, grads, step=t)`` on every table;
- ``pipelined``: ``mxrec_ref.pipeline.KeyPipeline(stores)``, batch 0 pushed first; per step
  ``push`` batch t+1 (its resolves start in the pipeline's worker thread), ``pop`` batch t (the
  gathers), the dense step, the applies;
- ``pipelined, worker=False``: the same calls with ``KeyPipeline(stores, worker=False)``: the resolves
  run inside ``push``, in the caller's thread, so nothing overlaps; it isolates the thread's effect.

The dense step stands in for TensorFlow's MLP: a float32 matmul chain over the gathered embeddings
([4096, 26*16] -> HIDDEN -> HIDDEN -> 26*16, numpy's BLAS, which releases the GIL as TF's kernels do;
HIDDEN = MXREC_BENCH_PIPELINE_HIDDEN, default 256: ~1.5x the serial store work of a step on a
2-core Xeon).  Each table's gradient is its gathered unique rows scaled by a per-column signal
derived from the dense step's output: deterministic, the same function in every mode, and it depends
on every row read, so a row read differently changes every later step.

Table sizes: ``empty`` (the stores start empty, as in criteo26_store.py: ~580k keys after 64 steps),
``1e5`` (pre-filled with ~10^5 keys in all, the most frequent ranks of each field, by one training
lookup at step 0), and, with MXREC_BENCH_PIPELINE_HUGE=1 only (minutes, ~3 GB), ``1e7``: the largest
field's table (C3) pre-filled with 10^7 keys, the others empty: examples/s should follow the batch,
not the table.

Every pass starts from fresh stores.  The module's fixture first runs one untimed checking pass of
every (size, mode) and requires bit-identical results (the rows of every lookup result at every step,
each store's final ``export()`` -- values, slots, counts, last-seen, pending history, clock -- and its
``stats()``): a pipelined run that differs from the serial one is a bug, not noise.  Then REPEATS timed
rounds, each running every (size, mode) once, the mode order rotating from round to round so load drift
on a shared machine hits every mode alike.  A pass's time is its whole 64-step loop (the first push
included); the tests hand each (size, mode)'s pass times to pytest-benchmark through a replaying clock,
as bench/test_criteo26_bench.py does, so ``mxrec_ref.benchmarks.ratios`` reports serial min time over
pipelined min time = pipelined examples/s over serial examples/s (above 1: the pipeline is faster).
``extra_info`` also keeps the median and range of the per-round ratios and where each mode's store time
went (lookups, or push / wait for the worker / gather, and applies, in ms per step).
"""
from __future__ import annotations

import hashlib
import os
import time

import numpy as np
import pytest

import criteo26
from mxrec_ref import Initializer, TableConfig, open_store
from mxrec_ref.optimizers import Adagrad
from mxrec_ref.pipeline import KeyPipeline
from interleave import Replay

STEPS = 64
HIDDEN = int(os.environ.get("MXREC_BENCH_PIPELINE_HIDDEN", "256"))
REPEATS = int(os.environ.get("MXREC_BENCH_PIPELINE_REPEATS",
                             "5" if os.environ.get("MXREC_BENCH_PROFILE", "full") == "full" else "3"))
HUGE = os.environ.get("MXREC_BENCH_PIPELINE_HUGE") == "1"
BLAS_THREADS = os.environ.get("MXREC_BENCH_PIPELINE_BLAS_THREADS")     # None: OpenBLAS's default (the cores)
MODES = ("serial", "pipelined", "pipelined, worker=False")
SIZES = ("empty", "1e5", *(("1e7",) if HUGE else ()))
PREFILL_TOTAL = 100_000          # the 1e5 size: keys in all tables together
HUGE_FIELD, HUGE_KEYS = 2, 10_000_000    # the 1e7 size: C3 (10.1M ids) pre-filled with 10^7 keys
PREFILL_CHUNK = 1 << 20
FIRST_STEP = 1                   # the pre-fill lookups run at step 0


# ------------------------------------------------------------------ the stores
def _open_stores() -> list:
    initializer = Initializer(kind="truncated_normal", stddev=criteo26.STDDEV)
    return [open_store(TableConfig(name=field, dim=criteo26.DIM, dynamic_expansion=True, initializer=initializer),
                       Adagrad(criteo26.SPARSE_LR, criteo26.INITIAL_ACCUMULATOR), backend="fast")
            for field in criteo26.FIELDS]


def _prefill_counts(size: str) -> list[int]:
    """Keys to pre-fill per field: none; ~PREFILL_TOTAL spread by water-filling (every field gets
    min(cardinality, c), c chosen so the sum is PREFILL_TOTAL); or HUGE_KEYS in the largest field."""
    if size == "empty":
        return [0] * len(criteo26.CARDINALITIES)
    if size == "1e7":
        return [HUGE_KEYS if field == HUGE_FIELD else 0 for field in range(len(criteo26.CARDINALITIES))]
    low, high = 0, max(criteo26.CARDINALITIES)
    while low < high:                            # the least c with sum(min(card, c)) >= PREFILL_TOTAL
        c = (low + high) // 2
        if sum(min(card, c) for card in criteo26.CARDINALITIES) >= PREFILL_TOTAL:
            high = c
        else:
            low = c + 1
    return [min(card, low) for card in criteo26.CARDINALITIES]


def _prefill(stores: list, counts: list[int]) -> None:
    """Training lookups at step 0 of each field's most frequent ranks (the stream's hottest keys)."""
    for field, (store, n) in enumerate(zip(stores, counts)):
        for start in range(0, n, PREFILL_CHUNK):
            ranks = np.arange(start, min(n, start + PREFILL_CHUNK), dtype=np.int64)
            store.lookup(criteo26.scramble(ranks, field), train=True, step=0)


# ------------------------------------------------------------- the dense step
def _weights(hidden: int) -> list[np.ndarray]:
    rng = np.random.default_rng(32)
    width = len(criteo26.FIELDS) * criteo26.DIM
    shapes = [(width, hidden), (hidden, hidden), (hidden, width)]
    return [(rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32) for shape in shapes]


def _dense_step(results: list, weights: list[np.ndarray]) -> list[np.ndarray]:
    """The stand-in for the MLP's forward and backward: matmuls over the batch's embeddings (BLAS,
    GIL released), reduced to a per-(table, column) signal; each table's gradient rows are its unique
    rows times its signal (float32, deterministic, a function of every row the lookups returned)."""
    back = _matmuls(np.concatenate([result.embeddings() for result in results], axis=1), weights)
    signal = (np.tanh(back.mean(axis=0, dtype=np.float32)) * np.float32(0.01)).reshape(len(results), -1)
    return [result.rows * signal[i] for i, result in enumerate(results)]


def _matmuls(x: np.ndarray, weights: list[np.ndarray]) -> np.ndarray:
    """[batch, 26 * dim] -> HIDDEN -> HIDDEN -> [batch, 26 * dim], ReLU between."""
    for w in weights[:-1]:
        x = np.maximum(x @ w, np.float32(0))
    return x @ weights[-1]


def _openblas():
    """numpy's bundled OpenBLAS (scipy-openblas64), for its thread count; None if not found."""
    import ctypes
    import glob

    libs = glob.glob(os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs", "libscipy_openblas64_*.so"))
    return ctypes.CDLL(libs[0]) if libs else None


def blas_threads(threads: int | str | None) -> int | None:
    """Set numpy's BLAS threads (MXREC_BENCH_PIPELINE_BLAS_THREADS) and return the count in force:
    with 2 cores and 2 BLAS threads the dense step fills the machine, and a resolve running beside it
    slows it down; with 1, one core is left to the key pipeline's worker (as mxRec leaves cores to
    its KeyProcess threads)."""
    lib = _openblas()
    if lib is None:
        if threads is not None:
            pytest.skip("MXREC_BENCH_PIPELINE_BLAS_THREADS: numpy's OpenBLAS library was not found")
        return None
    if threads is not None:
        lib.scipy_openblas_set_num_threads64_(int(threads))
    return int(lib.scipy_openblas_get_num_threads64_())


# ------------------------------------------------------------------ one pass
def _digest(*arrays) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for array in arrays:
        array = np.ascontiguousarray(array)
        h.update(str((array.dtype, array.shape)).encode())
        h.update(array.tobytes())
    return h.digest()


def _final_state(stores: list) -> dict:
    """Each store's export (one digest per field, slots by name) and stats, for the equality check."""
    state = {}
    for store in stores:
        exported = store.export()
        for name in ("keys", "values", "counts", "last_seen", "pending_keys", "pending_counts", "pending_last_seen"):
            state[store.name, name] = _digest(getattr(exported, name))
        for slot, values in sorted(exported.slots.items()):
            state[store.name, "slot " + slot] = _digest(values)
        state[store.name, "clock"] = (exported.clock, exported.clock_source)
        state[store.name, "stats"] = store.stats()
    return state


def run_pass(mode: str, batches: list[list[np.ndarray]], prefill: list[int], weights: list[np.ndarray],
             check: bool = False) -> dict:
    """One pass of ``mode`` over ``batches`` (per step, one key array per table) from fresh stores.
    Returns the loop's seconds, its store time by phase (seconds), and with ``check`` the digest of
    every lookup result at every step and the stores' final state (digesting happens outside the loop's
    time, but inside its wall clock: never time a checking pass)."""
    stores = _open_stores()
    _prefill(stores, prefill)
    _matmuls(np.zeros((criteo26.BATCH, weights[0].shape[0]), np.float32), weights)     # BLAS threads awake
    out = store_loop(stores, mode, batches, weights, check)
    if check:
        out["final"] = _final_state(stores)
        out["keys"] = sum(store.size() for store in stores)
    return out


def store_loop(stores: list, mode: str, batches: list[list[np.ndarray]], weights: list[np.ndarray],
               check: bool = False) -> dict:
    """The training loop of ``mode`` (MODES) over ``stores``: per step the lookups (or push, wait, pop),
    the dense step, the applies.  Returns the loop's seconds, its time by phase (seconds) and, with
    ``check``, the digest of every lookup result (outside the loop's seconds)."""
    phases = dict.fromkeys(("lookup", "push", "wait", "gather", "dense", "apply"), 0.0)
    rows = []
    clock = time.perf_counter

    def dense_and_apply(t, results):
        start = clock()
        grads = _dense_step(results, weights)
        middle = clock()
        for store, result, grad in zip(stores, results, grads):
            store.apply_gradients(result, grad, step=FIRST_STEP + t)
        end = clock()
        phases["dense"] += middle - start
        phases["apply"] += end - middle
        if check:
            rows.append([_digest(r.unique_keys, r.rows, r.inverse, r.admitted) for r in results])
            return clock() - end                 # digest time, left out of the loop's time
        return 0.0

    excluded = 0.0
    begin = clock()
    if mode == "serial":
        for t, keys in enumerate(batches):
            start = clock()
            results = [store.lookup(k, train=True, step=FIRST_STEP + t) for store, k in zip(stores, keys)]
            phases["lookup"] += clock() - start
            excluded += dense_and_apply(t, results)
    else:
        pipeline = KeyPipeline(stores, worker=mode == "pipelined", enabled=True)
        try:
            pipeline.push(batches[0])
            for t in range(len(batches)):
                start = clock()
                if t + 1 < len(batches):
                    pipeline.push(batches[t + 1])
                pushed = clock()
                pipeline.wait_next()     # profiling: pop's time is then its lookups' commits and gathers
                waited = clock()
                results = pipeline.pop(step=FIRST_STEP + t)
                gathered = clock()
                phases["push"] += pushed - start
                phases["wait"] += waited - pushed
                phases["gather"] += gathered - waited
                excluded += dense_and_apply(t, results)
        finally:
            pipeline.close()
    out = {"seconds": clock() - begin - excluded, "phases": phases}
    if check:
        out["rows"] = rows
    return out


def _first_difference(serial: dict, other: dict) -> str | None:
    for t, (a, b) in enumerate(zip(serial["rows"], other["rows"])):
        for field, x, y in zip(criteo26.FIELDS, a, b):
            if x != y:
                return (f"step {FIRST_STEP + t}, table {field}: the lookup result differs "
                        f"(unique keys, rows, inverse or admitted)")
    if len(serial["rows"]) != len(other["rows"]):
        return "the number of steps differs"
    for name, value in serial["final"].items():
        if other["final"].get(name) != value:
            return f"table {name[0]}: final {name[1]} differs ({value!r} vs {other['final'].get(name)!r})"
    return None


# ------------------------------------------------------------------ the runs
@pytest.fixture(scope="module")
def measured():
    before = blas_threads(None)
    threads = blas_threads(BLAS_THREADS)
    try:
        yield _measure(threads)
    finally:
        if before is not None:
            blas_threads(before)       # the later bench modules of the same process run as before


def _measure(threads: int | None) -> dict:
    stream = criteo26.make_stream(STEPS)
    batches = [[b[field] for field in criteo26.FIELDS] for b in
               (criteo26.batch(stream, step, "keys") for step in range(STEPS))]
    weights = _weights(HIDDEN)
    prefills = {size: _prefill_counts(size) for size in SIZES}
    checked = {}
    for size in SIZES:                       # untimed: every mode bit-identical to serial
        runs = {mode: run_pass(mode, batches, prefills[size], weights, check=True) for mode in MODES}
        for mode in MODES[1:]:
            difference = _first_difference(runs["serial"], runs[mode])
            assert difference is None, f"tables {size}, {mode} vs serial: {difference}"
        checked[size] = runs["serial"]["keys"]
        del runs
    times = {(size, mode): [] for size in SIZES for mode in MODES}
    phases = {(size, mode): [] for size in SIZES for mode in MODES}
    for k in range(REPEATS):
        order = MODES[k % len(MODES):] + MODES[:k % len(MODES)]
        for size in SIZES:
            for mode in order:
                run = run_pass(mode, batches, prefills[size], weights)
                times[size, mode].append(run["seconds"])
                phases[size, mode].append(run["phases"])
    return {"times": times, "phases": phases, "keys": checked, "prefill": {s: sum(p) for s, p in prefills.items()},
            "blas_threads": threads}


def _group(size: str) -> str:
    return f"key pipeline, 26-table store loop, tables {size}: pipelined / serial examples per second"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("size", SIZES)
def test_pipeline_store_loop(benchmark, measured, size, mode):
    times = np.array(measured["times"][size, mode])
    pipelined = np.array(measured["times"][size, "pipelined"])
    per_round = times / pipelined                     # this mode's time over pipelined, round by round
    examples = STEPS * criteo26.BATCH
    per_step_ms = {name: 1e3 * float(np.median([p[name] for p in measured["phases"][size, mode]])) / STEPS
                   for name in measured["phases"][size, mode][0]}
    info = dict(
        ratio_group=_group(size), role="candidate" if mode == "pipelined" else mode,
        examples_per_pass=examples, examples_per_second_best=examples / times.min(),
        examples_per_second_median=examples / float(np.median(times)),
        dense_hidden=HIDDEN, blas_threads=measured["blas_threads"], prefilled_keys=measured["prefill"][size],
        final_keys=measured["keys"][size],
        phase_ms_per_step_median={k: round(v, 3) for k, v in per_step_ms.items() if v},
        # the store's time left on the caller's critical path: everything of a step but the dense step
        store_ms_per_step_median=round(sum(v for k, v in per_step_ms.items() if k != "dense"), 3),
        bit_identical_to_serial=True)
    if mode != "pipelined":
        info.update(per_round_ratio_median=float(np.median(per_round)),
                    per_round_ratio_range=[float(per_round.min()), float(per_round.max())])
    table_size_group = f"key pipeline, 26-table store loop, {mode}: one 10^7-key table / empty tables"
    if size == "1e7":                                 # cost should follow the batch, not the table
        info["also"] = [[table_size_group, "candidate"]]
    elif size == "empty" and HUGE:
        info["also"] = [[table_size_group, "empty tables"]]
    benchmark.extra_info.update(info)
    benchmark._timer = Replay(list(times))           # pytest-benchmark's clock (bench/interleave.py)
    benchmark.pedantic(lambda: None, rounds=len(times))
