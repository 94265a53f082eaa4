"""Deltas of an updatable export (SERVE-3, SERVE-4): what changed since the export or the last delta,
found through the store's change log, written in a small checksummed format.

How the trainer knows what changed: ``export_saved_model(..., updatable=True)`` starts each table's change
log (``Store.keep_change_log``: the keys each training lookup, ``apply_gradients`` and ``evict`` touches,
one array reference per call).  ``export_delta`` takes the log, reads the rows those keys hold now
(``Store.rows_now``: only those rows, no statistic changes) and writes them; the logged keys that hold no row
now are written as evicted (a key the server never held is ignored there).  The cost grows with the keys
touched, not with the table.  Where the log cannot say (a ``load`` or warm start replaced rows wholesale, or a
sharded or replicated store), the delta carries every row the table holds and evicts what the server holds
beyond them: this process keeps the server's key set as the export's keys plus each delta's changes, applied
only then.  The store's results never depend on the log.

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
    """A table of an updatable export: its store, and the keys the server holds: the export's keys, then
    each delta's (written keys, evicted keys) in order, merged only when a full delta needs them."""
    name: str
    store: object
    exported_keys: np.ndarray
    deltas: list = field(default_factory=list)
    untaken: np.ndarray | None = None   # keys of a log taken by a delta that failed: the next one writes them
    full_next: bool = False             # a failed delta was a full one

    def server_keys(self) -> np.ndarray:
        keys = self.exported_keys
        for written, evicted in self.deltas:
            keys = np.union1d(np.setdiff1d(keys, evicted, assume_unique=True), written)
        return keys


@dataclass
class ServingBase:
    """What the server of one updatable export holds, as far as this process wrote it."""
    path: str
    tables: list[ServedTable]
    dense: list = field(default_factory=list)   # callables returning each dense variable's value now
    sequence: int = 0


_BASES: dict[str, ServingBase] = {}


def register(base: ServingBase) -> None:
    """Called by the exporters once the export is written: ``base.path``'s deltas start from the state just
    exported (each store's change log restarts now)."""
    for table in base.tables:
        table.store.keep_change_log()
    _BASES[os.path.realpath(base.path)] = base


def table_delta(table: ServedTable) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """(keys to write ascending, their rows, keys to evict, whether this is a full delta) of one table."""
    logged = table.store.take_change_log()
    if logged is not None and not table.full_next:
        if table.untaken is not None:
            logged = np.union1d(logged, table.untaken)
        held, rows = table.store.rows_now(logged)
        return logged[held], rows, logged[~held], False
    state = table.store.export()                    # every row; evict what the server holds beyond them
    return (state.keys, np.asarray(state.values, np.float32),
            np.setdiff1d(table.server_keys(), state.keys, assume_unique=True), True)


def export_delta(export, path) -> dict:
    """Write to ``path`` the delta from what the server of ``export`` (the path an updatable
    ``export_saved_model`` wrote, in this process) holds -- the export and the deltas written for it so
    far -- to the tables and dense variables now.  Returns a summary: ``sequence`` and, per table, the
    counts of keys written and evicted and whether the delta is full.  A failed call writes nothing, and
    the next delta still carries what this one would have."""
    where = os.path.realpath(os.fspath(export)) if isinstance(export, (str, os.PathLike)) else None
    base = _BASES.get(where)
    if base is None:
        raise UsageError(f"export_delta: export: {export!r} is not an updatable export written by this process "
                         f"(export_saved_model(..., updatable=True)); known: {sorted(_BASES)}")
    inputs, changes, summary = {}, [], {"sequence": base.sequence + 1, "tables": {}}
    for table in base.tables:
        keys, rows, evicted, full = table_delta(table)
        changes.append((keys, evicted, full))
        inputs[input_name(table.name, "keys")] = keys.astype(np.int64, copy=False)
        inputs[input_name(table.name, "rows")] = rows
        inputs[input_name(table.name, "evicted")] = evicted.astype(np.int64, copy=False)
        summary["tables"][table.name] = {"keys": len(keys), "evicted": len(evicted), "full": full}
    for i, value in enumerate(base.dense):
        inputs[f"dense_{i}"] = np.asarray(value())
    try:
        write_delta(path, base.sequence + 1, inputs, summary["tables"])
    except BaseException:
        for table, (keys, evicted, full) in zip(base.tables, changes):   # the next delta carries these
            table.full_next = table.full_next or full
            table.untaken = np.union1d(keys, evicted) if table.untaken is None else \
                np.union1d(table.untaken, np.union1d(keys, evicted))
        raise
    for table, (keys, evicted, full) in zip(base.tables, changes):
        if full:
            table.exported_keys, table.deltas = keys, []
        else:
            table.deltas.append((keys, evicted))
            if sum(len(k) + len(e) for k, e in table.deltas) > len(table.exported_keys) + 4096:
                table.exported_keys, table.deltas = table.server_keys(), []   # amortised: memory stays O(table)
        table.untaken, table.full_next = None, False
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
        with ckpt.temporary_folder(root, name) as temporary:
            digests = ckpt.write_in_parallel(temporary, [(f"{key}.data", value) for key, value in arrays.items()])
            digests[ckpt.META] = ckpt.write_file(temporary, ckpt.META, ckpt.meta_bytes(meta))
            ckpt.write_file(temporary, ckpt.MANIFEST, ckpt.manifest_bytes(digests))
            ckpt.fsync_directory(temporary)
            ckpt.switch(temporary, path)
    except OSError as error:
        raise CheckpointError(f"export_delta: path: cannot write {str(path)!r}: {error.strerror or error}") from error
    return str(path)


def read_delta(path) -> tuple[dict, dict[str, np.ndarray]]:
    """(meta, the apply_delta inputs by name, ``sequence`` included) of a delta folder, every file's size
    and CRC-32 checked against the manifest first; any problem raises CheckpointError naming the file."""
    folder = Path(ckpt.checked_directory(path, "read_delta"))

    def read(name):
        try:
            return ckpt.read_regular(folder / name)   # a FIFO or device in a file's place is refused (CKPT-13)
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
    try:
        meta = json.loads(files["meta.json"])
        if meta.get("format") != FORMAT or meta.get("format_version") != FORMAT_VERSION:
            raise corrupt("meta.json", f"format {meta.get('format')!r} version {meta.get('format_version')!r} "
                                       f"is not {FORMAT!r} version {FORMAT_VERSION}")
        inputs = {"sequence": np.int64(meta["sequence"])}
        for name, entry in meta["inputs"].items():
            if f"{name}.data" not in files:
                raise corrupt(f"{name}.data", "the manifest does not list it")
            dtype, shape = np.dtype(entry["dtype"]), [int(n) for n in entry["shape"]]
            data = files[f"{name}.data"]
            if len(data) != dtype.itemsize * int(np.prod(shape)):
                raise corrupt(f"{name}.data", f"holds {len(data)} bytes, not {dtype} {shape} as meta.json says")
            inputs[name] = np.frombuffer(data, dtype).astype(dtype.newbyteorder("=")).reshape(shape)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        if isinstance(exc, CheckpointError):
            raise
        raise corrupt("meta.json", f"unreadable ({exc!r})") from None
    return meta, inputs


def apply_delta(loaded, path) -> dict:
    """Apply the delta at ``path`` to a served model: ``loaded`` is what ``tf.saved_model.load`` returned
    (or its ``apply_delta`` signature).  The same as feeding ``read_delta``'s inputs to the signature."""
    signature = loaded.signatures["apply_delta"] if hasattr(loaded, "signatures") else loaded
    _, inputs = read_delta(path)
    return {name: value.numpy() for name, value in signature(**inputs).items()}
