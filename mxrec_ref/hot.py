"""Hot Embedding's policy, shared by every backend (spec/hot.md).

mxRec marks the most frequently accessed keys every ``HOT_EMB_UPDATE_STEP``
steps and serves them from a compact block the device gathers first
(reference 2.7).  It is a speed feature: a store with the hot block returns
exactly what it returns without it (HOT-3).  The backends implement the
block; this module holds the rules they share, so they choose the same keys
at the same time.
"""
from __future__ import annotations

import os

import numpy as np

from .errors import ConfigError

UPDATE_STEP_VARIABLE = "HOT_EMB_UPDATE_STEP"
DEFAULT_UPDATE_STEP = 1000        # mxRec's default
DEFAULT_HOT_BYTES = 1 << 20       # the block fits a core's L2 cache


def update_step(table: str) -> int:
    """Training lookups between refreshes of the hot set: HOT_EMB_UPDATE_STEP,
    read when the store opens (HOT-1)."""
    text = os.environ.get(UPDATE_STEP_VARIABLE)
    if text is None or text.strip() == "":
        return DEFAULT_UPDATE_STEP
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 2**31 - 1:
        raise ConfigError(f"table {table!r}: {UPDATE_STEP_VARIABLE}: must be an integer in [1, 2**31-1], "
                          f"got {text!r}")
    return value


def hot_rows(table: str, dim: int, requested: int | None) -> int:
    """Rows of the hot block: ``requested`` (0 turns the block off), else as
    many rows as fit DEFAULT_HOT_BYTES (HOT-1)."""
    if requested is None:
        return max(1, DEFAULT_HOT_BYTES // (4 * dim))
    if isinstance(requested, bool) or not isinstance(requested, (int, np.integer)) \
            or not 0 <= int(requested) <= 10**9:
        raise ConfigError(f"table {table!r}: hot_rows: must be an integer in [0, 10**9], got {requested!r}")
    return int(requested)


def is_refresh_due(train_lookups: int, step: int) -> bool:
    """After every ``step``-th training lookup of the store (HOT-2)."""
    return train_lookups % step == 0


def choose_hot_keys(keys: np.ndarray, counts: np.ndarray, n: int) -> np.ndarray:
    """The ``n`` keys with the highest counts, ties by the smaller key, in that
    order (HOT-2).  ``keys`` are the keys holding a row in memory."""
    if n <= 0 or len(keys) == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((keys, -counts.astype(np.int64)))   # last key primary: count descending
    return np.ascontiguousarray(keys[order[:n]], dtype=np.int64)
