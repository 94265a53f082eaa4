"""The fast path's lookup rules (spec/lookup.md): the twins of mxrec_ref/ref/lookup.py.

The kernels are cext/_lookup.pxi's, under the reference's names: ``dedup`` (LKP-2, LKP-6, ADM-2),
``gather`` (an evaluation lookup's rows: LKP-3, LKP-5, ADM-5, HOT-3), ``locate`` and ``gather_rows``
(the same lookup in two phases: keys resolved to row handles, rows read late by handle), ``position_stats``
(STAT-3, HOT-4) and ``row_handles`` (EXP-5).  A training lookup's handles come from
admission.commit_train.
"""
from __future__ import annotations

import numpy as np

from .._fast import dedup, gather, gather_rows, locate, position_stats, row_handles
from ..state import PADDING_KEY

__all__ = ["dedup", "gather", "gather_rows", "locate", "position_stats", "row_handles", "pad"]


def pad(unique: np.ndarray, total: int) -> np.ndarray:
    """LKP-4: the unique keys padded to ``total`` with key -1 (the kernels padded rows and admitted)."""
    if total > len(unique):
        unique = np.concatenate([unique, np.full(total - len(unique), PADDING_KEY, dtype=np.int64)])
    return unique
