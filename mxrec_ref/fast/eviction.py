"""The fast path's eviction rules (spec/eviction.md): the twins of mxrec_ref/ref/eviction.py.

The cut-off (EVI-1) is written once in mxrec_ref/contract.py; the scans are cext/_eviction.pxi's.
"""
from __future__ import annotations

import numpy as np


def expired_keys(core, cutoff: int) -> np.ndarray:
    """Every key in the history, admitted or pending, last seen at or before ``cutoff``,
    ascending (EVI-1, EVI-3)."""
    return core.expired_keys(cutoff)


def remove_keys(core, keys: np.ndarray) -> tuple[int, int]:
    """Remove ``keys`` in the given order: freed rows join the free stack in that order (EVI-2,
    EVI-3); hot ones leave the hot set (HOT-2).  Returns how many held a row and how many were
    pending (STAT-4)."""
    return core.remove_keys(keys)
