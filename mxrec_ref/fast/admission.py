"""The fast path's admission rules (spec/admission.md): the twins of mxrec_ref/ref/admission.py.

A training lookup is planned (counts and admissions computed, nothing changed), checked by the
store, then committed; the loops are cext/_admission.pxi's.
"""
from __future__ import annotations

import numpy as np


def plan_train(core, unique: np.ndarray, occurrences: np.ndarray, coefficient: int, threshold: int):
    """The plan of a training lookup; changes nothing.  A key other than -1 adds coefficient x
    occurrences to its count (ADM-1, ADM-6), saturating at 2^63-1 (ADM-7); a key without a row
    whose count reaches the threshold is admitted (ADM-2); admitted keys stay admitted and keep
    counting (ADM-3).  ``plan[2]`` holds the positions (in ``unique``) of the keys it admits."""
    return core.plan_train_hot(unique, occurrences, coefficient, threshold)


def admitted_of(plan) -> np.ndarray:
    """Positions in ``unique`` of the keys the plan admits, in first-occurrence order (EXP-4)."""
    return plan[2]


def commit_train(core, plan, unique: np.ndarray, clock: int, init: np.ndarray | None, capacity: int,
                 total: int, default_row: np.ndarray):
    """Apply a plan: record counts, last-seen ``clock`` (ADM-4: a pending key is in the history
    without a row) and place the admitted keys' rows from ``init`` (EXP-4, EVI-4, INIT-5); returns
    the lookup's (rows padded to ``total``, admitted, hot index or None): stored values, the
    default row for keys without one (LKP-3, ADM-5)."""
    tags, new_counts, admit, n_new, hot_index = plan
    rows, admitted = core.commit_train(unique, tags, new_counts, admit, n_new, clock, init,
                                       capacity, total, default_row, hot_index)
    return rows, admitted, hot_index
