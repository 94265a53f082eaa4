"""Deltas of an updatable export (SERVE-3, SERVE-4): what changed since the export or the last delta,
found by comparing each table with the snapshot taken then, written in a small checksummed format.

How the trainer knows what changed: ``export_saved_model(..., updatable=True)`` keeps, in this process,
each table's keys and rows as exported (the *base*).  ``export_delta`` exports the store now, compares it
with the base bit for bit (keys ascending on both sides: one ``searchsorted`` and one comparison of the
rows), writes the keys whose row is new or differs, the keys gone, and every dense variable, and makes the
current state the base of the next delta.  The store keeps no change log, so the cost is one pass over the
table in memory (no disk, no TensorFlow), and the store stays exactly as deterministic as it was.

The delta folder (format version 1)::

    <delta>/<input>.data   raw little-endian, one file per input of the apply_delta signature
    <delta>/meta.json      format, format_version, sequence, inputs {name: {dtype, shape}}, tables
    <delta>/manifest.json  every file's size and CRC-32, written last (as a checkpoint's, CKPT-8)

written into a temporary sibling folder and switched into place as a checkpoint table (CKPT-4).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import checkpoint as ckpt
from ..checksum import crc32
from ..errors import CheckpointError, UsageError
from .signature import input_name

FORMAT = "mxrec-ref serving delta"
FORMAT_VERSION = 1


@dataclass
class ServedTable:
    """A table of an updatable export: its store and its keys and rows as the server holds them now."""
    name: str
    store: object
    keys: np.ndarray
    rows: np.ndarray


@dataclass
class ServingBase:
    """What the server of one updatable export holds, as far as this process wrote it."""
    path: str
    tables: list[ServedTable]
    dense: list = field(default_factory=list)   # callables returning each dense variable's value now
    sequence: int = 0


_BASES: dict[str, ServingBase] = {}


def register(base: ServingBase) -> None:
    """Called by the exporters: ``base.path``'s deltas start from the state just exported."""
    _BASES[os.path.realpath(base.path)] = base


def changed_rows(base_keys, base_rows, keys, rows) -> tuple[np.ndarray, np.ndarray]:
    """(mask over ``keys``: new, or its row differs in any bit; the keys of ``base_keys`` gone).
    Both key arrays ascending."""
    return (ckpt.changed_keys(keys, [rows], base_keys, [base_rows]),
            np.setdiff1d(base_keys, keys, assume_unique=True))


def export_delta(export, path) -> dict:
    """Write to ``path`` the delta from what the server of ``export`` (the path an updatable
    ``export_saved_model`` wrote, in this process) holds -- the export and the deltas written for it so
    far -- to the tables and dense variables now.  Returns a summary: ``sequence`` and, per table, the
    counts of keys written and evicted.  A failed call writes nothing and keeps the base."""
    where = os.path.realpath(os.fspath(export)) if isinstance(export, (str, os.PathLike)) else None
    base = _BASES.get(where)
    if base is None:
        raise UsageError(f"export_delta: export: {export!r} is not an updatable export written by this process "
                         f"(export_saved_model(..., updatable=True)); known: {sorted(_BASES)}")
    inputs, now, summary = {}, [], {"sequence": base.sequence + 1, "tables": {}}
    for table in base.tables:
        state = table.store.export()
        values = np.asarray(state.values, dtype=np.float32)
        mask, evicted = changed_rows(table.keys, table.rows, state.keys, values)
        inputs[input_name(table.name, "keys")] = state.keys[mask].astype(np.int64)
        inputs[input_name(table.name, "rows")] = values[mask]
        inputs[input_name(table.name, "evicted")] = evicted.astype(np.int64)
        summary["tables"][table.name] = {"keys": int(mask.sum()), "evicted": len(evicted)}
        now.append((state.keys, values))
    for i, value in enumerate(base.dense):
        inputs[f"dense_{i}"] = np.asarray(value())
    write_delta(path, base.sequence + 1, inputs, summary["tables"])
    for table, (keys, rows) in zip(base.tables, now):     # only once written: a failed call keeps the base
        table.keys, table.rows = keys, rows
    base.sequence += 1
    return summary


def write_delta(path, sequence: int, inputs: dict[str, np.ndarray], tables: dict) -> str:
    """The delta folder at ``path``: one raw file per input, ``meta.json``, ``manifest.json`` last;
    written aside and switched into place (CKPT-4), so a reader sees the old folder or the new one."""
    path = Path(ckpt.checked_directory(path, "export_delta"))
    root, name = path.parent, path.name
    arrays = {key: np.ascontiguousarray(value, dtype=value.dtype.newbyteorder("<")) for key, value in inputs.items()}
    meta = {"format": FORMAT, "format_version": FORMAT_VERSION, "sequence": int(sequence), "tables": tables,
            "inputs": {key: {"dtype": value.dtype.str, "shape": list(value.shape)} for key, value in arrays.items()}}
    try:
        root.mkdir(parents=True, exist_ok=True)
        ckpt.remove_stale_temporaries(root, name)
        with ckpt._temporary_folder(root, name) as temporary:
            digests = ckpt._write_in_parallel(temporary, [(f"{key}.data", value) for key, value in arrays.items()])
            digests["meta.json"] = ckpt._write_file(temporary, "meta.json", ckpt.meta_bytes(meta))
            ckpt._write_manifest(temporary, digests)
            ckpt._fsync_directory(temporary)
            ckpt._switch(temporary, path)
    except OSError as error:
        raise CheckpointError(f"export_delta: path: cannot write {str(path)!r}: {error.strerror or error}") from error
    return str(path)


def read_delta(path) -> tuple[dict, dict[str, np.ndarray]]:
    """(meta, the apply_delta inputs by name, ``sequence`` included) of a delta folder, every file's size
    and CRC-32 checked against the manifest first; any problem raises CheckpointError naming the file."""
    folder = Path(ckpt.checked_directory(path, "read_delta"))

    def read(name):
        try:
            return (folder / name).read_bytes()
        except OSError as error:
            raise CheckpointError(f"read_delta: {str(folder / name)!r}: cannot be read "
                                  f"({error.strerror or error})") from error

    def corrupt(name, problem):
        return CheckpointError(f"read_delta: {str(folder / name)!r}: {problem}")

    try:
        entries = json.loads(read(ckpt.MANIFEST))["files"]
    except (ValueError, KeyError, TypeError) as exc:
        raise corrupt(ckpt.MANIFEST, f"unreadable manifest ({exc})") from None
    files = {}
    for name in sorted(entries):
        data = read(name) if "/" not in name and name not in ("", ".", "..") else b""
        if len(data) != entries[name].get("bytes") or f"{crc32(data):08x}" != entries[name].get("crc32"):
            raise corrupt(name, "size or checksum differs from the manifest: the file is corrupted")
        files[name] = data
    if "meta.json" not in files:
        raise corrupt("meta.json", "the manifest does not list it")
    meta = json.loads(files["meta.json"])
    if meta.get("format") != FORMAT or meta.get("format_version") != FORMAT_VERSION:
        raise corrupt("meta.json", f"format {meta.get('format')!r} version {meta.get('format_version')!r} is not "
                                   f"{FORMAT!r} version {FORMAT_VERSION}")
    inputs = {"sequence": np.int64(meta["sequence"])}
    for name, entry in meta["inputs"].items():
        if f"{name}.data" not in files:
            raise corrupt(f"{name}.data", "the manifest does not list it")
        dtype = np.dtype(entry["dtype"])
        inputs[name] = np.frombuffer(files[f"{name}.data"], dtype).astype(dtype.newbyteorder("="))\
            .reshape(entry["shape"])
    return meta, inputs


def apply_delta(loaded, path) -> dict:
    """Apply the delta at ``path`` to a served model: ``loaded`` is what ``tf.saved_model.load`` returned
    (or its ``apply_delta`` signature).  The same as feeding ``read_delta``'s inputs to the signature."""
    signature = loaded.signatures["apply_delta"] if hasattr(loaded, "signatures") else loaded
    _, inputs = read_delta(path)
    return {name: value.numpy() for name, value in signature(**inputs).items()}
