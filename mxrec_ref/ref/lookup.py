"""The reference's lookup rules (spec/lookup.md): dedup, gather and padding.

The fast twins carry the same names in mxrec_ref/fast/lookup.py and cext/_lookup.pxi.
"""
from __future__ import annotations

import numpy as np

from ..state import PADDING_KEY
from .table import Table


def dedup(keys: np.ndarray, counts: np.ndarray | None):
    """Distinct keys in order of first occurrence, the inverse index and the
    number of accesses of each (LKP-2, LKP-6, ADM-2) -- a dictionary walk, no sorting."""
    weights = [1] * keys.size if counts is None else counts.tolist()
    index: dict[int, int] = {}
    inverse = np.empty(keys.size, dtype=np.int64)
    occurrences: list[int] = []
    for position, key in enumerate(keys.tolist()):
        slot = index.get(key)
        if slot is None:
            slot = index[key] = len(occurrences)
            occurrences.append(0)
        occurrences[slot] += weights[position]
        inverse[position] = slot
    unique = np.fromiter(index.keys(), dtype=np.int64, count=len(index))
    return unique, inverse, np.array(occurrences, dtype=np.int64)


def gather(table: Table, unique: np.ndarray, default_row: np.ndarray):
    """(rows, admitted, is_hot) of a lookup's unique keys; changes nothing (LKP-5): a key holding a
    row gets its stored values (LKP-3), from the hot block when it is hot (HOT-3); the others get
    the default row (ADM-5)."""
    rows = np.empty((len(unique), table.dim), dtype=np.float32)
    rows[:] = default_row
    admitted = np.zeros(len(unique), dtype=bool)
    is_hot = np.zeros(len(unique), dtype=bool)
    for i, key in enumerate(unique.tolist()):
        if key in table.hot:
            rows[i] = table.hot_block[table.hot[key]]
            is_hot[i] = True
        row = table.row_of.get(key)
        if row is not None:
            admitted[i] = True
            if not is_hot[i]:
                rows[i] = table.values[row]
    return rows, admitted, is_hot


def position_stats(keys: np.ndarray, inverse: np.ndarray, admitted: np.ndarray, is_hot: np.ndarray):
    """(padding positions, positions answered from a row, positions of hot keys) (STAT-3, HOT-4)."""
    padding = int(np.count_nonzero(keys == PADDING_KEY))
    with_row = int(np.count_nonzero(admitted[inverse])) if keys.size else 0
    hot_hits = int(np.count_nonzero(is_hot[inverse])) if keys.size else 0
    return padding, with_row, hot_hits


def pad(unique: np.ndarray, rows: np.ndarray, admitted: np.ndarray, pad_to: int | None, default_row: np.ndarray):
    """LKP-4: a static-shape lookup pads its outputs to ``pad_to`` with key -1 and default rows."""
    n_unique = len(unique)
    if pad_to is None or pad_to <= n_unique:
        return unique, rows, admitted
    extra = pad_to - n_unique
    return (np.concatenate([unique, np.full(extra, PADDING_KEY, dtype=np.int64)]),
            np.concatenate([rows, np.tile(default_row, (extra, 1))]),
            np.concatenate([admitted, np.zeros(extra, dtype=bool)]))


def row_handles(table: Table, keys: np.ndarray) -> np.ndarray:
    """Each key's row, -1 where it holds none (EXP-5)."""
    return np.array([table.row_of.get(k, -1) for k in keys.tolist()], dtype=np.int64)
