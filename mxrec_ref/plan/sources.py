"""Data samples for the planner (PLAN-8): named columns of int64 keys, in time order.

A column is int64 ``[n]`` or ``[n, k]`` (k ids per row, as a multi-hot feature).  Files are read
by the project's one reader (mxrec_ref/readers.py), which the training job reads them with too, so
a plan's keys are the training keys (PLAN-13).
"""
from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass

import numpy as np

from .. import data as datasets
from .. import readers
from ..errors import UsageError

EMBEDDED_ROWS = 65_536


@dataclass(frozen=True)
class Sample:
    name: str
    columns: dict[str, np.ndarray]
    timestamps: np.ndarray | None = None    # int64 [n], one per row, or None (the clock counts steps)

    @property
    def rows(self) -> int:
        return len(next(iter(self.columns.values())))


def open_sample(data: str | None, source: str | None, rows: int | None = None) -> Sample:
    """``--source module:function`` or ``--data``: "embedded" (the default), or a file or folder the
    project's one reader reads (mxrec_ref/readers.py: MovieLens, Criteo TSV, CSV, TFRecord), read as a
    stream that stops after ``rows`` rows (PLAN-10..PLAN-13)."""
    if source is not None and data not in (None, "embedded"):
        raise UsageError("plan: --source and --data: give one of them")
    if source is not None:
        sample = from_generator(source)
    elif data in (None, "embedded"):
        sample = embedded(rows or EMBEDDED_ROWS)
    else:
        records = readers.read(data, rows=rows, flag="plan: --data")
        return Sample(records.name, records.columns, records.timestamps)
    return head(sample, rows) if rows else sample


def head(sample: Sample, rows: int) -> Sample:
    cut = {name: column[:rows] for name, column in sample.columns.items()}
    stamps = None if sample.timestamps is None else sample.timestamps[:rows]
    return Sample(sample.name, cut, stamps)


def embedded(rows: int = EMBEDDED_ROWS) -> Sample:
    """The project's synthetic Criteo-shaped log (mxrec_ref.data): 26 fields C1..C26, field-offset ids."""
    dataset = datasets.synthetic_criteo(rows)
    columns = {name: np.ascontiguousarray(dataset.categorical[:, i]) for i, name in enumerate(dataset.field_names)}
    return Sample(dataset.name, columns, np.asarray(dataset.timestamps, np.int64))


def from_generator(spec: str) -> Sample:
    """``module:function``: the function (called without arguments) returns a dict of id columns
    (``timestamp`` is the clock, ``label`` is skipped) or an iterable of such dicts (batches, joined)."""
    module_name, _, function_name = spec.partition(":")
    if not module_name or not function_name:
        raise UsageError(f"plan: --source: expected module:function, got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        function = getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError) as error:
        raise UsageError(f"plan: --source: cannot load {spec!r}: {error}") from None
    produced = function()
    parts = [produced] if isinstance(produced, dict) else list(produced)
    if not parts or not all(isinstance(p, dict) for p in parts):
        raise UsageError(f"plan: --source: {spec!r} must return a dict of columns or an iterable of dicts")
    names = [n for n in parts[0] if n not in ("label", "timestamp")]
    columns = {n: np.concatenate([np.asarray(p[n], np.int64) for p in parts]) for n in names}
    stamps = None
    if "timestamp" in parts[0]:
        stamps = np.concatenate([np.broadcast_to(np.asarray(p["timestamp"], np.int64),
                                                 (len(p[names[0]]),)) for p in parts])
    return Sample(spec, columns, stamps)

