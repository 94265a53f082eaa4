"""The fast path's lookup rules (spec/lookup.md): the twins of mxrec_ref/ref/lookup.py.

dedup, the gathers and the position counts run in the core without the GIL (cext/_lookup.pxi).
"""
from __future__ import annotations

import numpy as np

from ..state import PADDING_KEY


def dedup(core, keys: np.ndarray, counts: np.ndarray | None):
    """Distinct keys in order of first occurrence, the inverse index and the number of accesses
    of each (LKP-2, LKP-6, ADM-2): a scratch hash table, no sorting."""
    return core.dedup(keys, counts)


def gather(core, unique: np.ndarray, total: int, default_row: np.ndarray):
    """An evaluation lookup's (rows padded to ``total``, admitted, hot index of each unique key or
    None): the stored row of each key holding one, the hot block consulted first (HOT-3), the
    default row for the others and the padding (LKP-3, LKP-4, ADM-5).  Changes nothing (LKP-5)."""
    return core.lookup_eval_hot(unique, total, default_row)


def position_stats(core, keys, inverse, admitted, hot_index) -> tuple[int, int, int]:
    """(padding positions, positions answered from a row, positions of hot keys) (STAT-3, HOT-4)."""
    if hot_index is None:
        padding, with_row = core.position_stats(keys, inverse, admitted)
        return padding, with_row, 0
    return core.position_stats_hot(keys, inverse, admitted, hot_index)


def pad(unique: np.ndarray, total: int) -> np.ndarray:
    """LKP-4: the unique keys padded to ``total`` with key -1 (the core padded rows and admitted)."""
    if total > len(unique):
        unique = np.concatenate([unique, np.full(total - len(unique), PADDING_KEY, dtype=np.int64)])
    return unique


def row_handles(core, keys: np.ndarray) -> np.ndarray:
    """Each key's row, -1 where it holds none (EXP-5)."""
    return core.row_handles(keys)
