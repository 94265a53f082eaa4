"""Hot Embedding (spec/hot.md) in the fast path: the same table with the hot
block on (default hot_rows, refreshed) and off (hot_rows=0), side by side.

Each table holds ROWS keys of dim 16 -- values, entries and map several times
the CPU's last-level cache -- admitted by warm training lookups, then counted
by Zipf training batches up to the 1000th training lookup, whose refresh
(HOT_EMB_UPDATE_STEP at its default, 1000) picks the hot set; the timed
lookups stay below the next one.  Two row layouts:

* ``scattered``: keys admitted in random order, so the hot keys' rows are
  spread over the whole table (a long-running table, after evictions and
  growth);
* ``rank``: keys admitted hottest first (bench/test_store_bench.py's tables),
  so rows 0..16k *are* the hot keys: the main table already holds them as
  compactly as the block does.

Measured: evaluation lookup + gather (``lookup(train=False).embeddings()``)
and training lookups, over Zipf batches of exponent 1.05 (workloads.py) and
1.2.  ``extra_info`` carries ``ratio_group``/``role`` for bench/ratios.py
(hot_rows=0 time / hot-on time: above 1 means the block made it faster) and,
on the hot-on benchmark, the same ratio measured interleaved (on, off, on,
off, ... on the same batches), which cancels drifting load on a shared VM.
"""
from __future__ import annotations

import os
import time

import numpy as np
import pytest

from mxrec_ref import Initializer, SGD, TableConfig, hot, open_store

from workloads import BATCH, DIM, scramble, size_scaled

ROWS = size_scaled(3_000_000)     # ~100 bytes a key (97.4 measured): ~300 MB a table
WARM = 8                          # distinct Zipf training batches that set the counts
ROUNDS = 16
EXPONENTS = (1.05, 1.2)


def _zipf_batches(n: int, seed: int, exponent: float, universe: int = ROWS) -> list[np.ndarray]:
    """workloads.zipf_batches with another exponent."""
    rng = np.random.default_rng(seed)
    cdf = np.cumsum(1.0 / np.arange(1, universe + 1, dtype=np.float64) ** exponent)
    cdf /= cdf[-1]
    return [scramble(np.minimum(np.searchsorted(cdf, rng.random(BATCH)), universe - 1)) for _ in range(n)]


LOOKUPS = {e: _zipf_batches(ROUNDS + 1, seed=2, exponent=e) for e in EXPONENTS}


def _build(layout: str, hot_rows):
    config = TableConfig("hot_bench", dim=DIM, device_vocabulary_size=ROWS,
                         initializer=Initializer(kind="uniform", minval=-0.1, maxval=0.1))
    keys = scramble(np.arange(ROWS))
    if layout == "scattered":
        keys = keys[np.random.default_rng(5).permutation(ROWS)]
    previous = os.environ.get(hot.UPDATE_STEP_VARIABLE)
    os.environ[hot.UPDATE_STEP_VARIABLE] = str(hot.DEFAULT_UPDATE_STEP)
    try:
        store = open_store(config, SGD(0.01), backend="fast", hot_rows=hot_rows)
    finally:
        if previous is None:
            del os.environ[hot.UPDATE_STEP_VARIABLE]
        else:
            os.environ[hot.UPDATE_STEP_VARIABLE] = previous
    for start in range(0, ROWS, BATCH):
        store.lookup(keys[start:start + BATCH], step=0)
    warm = _zipf_batches(WARM, seed=1, exponent=1.05)
    while store.stats()["train_lookups"] < hot.DEFAULT_UPDATE_STEP:   # the last one refreshes
        store.lookup(warm[store.stats()["train_lookups"] % WARM], step=1)
    return store


@pytest.fixture(scope="module", params=["scattered", "rank"])
def tables(request):
    """(hot on, hot off) stores with the same keys, rows and counts."""
    on, off = _build(request.param, None), _build(request.param, 0)
    stats = on.stats()
    assert stats["hot_refreshes"] == 1 and stats["hot_rows"] == hot.hot_rows("hot_bench", DIM, None)
    assert off.stats()["hot_rows"] == 0 and on.size() == off.size() == ROWS
    started = time.perf_counter()
    on.engine.refresh_hot()     # what one refresh costs (same counts: the same hot set again)
    refresh_ms = (time.perf_counter() - started) * 1e3
    on.engine.counters["hot_refreshes"] -= 1
    return request.param, on, off, refresh_ms


def _eval(store, batch):
    return store.lookup(batch, train=False).embeddings()


def _train(store, batch):
    return store.lookup(batch, step=2)


def _ahead(store, batch):
    """The key pipeline's work ahead (PIPE-1), untimed: what the step's gather takes."""
    return store.resolve_ahead(batch)


def _gather(store, ahead):
    return store.gather(ahead, step=2)


# kind: (untimed work before each timed call, or None; the timed call)
KINDS = {"lookup+gather": (None, _eval), "train lookup": (None, _train),
         "pipelined train (gather)": (_ahead, _gather)}


def _interleaved(run, on, off, batches, repeats: int = 4, before=None) -> dict:
    """Times of on and off, alternating on the same batches (``before``: untimed, each call's argument)."""
    t_on, t_off = [], []
    for _ in range(repeats):
        for batch in batches:
            on_batch, off_batch = (batch, batch) if before is None else (before(on, batch), before(off, batch))
            start = time.perf_counter()
            run(on, on_batch)
            middle = time.perf_counter()
            run(off, off_batch)
            t_on.append(middle - start)
            t_off.append(time.perf_counter() - middle)
    t_on, t_off = np.array(t_on), np.array(t_off)
    return {"interleaved_on_min_ms": float(t_on.min() * 1e3), "interleaved_off_min_ms": float(t_off.min() * 1e3),
            "interleaved_ratio_of_mins": float(t_off.min() / t_on.min()),
            "interleaved_ratio_median": float(np.median(t_off / t_on))}


@pytest.mark.parametrize("exponent", EXPONENTS)
@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("hot_block", ["on", "off"])
def test_hot_block(benchmark, tables, kind, exponent, hot_block):
    """``pipelined train``: the step's part of a training lookup whose keys were resolved ahead (issue 32:
    Hot Embedding's bookkeeping off the critical path): what the block costs the step then."""
    layout, on, off, refresh_ms = tables
    before, run = KINDS[kind]
    store = on if hot_block == "on" else off
    batches = LOOKUPS[exponent]
    info = {"ratio_group": f"hot {kind}, Zipf {exponent}, {layout} rows: hot_rows=0 / default",
            "role": "candidate" if hot_block == "on" else "hot_rows=0", "rows": ROWS}
    if hot_block == "on":
        stats_before = on.stats()
        run(on, batches[0] if before is None else before(on, batches[0]))
        after = on.stats()
        info.update(interleaved := _interleaved(run, on, off, batches[:8], before=before))
        info.update(hot_rows=after["hot_rows"], refresh_ms=refresh_ms,
                    refresh_per_lookup_ms_at_default_step=refresh_ms / hot.DEFAULT_UPDATE_STEP,
                    hot_hit_ratio=(after["hot_hit_positions"] - stats_before["hot_hit_positions"])
                    / max(1, after["key_positions"] - stats_before["key_positions"]))
        print(f"\n{info['ratio_group']}: interleaved off/on median {interleaved['interleaved_ratio_median']:.2f}, "
              f"hit ratio {info['hot_hit_ratio']:.2f}")
    benchmark.extra_info.update(info)
    cycle = iter(batches * 4)
    if before is None:
        benchmark.pedantic(lambda: run(store, next(cycle)), rounds=ROUNDS, warmup_rounds=1)
    else:
        benchmark.pedantic(lambda ahead: run(store, ahead), setup=lambda: ((before(store, next(cycle)),), {}),
                           rounds=ROUNDS, warmup_rounds=1)
