"""Interleaved rounds for the TF training benchmarks (bench/test_criteo26_bench.py,
bench/test_train_bench.py): the variants of one model (dynamic tables with the key pipeline on, the
same graph with it off, static tables) run in rounds whose order rotates, so drift on a shared
machine hits them alike; each variant's test hands its round times to pytest-benchmark through a
clock that replays them (``Replay``), and ``mxrec_ref.benchmarks.ratios`` makes the ratios from them
like every other (min time over min time)."""
from __future__ import annotations

import contextlib
import os
import time

from mxrec_ref.pipeline import SWITCH

ORDERS = [(0, 1, 2), (2, 0, 1), (1, 2, 0)]      # positions of three variants, round by round


class Replay:
    """A clock for pytest-benchmark's runner that makes the k-th timed call last durations[k]."""

    __name__ = "replay of the interleaved rounds"

    def __init__(self, durations):
        self.durations, self.calls, self.now = list(durations), 0, 0.0

    def __call__(self) -> float:
        if self.calls % 2:                        # the runner reads the clock before and after a call
            self.now += self.durations[self.calls // 2]
        self.calls += 1
        return self.now


@contextlib.contextmanager
def key_pipeline(on: bool):
    """``MXREC_KEY_PIPELINE`` set to 1 or 0 inside the block, restored after (PIPE-7: read for every
    batch, and at graph construction: a graph built with it off gets no resolve op)."""
    previous = os.environ.get(SWITCH)
    os.environ[SWITCH] = "1" if on else "0"
    try:
        yield
    finally:
        if previous is None:
            del os.environ[SWITCH]
        else:
            os.environ[SWITCH] = previous


def timed_steps(session, train_op, steps: int, pipeline: bool) -> float:
    """Seconds of ``steps`` runs of ``train_op`` with the key pipeline on or off."""
    with key_pipeline(pipeline):
        start = time.perf_counter()
        for _ in range(steps):
            session.run(train_op)
        return time.perf_counter() - start


def rounds(variants: list[str], run, count: int, steps: int) -> dict[str, list[float]]:
    """``count`` rounds of ``run(variant, steps)`` over the three ``variants``, the order rotating."""
    assert len(variants) == 3
    times = {variant: [] for variant in variants}
    for k in range(count):
        for position in ORDERS[k % len(ORDERS)]:
            times[variants[position]].append(run(variants[position], steps))
    return times


def round_ratios(numerator: list[float], denominator: list[float]) -> dict:
    """Median and range of the round-by-round ratios ``numerator / denominator`` of two variants' times
    (the times of the other variant over this one's: its examples/s over the other's)."""
    ratios = sorted(n / d for n, d in zip(numerator, denominator))
    middle = len(ratios) // 2
    median = ratios[middle] if len(ratios) % 2 else (ratios[middle - 1] + ratios[middle]) / 2
    return {"per_round_ratio_median": median, "per_round_ratio_range": [ratios[0], ratios[-1]]}
