"""Data samples for the planner (PLAN-6): named columns of integer ids, in time order.

Every reader returns a ``Sample``; a column is int64 ``[n]`` or ``[n, k]`` (k ids per row, as a
multi-hot feature).  Ids are used as keys unchanged, except where a format has no integer ids
(Criteo's hex strings, CSV text), which are read as hex or hashed as the reader says.
"""
from __future__ import annotations

import csv
import importlib
import os
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import data as datasets
from ..errors import UsageError

EMBEDDED_ROWS = 65_536
KEY_BITS = 40     # Criteo and CSV ids are masked to 40 bits and put behind their field's number (data.FIELD_SHIFT)


@dataclass(frozen=True)
class Sample:
    name: str
    columns: dict[str, np.ndarray]
    timestamps: np.ndarray | None = None    # int64 [n], one per row, or None (the clock counts steps)

    @property
    def rows(self) -> int:
        return len(next(iter(self.columns.values())))


def open_sample(data: str | None, source: str | None, rows: int | None = None) -> Sample:
    """``--source module:function`` or ``--data``: "embedded" (the default), a MovieLens folder,
    a Criteo TSV (``.txt``/``.tsv``), a CSV of id columns, or a TFRecord file of tf.train.Example."""
    if source is not None and data not in (None, "embedded"):
        raise UsageError("plan: --source and --data: give one of them")
    if source is not None:
        sample = from_generator(source)
    elif data in (None, "embedded"):
        sample = embedded(rows or EMBEDDED_ROWS)
    else:
        path = Path(data)
        if not path.exists():
            raise FileNotFoundError(f"plan: --data: no file or folder {data!r}")
        if path.is_dir():
            sample = movielens(path)
        elif path.suffix in (".tfrecord", ".tfrecords"):
            sample = tfrecord(path)
        elif path.suffix == ".csv":
            sample = csv_columns(path)
        elif path.suffix in (".txt", ".tsv"):
            sample = criteo_tsv(path)
        else:
            raise UsageError(f"plan: --data: {data!r}: not a known format (a MovieLens folder, .csv, .txt/.tsv "
                             f"Criteo, .tfrecord)")
    return head(sample, rows) if rows else sample


def head(sample: Sample, rows: int) -> Sample:
    cut = {name: column[:rows] for name, column in sample.columns.items()}
    stamps = None if sample.timestamps is None else sample.timestamps[:rows]
    return Sample(sample.name, cut, stamps)


def embedded(rows: int = EMBEDDED_ROWS) -> Sample:
    """The project's synthetic Criteo-shaped log (mxrec_ref.data): 26 fields C1..C26, field-offset ids."""
    return _from_dataset(datasets.synthetic_criteo(rows))


def movielens(folder) -> Sample:
    """A MovieLens ``ratings.csv`` folder, read by the training job's loader: user, movie, genre."""
    return _from_dataset(datasets.movielens(folder))


def _from_dataset(dataset) -> Sample:
    columns = {name: np.ascontiguousarray(dataset.categorical[:, i]) for i, name in enumerate(dataset.field_names)}
    return Sample(dataset.name, columns, np.asarray(dataset.timestamps, np.int64))


def criteo_tsv(path) -> Sample:
    """Criteo's tab-separated format: label, 13 integer fields, 26 hex categorical fields C1..C26
    (an empty field is id 0 of its field)."""
    fields = [[] for _ in range(26)]
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 26:
                raise UsageError(f"plan: --data: {str(path)!r} line {number}: expected Criteo's 40 tab-separated "
                                 f"fields (26 categorical last), got {len(parts)}")
            for i, text in enumerate(parts[-26:]):
                fields[i].append(int(text, 16) if text else 0)
    columns = {f"C{i + 1}": _field_keys(i, np.array(ids, np.int64)) for i, ids in enumerate(fields)}
    return Sample(Path(path).name, columns)


def csv_columns(path) -> Sample:
    """A CSV with a header: every column is an id column (integers as they are, other text hashed
    with CRC-32), except ``timestamp``, which becomes the clock, and ``label``, which is skipped."""
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
        names = [n for n in (reader.fieldnames or []) if n not in ("label", "timestamp")]
    if not rows or not names:
        raise UsageError(f"plan: --data: {str(path)!r}: no rows or no id columns")
    columns = {name: np.array([_id(row[name]) for row in rows], np.int64) for name in names}
    stamps = None
    if "timestamp" in rows[0]:
        stamps = np.array([int(row["timestamp"]) for row in rows], np.int64)
    return Sample(Path(path).name, columns, stamps)


def _id(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return zlib.crc32(text.encode())


def tfrecord(path) -> Sample:
    """A TFRecord of ``tf.train.Example``: every int64 feature is an id column (a feature with k
    values per example is a ``[n, k]`` column); ``timestamp`` becomes the clock."""
    import tensorflow as tf    # late: only this format needs TensorFlow

    values: dict[str, list] = {}
    if tf.executing_eagerly():
        records = tf.data.TFRecordDataset(str(path)).as_numpy_iterator()
    else:   # a process that ran an mxRec script has eager execution off; the deprecated reader works there
        records = tf.compat.v1.io.tf_record_iterator(str(path))
    for record in records:
        example = tf.train.Example.FromString(record)
        for name, feature in example.features.feature.items():
            if feature.WhichOneof("kind") == "int64_list":
                values.setdefault(name, []).append(list(feature.int64_list.value))
    stamps = values.pop("timestamp", None)
    columns = {}
    for name, lists in sorted(values.items()):
        widths = {len(v) for v in lists}
        if len(widths) != 1:
            raise UsageError(f"plan: --data: {str(path)!r}: feature {name!r} has {sorted(widths)} values per "
                             f"example; the planner needs the same number in every example")
        array = np.array(lists, np.int64)
        columns[name] = array[:, 0] if array.shape[1] == 1 else array
    if not columns:
        raise UsageError(f"plan: --data: {str(path)!r}: no int64 features")
    return Sample(Path(path).name, columns, None if stamps is None else np.array(stamps, np.int64)[:, 0])


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


def _field_keys(field: int, ids: np.ndarray) -> np.ndarray:
    return (np.int64(field) << datasets.FIELD_SHIFT) | (ids & ((1 << KEY_BITS) - 1))
