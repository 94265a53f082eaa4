"""Checkpoints of a table sharded over ranks, without O(table) memory on any rank (spec/sharding.md).

Save (SHARD-10): every rank saves at the same call.  Rank 0 checks the target and opens the save's
temporary folder (``.<table>.writing-<pid>-<n>``, CKPT-4), whose path every rank receives; each rank
writes its own keys -- or, for an incremental save, what changed in them (CKPT-9) -- into
``<temporary>/slices/rank<r>/`` with the one-process writer (same files, CRC-32 taken as the bytes are
written, manifest last; not fsynced, as nothing reads them after a crash); after a barrier rank 0
merges the slices in key order, a chunk at a time, into the one-process layout (CKPT-1) in the same
temporary folder, deletes the slices, writes ``meta.json`` and ``manifest.json``, fsyncs them all and
switches the folder in atomically (CKPT-4).  The files are
byte for byte those one process would write for the whole table.  Until the switch the old table is
untouched, so a rank killed at any point leaves the previous checkpoint loadable (SHARD-10).

Load (SHARD-11): every rank streams the merged files in chunks, checksumming each piece as it
arrives, and keeps only the rows of the keys it owns (``key mod M == rank``, any ``M``): peak memory is
its own rows plus a chunk.  A sum over ranks then checks that every key of every file read was kept by
exactly one rank.  Warm start and delta chains use the same filter.

This module is the streaming twin of the format module (``mxrec_ref/checkpoint.py``): it writes and
reads the same files and uses that module's own helpers (the folder switch, stale temporaries, the fault
hook, the concurrent-reader checks of CKPT-11) rather than copies of them.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Callable

import numpy as np

from .. import checkpoint as ckpt
from ..checksum import crc32
from ..contract import WarmStartPlan
from ..errors import CheckpointError, MxrecError, UsageError
from ..state import TableState, merge_warm_start

SLICES = "slices"                    # <temporary>/slices/rank<r>/: each rank's part of a save
CHUNK_BYTES = ckpt.CHUNK_BYTES       # rows merged or filtered at a time: about this many bytes per source
_INT64, _FLOAT32 = np.dtype("<i8"), np.dtype("<f4")

Keep = Callable[[np.ndarray], np.ndarray]      # keys -> bool mask of the keys this rank owns
logger = logging.getLogger("mxrec_ref.distributed")


# =============================================================================== save
def save(store, directory, incremental: bool) -> str:
    """SHARD-10 on one rank of ``store`` (a ShardedStore; its lock held).  Every rank returns the
    table's path under rank 0's ``directory``, or raises: the failing rank its own error, the others
    a UsageError naming it (SHARD-8)."""
    name, rank, comm = store.name, store.rank, store.comm
    mine = store.local.export()                     # this rank's keys only: O(owned rows)
    previous = store._last_checkpoint               # (folder, this rank's slice of it) or None
    delta = bool(incremental) and previous is not None
    if comm.size == 1:                              # nothing to merge: the one-process writer
        path = _attempt(store, "save", lambda: _write_whole(store, directory, mine, previous if delta else None))
        store._last_checkpoint = (os.path.dirname(path), mine)
        return path
    with contextlib.ExitStack() as stack:
        # 1. rank 0 checks the target and opens the temporary folder; every rank learns its path
        def open_folder():
            root = Path(os.path.abspath(ckpt.checked_directory(directory, name)))
            if delta:
                ckpt.check_delta_target(root, previous[0], name)
            with ckpt._io_errors(name, root):
                root.mkdir(parents=True, exist_ok=True)
                target = ckpt.table_target(root, name)       # a symlinked table folder: its target (CKPT-14)
                ckpt.remove_stale_temporaries(root, name)
                if target != root / name:
                    ckpt.remove_stale_temporaries(target.parent, target.name)
                temporary = stack.enter_context(ckpt._temporary_folder(target.parent, target.name))
                (temporary / SLICES).mkdir()
            ckpt.fault_point("begin")
            return str(root), str(temporary)
        root, temporary = _attempt(store, "save", open_folder, only_rank0=True)
        root, temporary = Path(root), Path(temporary)

        # 2. every rank writes its slice; the agreement after it is the barrier
        def write_slice():
            state, removed = ckpt.delta_between(previous[1], mine) if delta else (mine, None)
            folder = temporary / SLICES / f"rank{rank}"
            meta = ckpt.table_meta(store.config, store.optimizer, len(state.keys), len(state.pending_keys),
                                   state.clock, state.clock_source)
            if removed is not None:
                meta["n_removed"] = len(removed)
            with ckpt._io_errors(name, folder):
                folder.mkdir()
                # not fsynced: rank 0 reads them back before the merged files are made durable, and
                # after a crash nothing reads them (the old table is still in place)
                ckpt._write_files(folder, store.optimizer, state, meta, removed, durable=False)
        _attempt(store, "save", write_slice)

        # 3. rank 0 merges the slices in key order and switches the table in (CKPT-4)
        def merge_and_switch():
            with ckpt._io_errors(name, root):
                merge_slices(temporary, [temporary / SLICES / f"rank{r}" for r in range(comm.size)],
                             store.config, store.optimizer, root=root, previous=previous[0] if delta else None)
                ckpt._switch(temporary, ckpt.table_target(root, name))
            return str(root / name)
        path, error = None, None
        if rank == 0:
            try:
                path = merge_and_switch()
            except MxrecError as failed:
                error = failed
    # rank 0 has removed the temporary folder (the old version, after a switch): "remove old"
    path = store._agree(error, "save", path=path)[0]["path"]
    store._last_checkpoint = (os.path.dirname(path), mine)
    logger.info("table %r: rank %d of %d saved its %d keys to %s (%s)", name, rank, comm.size, len(mine.keys), path,
                "incremental" if delta else "full")
    return path


def _attempt(store, what: str, work, only_rank0: bool = False):
    """``work()`` on this rank (or rank 0 only), then an agreement: every rank raises if any failed
    (SHARD-8), and every rank gets rank 0's result."""
    result, error = None, None
    if store.rank == 0 or not only_rank0:
        try:
            result = work()
        except MxrecError as failed:
            error = failed
    headers = store._agree(error, what, result=result if store.rank == 0 else None)
    return headers[0]["result"]


def _write_whole(store, directory, state: TableState, previous) -> str:
    """One rank: Store.save's writing (CKPT-4, CKPT-9)."""
    directory = os.path.abspath(ckpt.checked_directory(directory, store.name))
    if previous is not None:
        ckpt.check_delta_target(directory, previous[0], store.name)
        delta, removed = ckpt.delta_between(previous[1], state)
        return ckpt.write_table(directory, store.config, store.optimizer, delta, previous=previous[0],
                                removed=removed)
    return ckpt.write_table(directory, store.config, store.optimizer, state)


def merge_slices(folder: Path, slices: list[Path], config, optimizer, *, root: Path, previous=None) -> None:
    """Write into ``folder`` the table the ``slices`` (folders written by ``_write_files``, disjoint
    keys) hold together, in the one-process layout (CKPT-1), streaming: each slice is read once, in
    order, its CRC-32 checked against its manifest as it is read, and at most a chunk of rows per
    slice is in memory.  The fault hook names the files in the one-process order (CKPT-8)."""
    table = config.name
    metas = [_slice_meta(path, table) for path in slices]
    n = sum(meta["n_keys"] for meta in metas)
    m = sum(meta["n_pending"] for meta in metas)
    clocks = [meta["clock"] for meta in metas if meta["clock"] is not None]
    sources = [meta["clock_source"] for meta in metas if meta["clock_source"] is not None]
    removed_total = sum(meta.get("n_removed", 0) for meta in metas) if previous is not None else None
    meta = ckpt.table_meta(config, optimizer, n, m, max(clocks) if clocks else None,
                           sources[0] if sources else None, root=root, previous=previous, n_removed=removed_total)
    dim = config.dim
    columns = [("key", _INT64, ()), ("embedding", _FLOAT32, (dim,))]
    columns += [(optimizer.checkpoint_slot_name(slot), _FLOAT32, (dim,)) for slot in optimizer.slot_names]
    attributes = {"key": [n, 8], "embedding": [n, dim, 4], "feat_info": [n + m, 3, 8]}
    attributes.update({name: [n, dim, 4] for name, _, _ in columns[2:]})
    names = [name for name, _, _ in columns] + ["feat_info"]
    if previous is not None:
        names.append("removed")
        attributes["removed"] = [removed_total, 8]
    with contextlib.ExitStack() as stack:
        writers = {}
        for name in names:
            (folder / name).mkdir()
            writers[name] = stack.enter_context(_Writer(folder / name / "slice.data"))
        readers = []
        files = columns + [("feat_info", _INT64, (3,))] + ([("removed", _INT64, ())] if previous is not None else [])
        for path, slice_meta in zip(slices, metas):
            opened = {name: stack.enter_context(_Reader.open_path(path, f"{name}/slice.data", slice_meta["manifest"],
                                                                  dtype, shape, table))
                      for name, dtype, shape in files}
            readers.append((slice_meta, opened))
        admitted = [(sm["n_keys"], [r[name] for name, _, _ in columns] + [r["feat_info"]]) for sm, r in readers]
        _merge_in_key_order(admitted, [writers[name] for name, _, _ in columns] + [writers["feat_info"]], table)
        pending = [(sm["n_pending"], [r["feat_info"]]) for sm, r in readers]
        _merge_in_key_order(pending, [writers["feat_info"]], table)
        if previous is not None:
            _merge_in_key_order([(sm.get("n_removed", 0), [r["removed"]]) for sm, r in readers],
                                [writers["removed"]], table)
        for _, opened in readers:
            for reader in opened.values():
                reader.finish()          # every byte read, CRC-32 as the slice's manifest says
        digests = {}
        for name in names:               # the one-process order of the fault hook (CKPT-8, CKPT-12)
            digests[f"{name}/slice.data"] = writers[name].close()
            ckpt.fault_point(f"fsync {name}/slice.data")
            digests[f"{name}/slice.attribute"] = ckpt._write_file(folder, f"{name}/slice.attribute",
                                                                  np.asarray(attributes[name], dtype=_INT64))
    shutil.rmtree(folder / SLICES)      # the table folder holds the merged files only
    digests["meta.json"] = ckpt._write_file(folder, "meta.json", ckpt.meta_bytes(meta))
    ckpt._write_manifest(folder, digests)
    for name in sorted(names):
        ckpt._fsync_directory(folder / name)
    ckpt._fsync_directory(folder)
    ckpt.fault_point("fsync folder")


def _slice_meta(path: Path, table: str) -> dict:
    """A slice's meta.json with its manifest (under "manifest"); both written by this save."""
    try:
        manifest = json.loads(ckpt.read_regular(path / ckpt.MANIFEST))["files"]
        meta = json.loads(ckpt.read_regular(path / "meta.json"))
    except (OSError, ValueError, KeyError) as error:
        raise CheckpointError(f"table {table!r}: checkpoint: slice {str(path)!r} cannot be read back for the "
                              f"merge ({error})") from None
    return dict(meta, manifest=manifest)


def _merge_in_key_order(sources: list[tuple[int, list["_Reader"]]], writers: list["_Writer"], table: str) -> None:
    """K-way merge of sorted, disjoint sources (rows, readers of parallel columns, the first keyed)
    into ``writers``, a chunk at a time.  Each round every source holds at least a chunk of rows
    (or its rest); the smallest of their last keys bounds the round: every row up to it, from every
    source, is written in key order, and no row left behind is smaller."""
    buffered = [[np.zeros((0,) + r.shape, r.dtype) for r in readers] for _, readers in sources]
    remaining = [rows for rows, _ in sources]
    chunk = max(1, CHUNK_BYTES // max(1, sum(r.row_bytes for r in sources[0][1]))) if sources else 1
    last = None
    while True:
        for s, (_, readers) in enumerate(sources):
            if len(buffered[s][0]) < chunk and remaining[s]:
                take = min(chunk, remaining[s])
                buffered[s] = [np.concatenate([have, reader.read(take)]) for have, reader in zip(buffered[s], readers)]
                remaining[s] -= take
        live = [s for s in range(len(sources)) if len(buffered[s][0])]
        if not live:
            return
        bound = min(_keys(buffered[s][0])[-1] for s in live)
        pieces = []
        for s in live:
            cut = int(np.searchsorted(_keys(buffered[s][0]), bound, side="right"))
            pieces.append([column[:cut] for column in buffered[s]])
            buffered[s] = [column[cut:] for column in buffered[s]]
        keys = np.concatenate([_keys(piece[0]) for piece in pieces])
        order = np.argsort(keys, kind="stable")
        keys = keys[order]
        if (keys.size > 1 and not np.all(keys[1:] > keys[:-1])) or (last is not None and keys[0] <= last):
            raise CheckpointError(f"table {table!r}: checkpoint: the ranks' slices are not disjoint and sorted "
                                  f"(key {int(keys[0])}); every key must have one owner (SHARD-2)")
        last = keys[-1]
        for column, writer in enumerate(writers):
            writer.write(np.concatenate([piece[column] for piece in pieces])[order])


def _keys(column: np.ndarray) -> np.ndarray:
    return column if column.ndim == 1 else column[:, 0]


class _OpenFile:
    """A file descriptor ``fd`` closed on leaving a ``with`` block unless already closed."""
    fd: int | None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class _Writer(_OpenFile):
    """A new data file written in pieces, CRC-32 of each piece taken as it is written (CKPT-12)."""

    def __init__(self, path: Path):
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        self.size, self.crc = 0, 0

    def write(self, rows: np.ndarray) -> None:
        view = memoryview(np.ascontiguousarray(rows).reshape(-1).view(np.uint8))
        self.crc = crc32(view, self.crc)
        self.size += len(view)
        while view:
            view = view[os.write(self.fd, view):]

    def close(self) -> tuple[int, int]:
        os.fsync(self.fd)
        os.close(self.fd)
        self.fd = None
        return self.size, self.crc


class _Reader(_OpenFile):
    """A data file read front to back in pieces, each checksummed as it arrives; ``finish`` checks
    the whole file's size and CRC-32 against the manifest (CKPT-8, CKPT-12)."""

    def __init__(self, fd: int, path: Path, entry: dict, dtype: np.dtype, shape: tuple, table: str):
        self.fd, self.path, self.entry, self.table = fd, path, entry, table
        self.dtype, self.shape = dtype, tuple(shape)
        self.row_bytes = dtype.itemsize * int(np.prod(self.shape, dtype=np.int64))
        self.done, self.crc = 0, 0

    @classmethod
    def open_path(cls, folder: Path, name: str, manifest: dict, dtype, shape, table: str) -> "_Reader":
        if name not in manifest:
            ckpt._corrupt(table, folder / name, "file is missing")
        return cls(ckpt.open_regular(folder / name), folder / name, manifest[name], dtype,
                   shape, table)

    def read(self, rows: int) -> np.ndarray:
        want = rows * self.row_bytes
        data = np.empty(want, dtype=np.uint8)
        view, got = memoryview(data), 0
        while got < want:
            n = os.readv(self.fd, [view[got:]])
            if n == 0:
                ckpt._corrupt(self.table, self.path, f"ends after {self.done + got} bytes, "
                                                     f"{self.entry.get('bytes')} expected")
            self.crc = crc32(view[got:got + n], self.crc)
            got += n
        self.done += want
        return data.view(self.dtype).astype(self.dtype.newbyteorder("="), copy=False).reshape((rows,) + self.shape)

    def finish(self) -> None:
        """The rest of the file (none, when its rows were all read) and the manifest's checks."""
        while True:
            rest = os.read(self.fd, ckpt.CHUNK_BYTES)
            if not rest:
                break
            self.crc = crc32(rest, self.crc)
            self.done += len(rest)
        if self.done != self.entry.get("bytes"):
            ckpt._corrupt(self.table, self.path,
                          f"holds {self.done} bytes, the manifest says {self.entry.get('bytes')}")
        if f"{self.crc:08x}" != self.entry.get("crc32"):
            ckpt._corrupt(self.table, self.path, "checksum differs from the manifest: the file is corrupted")


# =============================================================================== load
@dataclasses.dataclass(frozen=True)
class VersionTally:
    """What one rank read of one version of the table (a full checkpoint or a delta): the version's
    identity (its manifest's CRC-32), its totals, and how many of each this rank kept (SHARD-11)."""

    folder: str
    identity: str
    totals: tuple[int, int, int]      # admitted, pending, removed keys in the files
    kept: tuple[int, int, int]        # of which this rank owns


def read_owned(directory, config, optimizer, keep: Keep, *, source_table: str | None = None,
               slots_required: bool = True) -> tuple[TableState, list[VersionTally]]:
    """``ckpt.read_table`` keeping only the keys ``keep`` selects, streamed: peak memory is the kept
    rows plus a chunk per file.  A delta is read with its chain, base first, each version filtered
    the same way (CKPT-9); validation and errors as ``read_table``'s (CKPT-5, CKPT-8, CKPT-11)."""
    table = config.name
    root = Path(ckpt.checked_directory(directory, table))
    saved_name = source_table or table
    deltas, seen, tallies = [], [], []
    while True:
        real = os.path.realpath(root)
        if real in seen:
            raise CheckpointError(f"table {table!r}: checkpoint: the delta chain loops back to {str(root)!r} "
                                  f"(chain: {seen})")
        seen.append(real)
        meta, state, removed, tally = _read_version_owned(root, saved_name, config, optimizer, slots_required, keep)
        tallies.append(tally)
        if meta.get("kind", "full") == "full":
            break
        if len(seen) > ckpt.MAX_DELTA_CHAIN:
            raise CheckpointError(f"table {table!r}: checkpoint: more than {ckpt.MAX_DELTA_CHAIN} deltas in a chain")
        deltas.append((state, removed))
        root = root / meta["previous"]
    for delta, removed in reversed(deltas):
        state = state.with_delta(delta, removed)
    return state, tallies


def _read_version_owned(root: Path, saved_name: str, config, optimizer, slots_required: bool, keep: Keep):
    """One complete version, as ``ckpt._read_version`` finds it (the folder opened once, a version
    replaced under the reader read again, CKPT-11), streamed through ``keep``."""
    table = config.name
    for _ in range(ckpt.READ_ATTEMPTS):
        fd, opened = ckpt._open_table_folder(root, saved_name, table)
        try:
            if not ckpt._exists_at(fd, "meta.json"):
                raise ckpt._Vanished(None, "")
            return _stream_owned(fd, opened, config, optimizer, slots_required, keep)
        except ckpt._Vanished as vanished:
            if ckpt._same_folder(fd, opened):
                if vanished.name is None:
                    raise ckpt._no_table(root, saved_name, table) from None
                ckpt._corrupt(table, opened / vanished.name, vanished.problem)
        finally:
            os.close(fd)
    raise CheckpointError(f"table {table!r}: checkpoint: {str(root / saved_name)!r} was replaced "
                          f"{ckpt.READ_ATTEMPTS} times while being read; stop the process saving it, or load another "
                          f"checkpoint")


class _FolderReader(_Reader):
    """A data file of the version open as a folder descriptor (openat, CKPT-11)."""

    @classmethod
    def at(cls, fd: int, folder: Path, name: str, manifest: dict, dtype, shape, rows: int, table: str):
        if name not in manifest:
            ckpt._corrupt(table, folder / name, "file is missing")
        try:
            file = ckpt.open_regular(name, dir_fd=fd)
        except (FileNotFoundError, NotADirectoryError):
            raise ckpt._Vanished(name, "file listed in the manifest is missing") from None
        except OSError as error:         # a FIFO or device (CKPT-13), or unreadable
            ckpt._corrupt(table, folder / name, f"cannot be read ({error.strerror or error})")
        reader = cls(file, folder / name, manifest[name], dtype, shape, table)
        size = os.fstat(file).st_size
        if size != manifest[name].get("bytes"):
            reader.__exit__()
            ckpt._corrupt(table, folder / name, f"holds {size} bytes, the manifest says {manifest[name].get('bytes')}")
        expected = rows * reader.row_bytes
        if size != expected:
            reader.__exit__()
            ckpt._corrupt(table, folder / name, f"holds {size} bytes, expected {expected}")
        return reader


def _small_file(fd: int, folder: Path, name: str, manifest: dict, table: str) -> np.ndarray:
    """A small file (meta.json, an attribute) read whole, its size and CRC-32 checked."""
    if name not in manifest:
        ckpt._corrupt(table, folder / name, "file is missing")
    try:
        data, crc = ckpt._read_at(fd, name)
    except (FileNotFoundError, NotADirectoryError):
        raise ckpt._Vanished(name, "file listed in the manifest is missing") from None
    except OSError as error:
        ckpt._corrupt(table, folder / name, f"cannot be read ({error.strerror or error})")
    entry = manifest[name]
    if len(data) != entry.get("bytes"):
        ckpt._corrupt(table, folder / name, f"holds {len(data)} bytes, the manifest says {entry.get('bytes')}")
    if f"{crc:08x}" != entry.get("crc32"):
        ckpt._corrupt(table, folder / name, "checksum differs from the manifest: the file is corrupted")
    return data


def _read_manifest(fd: int, folder: Path, table: str) -> tuple[dict, str]:
    """The manifest's entries, checked as ``ckpt._read_verified_files`` checks them, and its CRC-32
    (the version's identity: every rank must read the same version)."""
    try:
        raw, crc = ckpt._read_at(fd, ckpt.MANIFEST)
    except FileNotFoundError:
        raise ckpt._Vanished(ckpt.MANIFEST, "manifest is missing: the table was not written completely") from None
    except OSError as error:
        ckpt._corrupt(table, folder / ckpt.MANIFEST, f"cannot be read ({error.strerror or error})")
    try:
        entries = json.loads(bytes(raw))["files"]
        if not isinstance(entries, dict):
            raise ValueError("'files' is not a mapping")
    except (ValueError, KeyError, TypeError) as exc:
        ckpt._corrupt(table, folder / ckpt.MANIFEST, f"unreadable manifest ({exc})")
    for name, entry in entries.items():
        if not isinstance(entry, dict) or os.path.isabs(name) or ".." in Path(name).parts:
            ckpt._corrupt(table, folder / ckpt.MANIFEST, f"malformed entry {name!r}")
    return entries, f"{crc:08x}"


def _stream_owned(fd: int, folder: Path, config, optimizer, slots_required: bool, keep: Keep):
    """(meta, kept state, kept removed keys or None, tally) of the version open as ``fd``: CKPT-5's
    checks on every key, CKPT-8's sizes and checksums on every byte, the rows of other ranks'
    keys dropped chunk by chunk.  A checksum failure is reported before a problem decoding the
    bytes it covers (a flipped byte is corruption, whatever it looks like)."""
    table = config.name
    manifest, identity = _read_manifest(fd, folder, table)
    meta = ckpt._read_meta({"meta.json": _small_file(fd, folder, "meta.json", manifest, table)}, folder, table)
    same_slots = ckpt._check_meta(meta, config, optimizer, slots_required)
    n, m, dim = meta["n_keys"], meta["n_pending"], config.dim
    is_delta = meta.get("kind", "full") != "full"
    if is_delta:
        previous = meta.get("previous")
        if meta.get("kind") != "delta" or not isinstance(previous, str) or not previous:
            ckpt._corrupt(table, folder / "meta.json", f"kind {meta.get('kind')!r} / previous {previous!r} "
                                                       f"do not describe a delta")
        n_removed = meta.get("n_removed", 0)
        if not isinstance(n_removed, int) or n_removed < 0:
            ckpt._corrupt(table, folder / "meta.json", "n_removed must be a non-negative integer")
    clock, source = meta["clock"], meta["clock_source"]
    if source not in (None, "step", "timestamp") or (clock is None) != (source is None):
        ckpt._corrupt(table, folder / "meta.json", f"clock {clock!r} / clock_source {source!r} are inconsistent")

    slot_files = [(slot, optimizer.checkpoint_slot_name(slot)) for slot in optimizer.slot_names] if same_slots else []
    layout = [("key", _INT64, (), n, [n, 8]), ("embedding", _FLOAT32, (dim,), n, [n, dim, 4])]
    layout += [(file, _FLOAT32, (dim,), n, [n, dim, 4]) for _, file in slot_files]
    layout.append(("feat_info", _INT64, (3,), n + m, [n + m, 3, 8]))
    if is_delta:
        layout.append(("removed", _INT64, (), n_removed, [n_removed, 8]))
    for name, _, _, _, attribute in layout:       # attributes first: they say what the data must hold
        for part in (f"{name}/slice.data", f"{name}/slice.attribute"):
            if part not in manifest:
                ckpt._corrupt(table, folder / part, "file is missing")
        attr = _small_file(fd, folder, f"{name}/slice.attribute", manifest, table)
        saved = np.frombuffer(attr, dtype=_INT64, count=len(attr) // 8).tolist()
        if saved != attribute:
            ckpt._corrupt(table, folder / f"{name}/slice.attribute",
                          f"attribute {saved} does not match the expected {attribute}")

    problems: list[CheckpointError] = []     # decoding problems, reported once every checksum passed

    def problem(path: Path | None, text: str, error: CheckpointError | None = None) -> None:
        if not problems:
            problems.append(error or CheckpointError(f"table {table!r}: checkpoint: {str(path)!r}: {text}"))

    with contextlib.ExitStack() as stack:
        readers = {name: stack.enter_context(_FolderReader.at(fd, folder, f"{name}/slice.data", manifest, dtype,
                                                              shape, rows, table))
                   for name, dtype, shape, rows, _ in layout}
        chunk = max(1, CHUNK_BYTES // sum(readers[name].row_bytes for name, *_ in layout if name != "removed"))
        # a first pass over the keys alone counts this rank's, so its rows go straight into arrays of
        # their final size: no pieces to join, the peak is the kept rows plus a chunk
        n_mine = _count_kept(fd, "key/slice.data", 0, n, (), keep, chunk)
        m_mine = _count_kept(fd, "feat_info/slice.data", n, m, (3,), keep, chunk)
        r_mine = _count_kept(fd, "removed/slice.data", 0, n_removed, (), keep, chunk) if is_delta else 0
        out = _Kept(folder, table)
        keys, values = out.array("keys", n_mine), out.array("values", n_mine, dim, _FLOAT32)
        counts, last_seen = out.array("counts", n_mine), out.array("last_seen", n_mine)
        slots = {slot: out.array(slot, n_mine, dim, _FLOAT32) for slot, _ in slot_files}
        pending, pending_counts, pending_last_seen = (out.array(name, m_mine)
                                                      for name in ("pending", "pcounts", "pseen"))
        removed = out.array("removed", r_mine) if is_delta else None
        checks = _KeyChecks(config, folder, problem)
        for start in range(0, n, chunk):
            rows = min(chunk, n - start)
            chunk_keys = readers["key"].read(rows)
            feat = readers["feat_info"].read(rows)
            chunk_values = readers["embedding"].read(rows)
            chunk_slots = {slot: readers[file].read(rows) for slot, file in slot_files}
            if not np.array_equal(feat[:, 0], chunk_keys):
                problem(folder / "feat_info", "its first keys differ from key/slice.data")
            checks.admitted(chunk_keys, feat[:, 1])
            mine = keep(chunk_keys)
            at = out.advance("keys", int(np.count_nonzero(mine)))
            keys[at] = chunk_keys[mine]
            values[at] = chunk_values[mine]
            counts[at] = feat[mine, 1]
            last_seen[at] = feat[mine, 2]
            for slot in slots:
                slots[slot][at] = chunk_slots[slot][mine]
        for start in range(0, m, chunk):
            feat = readers["feat_info"].read(min(chunk, m - start))
            checks.pending(feat[:, 0], feat[:, 1])
            mine = keep(feat[:, 0])
            at = out.advance("pending", int(np.count_nonzero(mine)))
            pending[at], pending_counts[at], pending_last_seen[at] = feat[mine, 0], feat[mine, 1], feat[mine, 2]
        for start in range(0, n_removed if is_delta else 0, chunk):
            chunk_removed = readers["removed"].read(min(chunk, n_removed - start))
            mine = keep(chunk_removed)
            removed[out.advance("removed", int(np.count_nonzero(mine)))] = chunk_removed[mine]
        for name in sorted(readers):     # the first problem in file-name order, as read_table reports it
            readers[name].finish()
    if problems:
        raise problems[0]
    out.check_full()
    if not same_slots:
        slots = {slot: np.full((n_mine, dim), value, dtype=np.float32)
                 for slot, value in optimizer.slot_initial_values().items()}
    if pending.size and keys.size:    # a key is owned by one rank: some rank sees every such conflict
        at = np.minimum(np.searchsorted(keys, pending), keys.size - 1)
        if (keys[at] == pending).any():
            ckpt._corrupt(table, folder / "feat_info", "a key is both admitted and pending")
    state = TableState(keys=keys, values=values, slots=slots, counts=counts, last_seen=last_seen,
                       pending_keys=pending, pending_counts=pending_counts, pending_last_seen=pending_last_seen,
                       clock=None if clock is None else int(clock), clock_source=source)
    tally = VersionTally(str(folder), identity, (n, m, n_removed if is_delta else 0),
                         (n_mine, m_mine, 0 if removed is None else len(removed)))
    return meta, state, removed, tally


def _count_kept(fd: int, name: str, first_row: int, rows: int, shape: tuple, keep: Keep, chunk: int) -> int:
    """How many of the ``rows`` keys from row ``first_row`` of ``name`` (keys, or rows whose first
    column is the key) ``keep`` selects; read with ``pread``, nothing checked (the main pass does)."""
    width = 8 * int(np.prod(shape, dtype=np.int64))
    try:
        file = ckpt.open_regular(name, dir_fd=fd)
    except (FileNotFoundError, NotADirectoryError):
        raise ckpt._Vanished(name, "file listed in the manifest is missing") from None
    try:
        total = 0
        for start in range(0, rows, chunk):
            count = min(chunk, rows - start)
            data = os.pread(file, count * width, (first_row + start) * width)
            block = np.frombuffer(data, dtype=_INT64, count=len(data) // 8).reshape((-1,) + shape)
            total += int(np.count_nonzero(keep(_keys(block.astype(np.int64, copy=False)))))
        return total
    finally:
        os.close(file)


class _Kept:
    """Positions in the arrays of one rank's rows, filled a chunk at a time."""

    def __init__(self, folder: Path, table: str):
        self.folder, self.table = folder, table
        self.size: dict[str, int] = {}
        self.filled: dict[str, int] = {}

    def array(self, name: str, rows: int, dim: int | None = None, dtype=_INT64) -> np.ndarray:
        if name in ("keys", "pending", "removed"):
            self.size[name], self.filled[name] = rows, 0
        return np.empty((rows,) if dim is None else (rows, dim), dtype=dtype.newbyteorder("="))

    def advance(self, name: str, rows: int) -> slice:
        start = self.filled[name]
        if start + rows > self.size[name]:      # the files changed between the two passes: never, they are immutable
            ckpt._corrupt(self.table, self.folder, "changed while it was read")
        self.filled[name] = start + rows
        return slice(start, start + rows)

    def check_full(self) -> None:
        if self.filled != self.size:
            ckpt._corrupt(self.table, self.folder, "changed while it was read")


class _KeyChecks:
    """CKPT-5's checks of every key of a version, a chunk at a time: ascending, no padding key, inside
    ``key_dtype``, counts not negative."""

    def __init__(self, config, folder: Path, problem):
        self.config, self.folder, self.problem = config, folder, problem
        self.last = {"key": None, "feat_info": None}
        self.range_error: CheckpointError | None = None

    def admitted(self, keys: np.ndarray, counts: np.ndarray) -> None:
        self._check("key", keys, counts)

    def pending(self, keys: np.ndarray, counts: np.ndarray) -> None:
        self._check("feat_info", keys, counts)

    def _check(self, name: str, keys: np.ndarray, counts: np.ndarray) -> None:
        if not keys.size:
            return
        last = self.last[name]
        if not np.all(keys[1:] > keys[:-1]) or (last is not None and keys[0] <= last):
            self.problem(self.folder / name, "keys are not strictly ascending")
        self.last[name] = keys[-1]
        if (keys == -1).any():
            self.problem(self.folder / "feat_info", "holds the padding key -1, which never has a row (ADM-6)")
        low, high = keys.min(), keys.max()
        if low < self.config.key_min or high > self.config.key_max:
            bad = int(low if low < self.config.key_min else high)
            self.problem(None, "", CheckpointError(f"table {self.config.name!r}: key_dtype: checkpoint key {bad} "
                                                   f"does not fit the table's key_dtype {self.config.key_dtype}"))
        if (counts < 0).any():
            self.problem(self.folder / "feat_info", "a count is negative")


# ================================================================== collective reads
def load(store, directory) -> None:
    """SHARD-11 on one rank (lock held): read this rank's keys, check that the ranks loaded every key
    exactly once, then replace this rank's store."""
    folder = _shared_folder(store, directory, "load")
    state, _ = _read_collectively(store, folder, "load", check=lambda state: store.local.check_fits(len(state.keys)))
    store.local.import_state(state)      # the tiers import the same way (CON-10)
    store._last_checkpoint = (folder, state)
    store._share_stats(None, "load")
    logger.info("table %r: rank %d of %d loaded its %d keys from %s", store.name, store.rank, store.rank_size,
                len(state.keys), folder)


@dataclasses.dataclass(frozen=True, eq=False)
class ShardedWarmStartPlan(WarmStartPlan):
    """A warm-start plan of one rank: ``loaded`` holds this rank's keys, ``n_loaded`` the table's."""

    n_loaded: int = 0


def plan_warm_start(store, directory, source_table, now, after) -> ShardedWarmStartPlan:
    """WS-7 on one rank: this rank's keys of the checkpoint (SHARD-11's filter), read and checked."""
    folder = _shared_folder(store, directory, "warm_start")
    checked = {}

    def check(loaded: TableState) -> None:
        checked["now"] = store._check_time("now", now, required=False)
        if after is not None:
            store._check_plan(after)
        if store.local._key_limit() is not None:     # each owner holds the configured capacity (SHARD-6)
            before = after.keys_after if after is not None else store.local.export().keys
            checked["keys_after"] = np.union1d(before, loaded.keys)
            store.local.check_fits(len(checked["keys_after"]))

    loaded, n_loaded = _read_collectively(store, folder, "warm_start", check, source_table=source_table,
                                          slots_required=False)
    return ShardedWarmStartPlan(store_id=id(store), table=store.name, directory=folder, loaded=loaded,
                                now=checked["now"], keys_after=checked.get("keys_after"), n_loaded=n_loaded)


def apply_warm_start(store, plan) -> int:
    """WS-3 on one rank's keys (lock held); collective."""
    error, merged = None, None
    try:
        store._check_plan(plan)
        merged = merge_warm_start(store.local.export(), plan.loaded, store.config.admit_threshold, plan.now)
        store.local.check_fits(len(merged.keys))
    except MxrecError as failed:
        error = failed
    store._agree(error, "warm_start")
    store.local.import_state(merged)
    store._share_stats(None, "warm_start")
    return plan.n_loaded


def _shared_folder(store, directory, what: str) -> str:
    """Rank 0's ``directory``, absolute, on every rank (SHARD-14: one checkpoint, wherever each rank runs)."""
    return _attempt(store, what, lambda: os.path.abspath(ckpt.checked_directory(directory, store.name)),
                    only_rank0=True)


def _read_collectively(store, folder: str, what: str, check, **options) -> tuple[TableState, int]:
    """Every rank reads its keys of ``folder`` and runs ``check`` on them; every rank raises if one
    failed (SHARD-8), reads again if the ranks read different versions (a save replaced the table
    between their reads, CKPT-11), and checks that every key of every version read was kept by
    exactly one rank.  Returns this rank's state and the number of admitted keys over ranks."""
    keep = store._owns
    for _ in range(ckpt.READ_ATTEMPTS):
        error, state, tallies = None, None, None
        try:
            state, tallies = read_owned(folder, store.config, store.optimizer, keep, **options)
            check(state)
        except MxrecError as failed:
            error = failed
        headers = store._agree(error, what, tallies=tallies, n_keys=None if state is None else len(state.keys))
        versions = {tuple(t.identity for t in h["tallies"]) for h in headers}
        if len(versions) == 1:
            break
    else:
        raise CheckpointError(f"table {store.name!r}: checkpoint: {folder!r} was replaced {ckpt.READ_ATTEMPTS} times "
                              f"while the ranks read it; stop the process saving it, or load another checkpoint")
    for v, tally in enumerate(headers[0]["tallies"]):
        kept = [sum(h["tallies"][v].kept[i] for h in headers) for i in range(3)]
        if kept != list(tally.totals):
            raise UsageError(
                f"table {store.name!r}: {what}: the {store.rank_size} ranks loaded {kept[0]} of {tally.totals[0]} "
                f"admitted keys, {kept[1]} of {tally.totals[1]} pending keys and {kept[2]} of {tally.totals[2]} "
                f"removed keys of {tally.folder!r}; every key must be loaded by exactly one rank (SHARD-11)")
    return state, sum(h["n_keys"] for h in headers)
