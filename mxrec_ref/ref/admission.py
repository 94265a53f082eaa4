"""The reference's admission rules (spec/admission.md): counting and the threshold.

The fast twins carry the same names in mxrec_ref/fast/admission.py and cext/_admission.pxi.
"""
from __future__ import annotations

import numpy as np

from ..state import PADDING_KEY
from .table import Table

COUNT_MAX = 2**63 - 1  # counts saturate here (ADM-7)


def plan_train(table: Table, unique: np.ndarray, occurrences: np.ndarray, coefficient: int,
               threshold: int) -> tuple[dict[int, int], list[int]]:
    """(each key's count after this lookup, the keys it admits in first-occurrence order); changes
    nothing.  A key other than -1 adds coefficient x occurrences to its count (ADM-1, ADM-6),
    saturating (ADM-7); a key without a row whose count reaches the threshold is admitted (ADM-2);
    admitted keys stay admitted and keep counting (ADM-3)."""
    new_counts = {}
    to_admit = []
    for key, n in zip(unique.tolist(), occurrences.tolist()):
        if key == PADDING_KEY:
            continue
        count = min(table.count.get(key, 0) + coefficient * n, COUNT_MAX)
        new_counts[key] = count
        if key not in table.row_of and count >= threshold:
            to_admit.append(key)
    return new_counts, to_admit


def commit_train(table: Table, new_counts: dict[int, int], clock: int) -> None:
    """Record the planned counts; every key of the lookup was last seen at ``clock`` (ADM-4: a
    pending key is in the history without a row; EVI-1 reads last_seen)."""
    for key, count in new_counts.items():
        table.count[key] = count
        table.last_seen[key] = clock
