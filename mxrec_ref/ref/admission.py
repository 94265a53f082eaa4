"""The reference's admission rules (spec/admission.md): counting and the threshold.

The fast twins carry the same names in mxrec_ref/fast/admission.py and cext/_admission.pxi.
"""
from __future__ import annotations

import numpy as np

from ..state import PADDING_KEY
from .expansion import ensure_rows, fill_row, take_row
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


def commit_train(table: Table, new_counts: dict[int, int], to_admit: list[int], clock: int,
                 init_rows: np.ndarray | None, slot_initial_values: dict[str, float], capacity: int) -> None:
    """Apply a plan: record the counts, every key of the lookup last seen at ``clock`` (what EVI-1
    reads; a pending key is in the history without a row, ADM-4), and give each admitted key a row
    (EXP-1) in first-occurrence order (EXP-4), filled with its initial values (INIT-1) and the
    optimizer's initial slot values (INIT-5, EVI-4)."""
    for key, count in new_counts.items():
        table.count[key] = count
        table.last_seen[key] = clock
    rows = []
    for key in to_admit:
        row = table.row_of[key] = take_row(table)
        rows.append(row)
    ensure_rows(table, table.next_row, capacity)
    for j, row in enumerate(rows):
        fill_row(table, row, init_rows[j], slot_initial_values)
