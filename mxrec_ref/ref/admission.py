"""The reference's admission rules (spec/admission.md): counting and the threshold.

The fast twins carry the same names in mxrec_ref/fast/admission.py and cext/_admission.pxi.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..state import PADDING_KEY
from .expansion import ensure_rows, fill_row, take_row
from .lookup import NOT_HOT, row_handles
from .table import Table

COUNT_MAX = 2**63 - 1  # counts saturate here (ADM-7)


@dataclass(frozen=True)
class TrainPlan:
    """What a training lookup will do, worked out by plan_train without changing anything, checked
    by the store, then applied by commit_train (CON-4); the fast twin's TrainPlan has the same fields."""
    unique: np.ndarray                # int64 [n] the lookup's unique keys
    new_counts: np.ndarray            # int64 [n] each key's count after the lookup (0 for padding)
    admit: np.ndarray                 # int64 [k] positions in ``unique`` of the keys to admit, in order
    hot_index: np.ndarray | None      # int32 [n] each key's hot index (NOT_HOT), or None without a hot set


def plan_train(table: Table, unique: np.ndarray, occurrences: np.ndarray, coefficient: int,
               threshold: int) -> TrainPlan:
    """The TrainPlan of a training lookup of ``unique`` (with ``occurrences`` accesses each),
    changing nothing.  A key other than -1 adds coefficient x occurrences to its count (ADM-1,
    ADM-6), saturating (ADM-7); a key without a row whose count reaches the threshold is admitted
    (ADM-2); admitted keys stay admitted and keep counting (ADM-3)."""
    new_counts = np.zeros(len(unique), dtype=np.int64)
    admit = []
    for position, (key, n) in enumerate(zip(unique.tolist(), occurrences.tolist())):
        if key == PADDING_KEY:
            continue
        count = new_counts[position] = min(table.count.get(key, 0) + coefficient * n, COUNT_MAX)
        if key not in table.row_of and count >= threshold:
            admit.append(position)
    hot_index = None
    if table.hot and len(unique):
        hot_index = np.array([table.hot.get(key, NOT_HOT) for key in unique.tolist()], dtype=np.int32)
    return TrainPlan(unique, new_counts, np.array(admit, dtype=np.int64), hot_index)


def commit_train(table: Table, plan: TrainPlan, clock: int, init_rows: np.ndarray | None, capacity: int,
                 total: int):
    """Apply ``plan`` (made by plan_train on this table, nothing changed since): record the counts,
    every key of the lookup last seen at ``clock`` (what EVI-1 reads; a pending key is in the history
    without a row, ADM-4), and give each admitted key a row (EXP-1) in first-occurrence order
    (EXP-4), filled with ``init_rows`` (INIT-1) and the optimizer's initial slot values (INIT-5,
    EVI-4).  Reads no row value: returns the lookup's (admitted, row handles) padded to ``total``
    (-1: no row, the padding too), as locate would after the commit; gather_rows reads the rows."""
    for key, count in zip(plan.unique.tolist(), plan.new_counts.tolist()):
        if key == PADDING_KEY:
            continue
        table.count[key] = count
        table.last_seen[key] = clock
    rows = []
    for key in plan.unique[plan.admit].tolist():
        row = table.row_of[key] = take_row(table)
        rows.append(row)
    ensure_rows(table, table.next_row, capacity)
    for j, row in enumerate(rows):
        fill_row(table, row, init_rows[j])
    handles = np.full(max(total, len(plan.unique)), -1, dtype=np.int64)      # -1: no row, the padding too
    handles[:len(plan.unique)] = row_handles(table, plan.unique)
    return handles >= 0, handles
