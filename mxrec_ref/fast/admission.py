"""The fast path's admission rules (spec/admission.md): the twins of mxrec_ref/ref/admission.py.

A training lookup is planned (``plan_train``: counts and admissions worked out, nothing changed;
ADM-1, ADM-2, ADM-3, ADM-6, ADM-7), checked by the store, then committed (``commit_train``:
counts and last-seen, rows for the admitted keys; see cext/_admission.pxi).  The plan is one
``TrainPlan`` object of the core; commit_train returns the lookup's row handles, by which
lookup.gather_rows reads its rows.
"""
from __future__ import annotations

from .._fast import TrainPlan, commit_train, plan_train, plan_train_again, plan_train_hinted

__all__ = ["TrainPlan", "commit_train", "plan_train", "plan_train_again", "plan_train_hinted"]
