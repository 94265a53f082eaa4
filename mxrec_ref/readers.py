"""One reader for real data files (PLAN-10..PLAN-13, spec/plan.md): what ``mxrec-ref plan --data`` and
``mxrec-ref train --data`` read -- a Criteo TSV, a CSV of id columns, a TFRecord of tf.train.Example,
a MovieLens folder -- into ``Records``: named columns of int64 keys, labels, dense features and
timestamps.  The planner takes the columns (plan/sources.py); the training job the whole (train.py).

Files are read as a stream that stops after ``rows`` rows, so ``--rows`` bounds the memory (PLAN-11),
and every problem of the input is a ``UsageError`` of one line naming the file, the line (or record)
and the column (PLAN-12).  How a cell becomes a key is stated once (PLAN-13): integers as they are,
text by ``string_keys`` -- the Keras layer's function (KERAS-5) -- and a blank cell is the padding
key -1 (no id), so it cannot collide with the id 0.
"""
from __future__ import annotations

import csv
import re
from array import array
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import data as datasets
from .errors import UsageError

PADDING_KEY = -1             # a blank cell: no id (the padding key every lookup skips)
KEY_BITS = 40                # Criteo ids are masked to 40 bits behind their field's number (data.FIELD_SHIFT)
STRING_KEY_BUCKETS = 2**63 - 1
_INTEGER = re.compile(r"[+-]?\d+")
_INT64 = (-2**63, 2**63 - 1)
CRITEO_FIELDS = 40           # label, I1..I13, C1..C26
N_CRITEO_DENSE = 13
N_CRITEO_CATEGORICAL = 26
SKIPPED_COLUMNS = ("label", "timestamp")


@dataclass(frozen=True)
class Records:
    """What a data file holds, in file order (MovieLens: in time order)."""

    name: str
    columns: dict[str, np.ndarray]        # int64 keys [n] (or [n, k]: k ids per row)
    labels: np.ndarray | None = None      # float32 [n]
    dense: np.ndarray | None = None       # float32 [n, d]
    timestamps: np.ndarray | None = None  # int64 [n]
    field_keys: bool = False              # whether each column's keys already carry the field's number

    @property
    def rows(self) -> int:
        return len(next(iter(self.columns.values())))


def string_keys(texts) -> np.ndarray:
    """The int64 keys of string ids (KERAS-5, PLAN-13): FarmHash Fingerprint64 of the UTF-8 bytes
    modulo 2^63 - 1 -- TensorFlow's ``to_hash_bucket_fast``, the very op the Keras layer runs, so
    every part of the project gives a string the same key."""
    texts = list(texts)
    if not texts:
        return np.zeros(0, np.int64)
    import tensorflow as tf    # late: only text ids need TensorFlow

    def keys():
        return tf.strings.to_hash_bucket_fast(tf.constant(texts, tf.string), STRING_KEY_BUCKETS)

    if tf.executing_eagerly():
        return keys().numpy()
    with tf.Graph().as_default() as graph:   # inside a graph (a TF1 script's, a test's): a graph of its own
        keyed = keys()
    with tf.compat.v1.Session(graph=graph) as session:
        return session.run(keyed)


class _Problem:
    """Builds the one-line errors of one file: ``<flag>: '<file>' line N, column 'c': problem``."""

    def __init__(self, flag: str, path: Path):
        self.flag, self.path = flag, path

    def __call__(self, problem: str, line: int | None = None, column: str | None = None, unit: str = "line"):
        where = "" if line is None else f" {unit} {line}"
        where += "" if column is None else f", column {column!r}"
        return UsageError(f"{self.flag}: {str(self.path)!r}{where}: {problem}")


def read(data, *, rows: int | None = None, flag: str = "--data") -> Records:
    """The file or folder ``data``: a MovieLens folder (``ratings.csv``), a ``.tfrecord``, a ``.csv``,
    or a Criteo ``.txt``/``.tsv`` (a ``.txt`` whose first line has commas and no tab is a CSV, as
    DeepCTR's samples are).  At most ``rows`` rows are read."""
    path = Path(data)
    if not path.exists():
        raise UsageError(f"{flag}: no file or folder {str(data)!r}")
    if path.is_dir():
        return movielens(path, rows=rows, flag=flag)
    if path.suffix in (".tfrecord", ".tfrecords"):
        return tfrecord(path, rows=rows, flag=flag)
    if path.suffix == ".csv":
        return csv_columns(path, rows=rows, flag=flag)
    if path.suffix in (".txt", ".tsv"):
        first = _first_line(path, flag)
        if "\t" not in first and "," in first:
            return csv_columns(path, rows=rows, flag=flag)
        return criteo_tsv(path, rows=rows, flag=flag)
    raise UsageError(f"{flag}: {str(data)!r}: not a known format (a MovieLens folder, .csv, .txt/.tsv Criteo, "
                     f".tfrecord)")


# ---------------------------------------------------------------------------- text lines
def _lines(path: Path, problem: _Problem):
    """The file's lines as text, decoded one at a time, so a byte that is not UTF-8 is reported with
    its line and column instead of a traceback (PLAN-12)."""
    try:
        file = open(path, "rb")
    except OSError as error:
        raise problem(f"cannot be read: {error.strerror or error}") from None
    with file:
        for number, raw in enumerate(file, 1):
            try:
                yield number, raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise problem(f"byte {error.object[error.start]:#04x} is not UTF-8 text (at byte {error.start + 1} "
                              f"of the line)", number) from None


class _NumberedCsv:
    """``csv.reader`` over a file's decoded lines (``_lines``) that knows the line of the row it gave last,
    for the errors that name it (PLAN-12)."""

    def __init__(self, path: Path, problem: _Problem):
        self.line = 0
        self._rows = csv.reader(self._text(_lines(path, problem)))

    def _text(self, numbered):
        for self.line, text in numbered:
            yield text

    def __iter__(self):
        return self

    def __next__(self) -> list[str]:
        return next(self._rows)


def _first_line(path: Path, flag: str) -> str:
    for _, line in _lines(path, _Problem(flag, path)):
        return line
    return ""


class _Column:
    """One id column filled row by row: integers as they are, text hashed in one batch at the end."""

    def __init__(self):
        self.keys = array("q")
        self.texts: list[tuple[int, str]] = []

    def add(self, text: str, problem: _Problem, line: int, column: str) -> None:
        if text == "":
            self.keys.append(PADDING_KEY)
        elif _INTEGER.fullmatch(text):
            value = int(text)
            if not _INT64[0] <= value <= _INT64[1]:
                raise problem(f"id {text} is outside int64 [-2^63, 2^63 - 1] (keys are int64)", line, column)
            self.keys.append(value)
        else:
            self.texts.append((len(self.keys), text))
            self.keys.append(0)

    def finish(self) -> np.ndarray:
        keys = np.frombuffer(self.keys, dtype=np.int64).copy() if len(self.keys) else np.zeros(0, np.int64)
        if self.texts:
            keys[[at for at, _ in self.texts]] = string_keys(text for _, text in self.texts)
        return keys


def _number(text: str, kind, problem: _Problem, line: int, column: str):
    try:
        return kind(text)
    except ValueError:
        raise problem(f"{text!r} is not a{'n integer' if kind is int else ' number'}", line, column) from None


# ---------------------------------------------------------------------------------- CSV
def csv_columns(path, *, rows: int | None = None, flag: str = "--data") -> Records:
    """A CSV with a header: every column is an id column (PLAN-13), except ``timestamp`` (integers,
    the clock) and ``label`` (numbers).  Every row has the header's number of fields."""
    path = Path(path)
    problem = _Problem(flag, path)
    reader = _NumberedCsv(path, problem)
    try:
        header = next(reader)
    except StopIteration:
        raise problem("is empty: a CSV needs a header line") from None
    except csv.Error as error:
        raise problem(f"not CSV ({error})", reader.line) from None
    names = [n for n in header if n not in SKIPPED_COLUMNS]
    if not names:
        raise problem("no id columns (every column but 'label' and 'timestamp' is one)", 1)
    duplicated = sorted({n for n in header if header.count(n) > 1})
    if duplicated:
        raise problem(f"the header names columns {duplicated} more than once", 1)
    columns = {name: _Column() for name in names}
    positions = [(header.index(name), name, columns[name]) for name in names]
    label_at = header.index("label") if "label" in header else None
    stamp_at = header.index("timestamp") if "timestamp" in header else None
    labels, stamps = array("d"), array("q")
    count = 0
    while rows is None or count < rows:
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as error:
            raise problem(f"not CSV ({error})", reader.line) from None
        line = reader.line
        if not row:
            continue                                     # a blank line
        if len(row) != len(header):
            missing = header[len(row)] if len(row) < len(header) else None
            raise problem(f"{len(row)} fields, the header has {len(header)}"
                          + (f" (no value for column {missing!r} onward)" if missing else ""), line)
        for at, name, column in positions:
            column.add(row[at], problem, line, name)
        if label_at is not None:
            labels.append(_number(row[label_at], float, problem, line, "label"))
        if stamp_at is not None:
            stamps.append(_number(row[stamp_at], int, problem, line, "timestamp"))
        count += 1
    if not count:
        raise problem("no rows after the header")
    return Records(path.name, {name: column.finish() for name, column in columns.items()},
                   labels=np.array(labels, np.float32) if label_at is not None else None,
                   timestamps=np.array(stamps, np.int64) if stamp_at is not None else None)


# ------------------------------------------------------------------------------- Criteo
def criteo_tsv(path, *, rows: int | None = None, flag: str = "--data") -> Records:
    """Criteo's tab-separated format: label, 13 integer fields I1..I13, 26 hex fields C1..C26 (the
    test file has no label: 39 fields).  C<i>'s key is ``i-1 << 40 | id mod 2^40`` (the fields share
    tables without colliding); a blank categorical field is the padding key; a blank integer field
    is 0 and every integer field becomes ``log1p(max(x, 0))``, Criteo's usual transform."""
    path = Path(path)
    problem = _Problem(flag, path)
    columns = [array("q") for _ in range(N_CRITEO_CATEGORICAL)]
    labels, dense = array("f"), array("f")
    width, count = None, 0
    for line, text in _lines(path, problem):
        if rows is not None and count >= rows:
            break
        parts = text.rstrip("\r\n").split("\t")
        if parts == [""]:
            continue
        if width is None:
            width = len(parts)
            if width not in (CRITEO_FIELDS, CRITEO_FIELDS - 1):
                raise problem(f"expected Criteo's {CRITEO_FIELDS} tab-separated fields (label, I1..I13, C1..C26; "
                              f"39 without the label), got {width}", line)
        elif len(parts) != width:
            raise problem(f"{len(parts)} tab-separated fields, the first line has {width}", line)
        if width == CRITEO_FIELDS:
            labels.append(_number(parts[0], int, problem, line, "label"))
        first_dense = width - N_CRITEO_CATEGORICAL - N_CRITEO_DENSE
        for i, cell in enumerate(parts[first_dense:first_dense + N_CRITEO_DENSE]):
            dense.append(np.log1p(max(_number(cell, int, problem, line, f"I{i + 1}"), 0)) if cell else 0.0)
        for i, cell in enumerate(parts[-N_CRITEO_CATEGORICAL:]):
            if not cell:
                columns[i].append(PADDING_KEY)
                continue
            try:
                value = int(cell, 16)
            except ValueError:
                raise problem(f"{cell!r} is not a hexadecimal id", line, f"C{i + 1}") from None
            columns[i].append((i << datasets.FIELD_SHIFT) | (value & ((1 << KEY_BITS) - 1)))
        count += 1
    if not count:
        raise problem("no rows")
    return Records(path.name, {f"C{i + 1}": np.array(c, np.int64) for i, c in enumerate(columns)},
                   labels=np.array(labels, np.float32) if width == CRITEO_FIELDS else None,
                   dense=np.array(dense, np.float32).reshape(count, N_CRITEO_DENSE), field_keys=True)


# ----------------------------------------------------------------------------- TFRecord
def tfrecord(path, *, rows: int | None = None, flag: str = "--data") -> Records:
    """A TFRecord of ``tf.train.Example``: every int64 feature is an id column (k values per example:
    a ``[n, k]`` column), a bytes feature an id column of text (PLAN-13); ``label`` (int64 or float)
    the labels, ``timestamp`` the clock; other float features are dense.  Every example has the
    same features, each with the same number of values."""
    import tensorflow as tf    # late: only this format needs TensorFlow

    path = Path(path)
    problem = _Problem(flag, path)
    values: dict[str, list] = {}
    kinds: dict[str, str] = {}
    if tf.executing_eagerly():
        records = tf.data.TFRecordDataset(str(path)).as_numpy_iterator()
    else:   # a process that ran an mxRec script has eager execution off; the deprecated reader works there
        records = tf.compat.v1.io.tf_record_iterator(str(path))
    count = 0
    while rows is None or count < rows:
        number = count + 1
        try:
            record = next(records)
        except StopIteration:
            break
        except tf.errors.OpError as error:
            raise problem(f"not a readable TFRecord ({error.message.splitlines()[0]})", number, unit="record") \
                from None
        try:
            example = tf.train.Example.FromString(record)
        except Exception as error:      # noqa: BLE001 - protobuf's DecodeError: the record is not an Example
            raise problem(f"not a tf.train.Example ({error})", number, unit="record") from None
        features = example.features.feature
        if count and sorted(features) != sorted(values):
            raise problem(f"features {sorted(features)}, the first record has {sorted(values)}", number,
                          unit="record")
        for name, feature in features.items():
            kind = feature.WhichOneof("kind")
            if kinds.setdefault(name, kind) != kind:
                raise problem(f"a {kind}, the first record has a {kinds[name]}", number, name, unit="record")
            if kind == "bytes_list":
                try:
                    got = [v.decode("utf-8") for v in feature.bytes_list.value]
                except UnicodeDecodeError:
                    raise problem("a value is not UTF-8 text", number, name, unit="record") from None
            else:
                got = list(getattr(feature, kind).value) if kind else []
            values.setdefault(name, []).append(got)
            if len(got) != len(values[name][0]):
                raise problem(f"{len(got)} values, the first record has {len(values[name][0])}", number, name,
                              unit="record")
        count += 1
    if not count:
        raise problem("no records")
    labels = values.pop("label", None)
    stamps = values.pop("timestamp", None)
    columns, dense = {}, []
    for name in sorted(values):
        if kinds[name] == "float_list":
            dense.append(np.array(values[name], np.float32).reshape(count, -1))
            continue
        if kinds[name] == "bytes_list":
            flat = string_keys(text for row in values[name] for text in row)
        else:
            flat = np.array(values[name], np.int64).reshape(-1)
        array_ = flat.reshape(count, -1)
        columns[name] = array_[:, 0] if array_.shape[1] == 1 else array_
    if not columns:
        raise problem("no id features (int64 or bytes) besides 'label' and 'timestamp'")
    for name, got in (("label", labels), ("timestamp", stamps)):
        if got is not None and len(got[0]) != 1:
            raise problem(f"{len(got[0])} values per example, one expected", column=name)
    return Records(path.name, columns,
                   labels=None if labels is None else np.array(labels, np.float32)[:, 0],
                   dense=np.concatenate(dense, axis=1) if dense else None,
                   timestamps=None if stamps is None else np.array(stamps, np.int64)[:, 0])


# ---------------------------------------------------------------------------- MovieLens
def movielens(folder, *, rows: int | None = None, positive_rating: float = 4.0, flag: str = "--data") -> Records:
    """A MovieLens folder: ``ratings.csv`` (userId, movieId, rating, timestamp; its first ``rows``
    rows) as a click log -- label 1 where the rating is at least ``positive_rating`` -- with fields
    user, movie and the movie's first genre (from ``movies.csv`` where present), each field's keys
    behind its number (``field << 40``), sorted by time so a split is a forward split."""
    folder = Path(folder)
    ratings = folder / "ratings.csv"
    if not ratings.is_file():
        raise UsageError(f"{flag}: {str(folder)!r} is a folder but not a MovieLens one: no ratings.csv in it")
    genres = {}
    if (folder / "movies.csv").is_file():
        for line, row in _dict_rows(folder / "movies.csv", ("movieId", "genres"), None, flag):
            genres[_number(row["movieId"], int, _Problem(flag, folder / "movies.csv"), line, "movieId")] = \
                row["genres"].split("|")[0]
    genre_ids = {g: i for i, g in enumerate(sorted(set(genres.values())))}
    problem = _Problem(flag, ratings)
    users, movies, genre, labels, stamps = array("q"), array("q"), array("q"), array("f"), array("q")
    for line, row in _dict_rows(ratings, ("userId", "movieId", "rating", "timestamp"), rows, flag):
        movie = _number(row["movieId"], int, problem, line, "movieId")
        users.append(_number(row["userId"], int, problem, line, "userId"))
        movies.append(movie)
        genre.append(genre_ids.get(genres.get(movie), len(genre_ids)))
        labels.append(_number(row["rating"], float, problem, line, "rating") >= positive_rating)
        stamps.append(_number(row["timestamp"], int, problem, line, "timestamp"))
    if not len(users):
        raise problem("no rows")
    stamps_ = np.array(stamps, np.int64)
    order = np.argsort(stamps_, kind="stable")
    columns = {name: (np.int64(i) << datasets.FIELD_SHIFT) | np.array(field, np.int64)[order]
               for i, (name, field) in enumerate((("user", users), ("movie", movies), ("genre", genre)))}
    return Records("movielens", columns, labels=np.array(labels, np.float32)[order], timestamps=stamps_[order],
                   field_keys=True)


def _dict_rows(path: Path, required: tuple[str, ...], rows: int | None, flag: str):
    """(line, row dict) of a CSV with a header holding ``required``, at most ``rows`` rows."""
    problem = _Problem(flag, path)
    reader = _NumberedCsv(path, problem)
    header = next(reader, None)
    missing = [name for name in required if name not in (header or [])]
    if missing:
        raise problem(f"the header lacks columns {missing}", 1)
    count = 0
    for row in reader:
        if rows is not None and count >= rows:
            break
        if not row:
            continue
        if len(row) != len(header):
            raise problem(f"{len(row)} fields, the header has {len(header)}", reader.line)
        yield reader.line, dict(zip(header, row))
        count += 1


# ------------------------------------------------------------------------ the train job
def training_dataset(records: Records, *, flag: str = "train: --data") -> datasets.Dataset:
    """``records`` as the training job's data set: one categorical field per id column, each field's
    keys behind its number (``field << 40 | key mod 2^40``, the padding key kept) unless the format
    put them there (Criteo, MovieLens), so the fields share the job's two tables without colliding;
    rows in time order (a stable sort), and where the file has no clock, 64 rows per second of a
    clock starting at 1.6e9 (as the synthetic log's)."""
    if records.labels is None:
        raise UsageError(f"{flag}: {records.name!r} has no labels (a 'label' column or feature, Criteo's first "
                         f"field, MovieLens ratings): the training job needs them")
    wide = [name for name, column in records.columns.items() if column.ndim != 1]
    if wide:
        raise UsageError(f"{flag}: {records.name!r}: columns {wide} hold several ids per row; the training job "
                         f"takes one id per field")
    names = tuple(records.columns)
    fields = []
    for i, name in enumerate(names):
        keys = records.columns[name]
        if not records.field_keys:
            keys = np.where(keys == PADDING_KEY, keys,
                            (np.int64(i) << datasets.FIELD_SHIFT) | (keys & ((1 << KEY_BITS) - 1)))
        fields.append(keys)
    n = records.rows
    stamps = records.timestamps
    if stamps is None:
        stamps = 1_600_000_000 + np.arange(n, dtype=np.int64) // 64
    order = np.argsort(stamps, kind="stable")
    dense = records.dense if records.dense is not None else np.zeros((n, 0), np.float32)
    return datasets.Dataset(records.name, np.stack(fields, axis=1)[order], dense[order], records.labels[order],
                            stamps[order], names)
