"""The reference's eviction rules (spec/eviction.md).

The cut-off (EVI-1) is written once in mxrec_ref/contract.py; the fast twins of these carry
the same names in mxrec_ref/fast/eviction.py and cext/_eviction.pxi.
"""
from __future__ import annotations

import numpy as np

from .table import Table


def expired_keys(table: Table, cutoff: int) -> np.ndarray:
    """Every key in the history, admitted or pending, last seen at or before ``cutoff``,
    ascending (EVI-1, EVI-3)."""
    return np.array(sorted(k for k, seen in table.last_seen.items() if seen <= cutoff), dtype=np.int64)


def remove_keys(table: Table, keys: np.ndarray) -> tuple[int, int]:
    """Remove ``keys`` from the history in the given order: freed rows join the free stack in
    that order (EVI-2, EVI-3); hot ones leave the hot set (HOT-2).  Returns how many held a
    row and how many were pending (STAT-4)."""
    admitted = pending = 0
    for key in keys.tolist():
        del table.count[key]
        del table.last_seen[key]
        table.hot.pop(key, None)
        row = table.row_of.pop(key, None)
        if row is None:
            pending += 1
        else:
            table.free_rows.append(row)
            admitted += 1
    return admitted, pending
