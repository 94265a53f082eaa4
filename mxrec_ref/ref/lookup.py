"""The reference's lookup rules (spec/lookup.md): dedup, gather (or locate, then gather_rows: the
same lookup with its rows read late, by handle), position counts and padding.

The fast twins carry the same names in mxrec_ref/fast/lookup.py and cext/_lookup.pxi.
"""
from __future__ import annotations

import numpy as np

from ..state import PADDING_KEY
from .table import Table

NOT_HOT = -1   # the hot index of a key outside the hot set (the fast core's EMPTY)


def dedup(table: Table, keys: np.ndarray, weights: np.ndarray | None):
    """Distinct keys in order of first occurrence, the inverse index and the
    number of accesses of each, ``weights`` (int64 per position) summed or positions counted
    (LKP-2, LKP-6, ADM-2) -- a dictionary walk, no sorting.  ``table`` is not read (the fast
    twin's core lends its scratch space); it keeps the twins' signatures alike."""
    weights = [1] * keys.size if weights is None else weights.tolist()
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


def gather(table: Table, unique: np.ndarray, total: int, default_row: np.ndarray):
    """(rows padded to ``total``, admitted, each key's hot index or None without a hot set) of a
    lookup's unique keys; changes nothing (LKP-5): a key holding a row gets its stored values
    (LKP-3), from the hot block when it is hot (HOT-3); the others and the padding past the unique
    keys get the default row (ADM-5, LKP-4).  A key that is not hot has hot index ``NOT_HOT``."""
    rows = np.empty((max(total, len(unique)), table.dim), dtype=np.float32)
    rows[:] = default_row
    admitted = np.zeros(len(rows), dtype=bool)
    hot_index = np.full(len(unique), NOT_HOT, dtype=np.int32)
    for i, key in enumerate(unique.tolist()):
        if key in table.hot:
            hot_index[i] = table.hot[key]
            rows[i] = table.hot_block[hot_index[i]]
        row = table.row_of.get(key)
        if row is not None:
            admitted[i] = True
            if hot_index[i] == NOT_HOT:
                rows[i] = table.values[row]
    return rows, admitted, (hot_index if table.hot and len(unique) else None)


def locate(table: Table, unique: np.ndarray, total: int):
    """An evaluation lookup's keys resolved, no row read and nothing changed (LKP-5): (each key's
    row handle, -1 without a row and for the padding up to ``total``; admitted, likewise padded;
    each key's hot index or None without a hot set, as gather gives it).  gather_rows reads the
    rows."""
    handles = np.full(max(total, len(unique)), -1, dtype=np.int64)
    handles[:len(unique)] = row_handles(table, unique)
    hot_index = None
    if table.hot and len(unique):
        hot_index = np.array([table.hot.get(key, NOT_HOT) for key in unique.tolist()], dtype=np.int32)
    return handles, handles >= 0, hot_index


def gather_rows(table: Table, handles: np.ndarray, total: int, default_row: np.ndarray) -> np.ndarray:
    """The rows of a resolved lookup, read now by the ``handles`` its resolve made (locate or
    commit_train), so they show every update since (LKP-3): row ``handles[u]`` where it is not -1,
    the default row for -1 and for the padding up to ``total`` (ADM-5, LKP-4).  A hot key's row
    equals its block copy (HOT-3, write-through): it is read from the row.  Changes nothing; every
    handle must name a row holding a key, else ValueError."""
    held = set(table.row_of.values())
    for at, handle in enumerate(handles.tolist()):
        if handle != -1 and handle not in held:
            raise ValueError(f"gather_rows: handle {handle} at {at} names no row holding a key")
    rows = np.empty((max(total, len(handles)), table.dim), dtype=np.float32)
    rows[:] = default_row
    has_row = np.flatnonzero(handles >= 0)
    rows[has_row] = table.values[handles[has_row]]
    return rows


def position_stats(table: Table, keys: np.ndarray, inverse: np.ndarray, admitted: np.ndarray,
                   hot_index: np.ndarray | None):
    """(padding positions, positions answered from a row, positions of hot keys) (STAT-3, HOT-4);
    ``hot_index``: each unique key's hot index from gather or plan_train, or None (no key is hot).
    ``table`` is not read: counting is per position."""
    padding = int(np.count_nonzero(keys == PADDING_KEY))
    with_row = int(np.count_nonzero(admitted[inverse])) if keys.size else 0
    hot_hits = int(np.count_nonzero(hot_index[inverse] != NOT_HOT)) if keys.size and hot_index is not None else 0
    return padding, with_row, hot_hits


def pad(unique: np.ndarray, total: int) -> np.ndarray:
    """LKP-4: the unique keys padded to ``total`` with key -1 (gather padded the rows and admitted)."""
    if total > len(unique):
        unique = np.concatenate([unique, np.full(total - len(unique), PADDING_KEY, dtype=np.int64)])
    return unique


def row_handles(table: Table, keys: np.ndarray) -> np.ndarray:
    """Each key's row, -1 where it holds none (EXP-5)."""
    return np.array([table.row_of.get(k, -1) for k in keys.tolist()], dtype=np.int64)
