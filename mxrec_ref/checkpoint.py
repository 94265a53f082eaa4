"""The on-disk table format, shared by every backend (spec/checkpoint.md).

mxRec's sparse layout (reference section 3), one folder per table::

    <dir>/<table>/key/slice.data              int64 [n] ascending keys
    <dir>/<table>/key/slice.attribute         int64 [n, 8]
    <dir>/<table>/embedding/slice.data        float32 [n, dim], row i belongs to key i
    <dir>/<table>/embedding/slice.attribute   int64 [n, dim, 4]
    <dir>/<table>/<Kind>_<slot>/slice.*       optimizer slots, same shape as embedding
    <dir>/<table>/feat_info/slice.data        int64 [n + m, 3]: (key, count, last_seen),
                                              the n admitted keys then the m pending ones
    <dir>/<table>/meta.json                   table name, dim, key dtype, optimizer,
                                              clock, format version

Files are raw little-endian.  The save protocol (CKPT-4, CKPT-8, CKPT-10):
a table is written into a temporary sibling folder ``.<table>.writing-<pid>-<n>``,
every file fsynced, its ``manifest.json`` (every file's size and CRC-32)
last; then one atomic step puts it in place -- ``renameat2(RENAME_EXCHANGE)``
swaps it with the old table folder (a plain rename for the first save) --
and the old version, now under the temporary name, is deleted.  Where the
file system cannot exchange, the old folder is renamed aside to
``.<table>.old-<pid>-<n>`` first and ``read_table`` recovers from a crash
between the two renames.  A reader opens the table folder once and reads
every file through that descriptor (``openat``): files are never changed
once written, so it reads one complete version, or finds a file gone because
a concurrent save deleted that version, and reads again (CKPT-11).

The I/O makes one pass over the bytes (CKPT-12): a table's data files are
written on a few threads straight from the exported arrays, each CRC-32 taken
piece by piece as the piece is written, so the manifest needs no read-back; a
load reads the files on a few threads and checksums each piece as it arrives.
"""
from __future__ import annotations

import ctypes
import errno
import itertools
import json
import logging
import os
import re
import shutil
import stat
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from .checksum import crc32
from .config import TableConfig
from .errors import CheckpointError
from .optimizers import SparseOptimizer, optimizer_from_description
from .state import TableState

FORMAT_VERSION = 1
_INT64 = np.dtype("<i8")
_FLOAT32 = np.dtype("<f4")
MAX_DELTA_CHAIN = 10_000
READ_ATTEMPTS = 100      # versions a load may see replaced under it before it gives up (CKPT-11)
logger = logging.getLogger(__name__)

# Called with the name of each step of the save protocol as it completes; the
# fault-injection tests kill the process there (tests/test_checkpoint_faults.py).
fault_hook = None


def fault_point(step: str) -> None:
    if fault_hook is not None:
        fault_hook(step)


def write_table(directory, config: TableConfig, optimizer: SparseOptimizer, state: TableState, *,
                previous=None, removed: np.ndarray | None = None) -> str:
    """Write ``state`` as a full table, or -- with ``previous`` (the checkpoint
    folder it builds on) -- as a delta: ``state`` then holds only the changed
    keys and ``removed`` the keys gone since ``previous`` (CKPT-9).  An I/O
    error raises CheckpointError naming the table and the path, and leaves no
    temporary folder behind (CKPT-10)."""
    table = config.name
    root = Path(checked_directory(directory, table))
    with _io_errors(table, root):
        root.mkdir(parents=True, exist_ok=True)
        if previous is not None:
            removed = np.zeros(0, np.int64) if removed is None else removed
        meta = table_meta(config, optimizer, len(state.keys), len(state.pending_keys), state.clock,
                          state.clock_source, root=root, previous=previous,
                          n_removed=None if previous is None else len(removed))
        target = table_target(root, table)
        remove_stale_temporaries(root, table)
        if target != root / table:
            remove_stale_temporaries(target.parent, target.name)
        with _temporary_folder(target.parent, target.name) as temporary:
            fault_point("begin")
            _write_files(temporary, optimizer, state, meta, removed if previous is not None else None)
            _switch(temporary, target)
    return str(root / table)


def table_target(root: Path, table: str) -> Path:
    """The folder a save of ``table`` under ``root`` replaces: ``root/table``, or -- where that is a
    symlink -- the folder it points to, so the save lands there and the link stays (CKPT-14).  The
    temporary folder is made beside the target: exchanging a symlink instead would leave the link
    behind under the temporary name."""
    final = root / table
    try:
        return Path(os.path.realpath(final)) if final.is_symlink() else final
    except OSError:           # e.g. a name too long: the save or load reports it on its own terms (CKPT-10)
        return final


def table_meta(config: TableConfig, optimizer: SparseOptimizer, n_keys: int, n_pending: int, clock, clock_source,
               *, root=None, previous=None, n_removed: int | None = None) -> dict:
    """``meta.json`` of a table of ``n_keys`` admitted and ``n_pending`` pending keys (CKPT-1); a
    delta (``previous``: the folder it builds on) also records its base and ``n_removed`` (CKPT-9)."""
    meta = {
        "format_version": FORMAT_VERSION,
        "table": config.name,
        "dim": config.dim,
        "key_dtype": config.key_dtype,
        "optimizer": optimizer.describe(),
        "n_keys": int(n_keys),
        "n_pending": int(n_pending),
        "clock": clock,
        "clock_source": clock_source,
        "kind": "full" if previous is None else "delta",
        "previous": None,
    }
    if previous is not None:
        # the base, relative to this checkpoint folder, so a tree of checkpoints can move;
        # both absolute here, so the current directory does not matter (CKPT-9)
        meta["previous"] = os.path.relpath(os.path.realpath(previous), os.path.realpath(root))
        meta["n_removed"] = int(n_removed)
    return meta


def meta_bytes(meta: dict) -> bytes:
    """``meta.json``'s bytes (one spelling, so every writer of a table writes the same file)."""
    return json.dumps(meta, indent=1, sort_keys=True).encode()


def check_delta_target(directory, previous, table: str) -> None:
    """An incremental save must not overwrite a checkpoint its own chain
    builds on: it would destroy its base and point at itself (CKPT-9)."""
    target = os.path.realpath(directory)
    folder, seen = os.path.realpath(previous), set()
    while folder not in seen and len(seen) <= MAX_DELTA_CHAIN:
        if folder == target:
            raise CheckpointError(
                f"table {table!r}: directory: an incremental save into {str(directory)!r} would overwrite the "
                f"checkpoint it builds on ({previous!r} or its base); save the delta into another folder "
                f"(nothing was written)")
        seen.add(folder)
        try:
            meta = json.loads(read_regular(Path(folder, table, "meta.json")))
        except (OSError, ValueError):
            return
        if not isinstance(meta, dict) or meta.get("kind") != "delta" or not isinstance(meta.get("previous"), str):
            return
        folder = os.path.realpath(os.path.join(folder, meta["previous"]))


def checked_directory(directory, table: str) -> str:
    """A checkpoint folder argument as a path string, or CheckpointError naming ``directory`` (CKPT-10)."""
    if isinstance(directory, bytes) or not isinstance(directory, (str, os.PathLike)):
        raise CheckpointError(f"table {table!r}: directory: must be a folder path (str or os.PathLike), "
                              f"got {directory!r}")
    path = os.fspath(directory)
    if not isinstance(path, str) or not path or "\0" in path:
        raise CheckpointError(f"table {table!r}: directory: must be a non-empty path without NUL "
                              f"characters, got {path!r}")
    return path


def _write_files(folder: Path, optimizer: SparseOptimizer, state: TableState, meta: dict,
                 removed: np.ndarray | None, *, durable: bool = True) -> None:
    """A table's files in ``folder``, manifest last.  ``durable=False`` skips the fsyncs: for a
    sharded save's slices, which rank 0 reads back before its merged files are made durable and are
    never read after a crash (SHARD-10)."""
    n, m, dim = meta["n_keys"], meta["n_pending"], meta["dim"]
    feat = np.empty((n + m, 3), dtype=_INT64)      # filled in place: one copy of each column
    for column, (admitted, pending) in enumerate(((state.keys, state.pending_keys),
                                                  (state.counts, state.pending_counts),
                                                  (state.last_seen, state.pending_last_seen))):
        feat[:n, column] = admitted
        feat[n:, column] = pending
    slices = [("key", state.keys.astype(_INT64, copy=False), [n, 8]),
              ("embedding", state.values.astype(_FLOAT32, copy=False), [n, dim, 4])]
    slices += [(optimizer.checkpoint_slot_name(slot), state.slots[slot].astype(_FLOAT32, copy=False), [n, dim, 4])
               for slot in optimizer.slot_names]
    slices.append(("feat_info", feat, [n + m, 3, 8]))
    if removed is not None:
        slices.append(("removed", removed.astype(_INT64, copy=False), [len(removed), 8]))
    files = []
    for name, data, attribute in slices:
        (folder / name).mkdir()
        files += [(f"{name}/slice.data", np.ascontiguousarray(data)),
                  (f"{name}/slice.attribute", np.asarray(attribute, dtype=_INT64))]
    digests = _write_in_parallel(folder, files, durable=durable)
    digests["meta.json"] = _write_file(folder, "meta.json", meta_bytes(meta), durable=durable)
    _write_manifest(folder, digests, durable=durable)
    if durable:
        for name, _, _ in sorted(slices):
            _fsync_directory(folder / name)
        _fsync_directory(folder)
    fault_point("fsync folder")


def read_table(directory, config: TableConfig, optimizer: SparseOptimizer, *, source_table: str | None = None,
               slots_required: bool = True) -> TableState:
    """Read and fully validate a table; raises CheckpointError naming the
    table, the file and the problem (CKPT-5).  ``source_table`` reads a table
    saved under another name (warm start with renaming).  With
    ``slots_required=False`` a checkpoint of another optimizer kind is
    accepted and its slots come back at the optimizer's initial values (WS-4).
    A delta is read with its chain, base first (CKPT-9); a chain that loops
    raises CheckpointError."""
    table = config.name
    root = Path(checked_directory(directory, table))
    saved_name = source_table or table
    deltas, seen = [], []
    while True:
        real = os.path.realpath(root)
        if real in seen:
            raise CheckpointError(f"table {table!r}: checkpoint: the delta chain loops back to {str(root)!r} "
                                  f"(chain: {seen})")
        seen.append(real)
        meta, state, removed = _read_version(root, saved_name, config, optimizer, slots_required)
        if meta.get("kind", "full") == "full":
            break
        if len(seen) > MAX_DELTA_CHAIN:
            raise CheckpointError(f"table {table!r}: checkpoint: more than {MAX_DELTA_CHAIN} deltas in a chain")
        deltas.append((state, removed))
        root = root / meta["previous"]
    for delta, removed in reversed(deltas):
        state = state.with_delta(delta, removed)
    return state


def _read_version(root: Path, saved_name: str, config: TableConfig, optimizer: SparseOptimizer,
                  slots_required: bool):
    """(meta, state, removed keys or None) of one complete version of ``root/saved_name``.

    The folder is opened once and every file read through that descriptor.
    A file the manifest lists but the folder lacks is corruption -- unless the
    path now names another folder: a concurrent save replaced this version
    and deleted it under us, and the new one is read instead (CKPT-11)."""
    table = config.name
    for _ in range(READ_ATTEMPTS):
        fd, opened = _open_table_folder(root, saved_name, table)
        try:
            if not _exists_at(fd, "meta.json"):
                raise _Vanished(None, "")
            files = _read_verified_files(fd, opened, table)
            return _decode(files, opened, config, optimizer, slots_required)
        except _Vanished as vanished:
            if _same_folder(fd, opened):
                if vanished.name is None:
                    raise _no_table(root, saved_name, table) from None
                _corrupt(table, opened / vanished.name, vanished.problem)
        finally:
            os.close(fd)
    raise CheckpointError(f"table {table!r}: checkpoint: {str(root / saved_name)!r} was replaced "
                          f"{READ_ATTEMPTS} times while being read; stop the process saving it, or load another "
                          f"checkpoint")


class _Vanished(Exception):
    """A file of the version being read is missing (``name`` None: meta.json)."""

    def __init__(self, name: str | None, problem: str):
        super().__init__(name)
        self.name, self.problem = name, problem


def _open_table_folder(root: Path, saved_name: str, table: str) -> tuple[int, Path]:
    """A descriptor of the table folder and the path it was opened by: the
    table's own, or the old version a fallback switch holds between its two
    renames (a concurrent save, or one killed there: CKPT-8)."""
    for _ in range(READ_ATTEMPTS):
        target = table_target(root, saved_name)      # a symlinked table's old version waits beside its target
        for candidate in (root / saved_name, _interrupted_switch(root, saved_name),
                          _interrupted_switch(target.parent, target.name) if target != root / saved_name else None):
            if candidate is None:
                continue
            try:
                return os.open(candidate, os.O_RDONLY | os.O_DIRECTORY), candidate
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError as error:
                raise CheckpointError(f"table {table!r}: directory: cannot open {str(candidate)!r}: "
                                      f"{error.strerror}") from error
        if not _temporaries(root, saved_name):    # no save under way that could be switching it
            break
    raise _no_table(root, saved_name, table)


def _temporaries(root: Path, name: str) -> list[str]:
    pattern = re.compile(_TEMPORARY.format(name=re.escape(name)))
    try:
        return sorted(entry for entry in os.listdir(root) if pattern.fullmatch(entry))
    except OSError:
        return []


def _no_table(root: Path, saved_name: str, table: str) -> CheckpointError:
    return CheckpointError(f"table {table!r}: directory: no table {saved_name!r} in checkpoint {str(root)!r} "
                           f"(tables present: {list_tables(root)})")


def _interrupted_switch(root: Path, name: str) -> Path | None:
    """Where the rename fallback of ``_switch`` was killed between its two
    renames, the old complete version waits under ``.<name>.old-*`` (CKPT-8)."""
    pattern = re.compile(rf"\.{re.escape(name)}\.old-\d+(?:-\d+)?")
    try:
        entries = [e for e in os.scandir(root) if pattern.fullmatch(e.name)]
    except OSError:
        return None
    dated = []
    for entry in entries:
        try:
            dated.append((entry.stat(follow_symlinks=False).st_mtime_ns, entry.path))
        except FileNotFoundError:
            continue       # the concurrent save finished and removed it since the listing (CKPT-11)
    return Path(max(dated)[1]) if dated else None


def _exists_at(fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=fd)
        return True
    except OSError:
        return False


def _same_folder(fd: int, path: Path) -> bool:
    """Whether ``path`` still names the folder open as ``fd``."""
    try:
        now, held = os.stat(path), os.fstat(fd)
    except OSError:
        return False
    return (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino)


def _read_verified_files(fd: int, folder: Path, table: str) -> dict[str, np.ndarray]:
    """Every file the manifest lists, read through ``fd``, sizes and CRC-32s checked (CKPT-8)."""
    try:
        manifest, _ = _read_at(fd, MANIFEST)
    except FileNotFoundError:
        raise _Vanished(MANIFEST, "manifest is missing: the table was not written completely") from None
    except OSError as error:
        _corrupt(table, folder / MANIFEST, f"cannot be read ({error.strerror or error})")
    try:
        entries = json.loads(bytes(manifest))["files"]
        if not isinstance(entries, dict):
            raise ValueError("'files' is not a mapping")
    except (ValueError, KeyError, TypeError) as exc:
        _corrupt(table, folder / MANIFEST, f"unreadable manifest ({exc})")
    names = sorted(entries)
    for name in names:
        entry = entries[name]
        if not isinstance(entry, dict) or os.path.isabs(name) or ".." in Path(name).parts:
            _corrupt(table, folder / MANIFEST, f"malformed entry {name!r}")
    files = {}
    with ThreadPoolExecutor(max_workers=max(1, min(IO_THREADS, len(names))),
                            thread_name_prefix="mxrec-ckpt-read") as pool:
        futures = [pool.submit(_read_at, fd, name) for name in names]
        try:
            for name, future in zip(names, futures):     # the first problem in name order is reported
                entry = entries[name]
                try:
                    data, crc = future.result()
                except (FileNotFoundError, NotADirectoryError):
                    raise _Vanished(name, "file listed in the manifest is missing") from None
                except OSError as error:
                    _corrupt(table, folder / name, f"cannot be read ({error.strerror or error})")
                if len(data) != entry.get("bytes"):
                    _corrupt(table, folder / name, f"holds {len(data)} bytes, the manifest says {entry.get('bytes')}")
                if f"{crc:08x}" != entry.get("crc32"):
                    _corrupt(table, folder / name, "checksum differs from the manifest: the file is corrupted")
                files[name] = data
        except BaseException:
            for future in futures:
                future.cancel()
            raise
    return files


class NotRegularFile(OSError):
    """A checkpoint path names a FIFO, device, socket or folder where a file belongs (CKPT-13)."""


_FILE_KINDS = ((stat.S_ISDIR, "folder"), (stat.S_ISFIFO, "FIFO"), (stat.S_ISCHR, "character device"),
               (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket"))


def _refuse_unless_regular(mode: int, name) -> None:
    if not stat.S_ISREG(mode):
        kind = next((word for test, word in _FILE_KINDS if test(mode)), "special file")
        raise NotRegularFile(errno.EINVAL, f"not a regular file (a {kind})", str(name))


def open_regular(name, dir_fd: int | None = None) -> int:
    """A blocking read descriptor of the regular file ``name`` (under the folder ``dir_fd``).
    Anything else raises NotRegularFile before a read could wait on it forever (CKPT-13): the
    path is checked before the open, and the open itself is non-blocking (a FIFO's open waits
    for a writer) and checked again (the path may have changed in between)."""
    _refuse_unless_regular(os.stat(name, dir_fd=dir_fd).st_mode, name)
    fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)
    try:
        _refuse_unless_regular(os.fstat(fd).st_mode, name)
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


def read_regular(path) -> bytes:
    """The bytes of the regular file ``path``; NotRegularFile for anything else (CKPT-13)."""
    fd = open_regular(path)
    with os.fdopen(fd, "rb") as file:
        return file.read()


def _read_at(fd: int, name: str) -> tuple[np.ndarray, int]:
    """The whole file ``name`` under the folder ``fd``, into writable memory (uint8, not
    zero-filled first), and the CRC-32 of its bytes, taken piece by piece as they are read (CKPT-12).
    A FIFO, device or socket raises NotRegularFile (an OSError) before anything is read (CKPT-13)."""
    file = open_regular(name, dir_fd=fd)
    try:
        size = os.fstat(file).st_size
        data = np.empty(size, dtype=np.uint8)
        view, done, crc = memoryview(data), 0, 0
        while done < size:
            n = os.readv(file, [view[done:min(size, done + CHUNK_BYTES)]])
            if n == 0:
                break
            crc = crc32(view[done:done + n], crc)
            done += n
        return (data if done == size else data[:done]), crc
    finally:
        os.close(file)


def _holds(ascending: np.ndarray, key: int) -> bool:
    """Whether the ascending array holds ``key`` (one binary search)."""
    at = int(np.searchsorted(ascending, key))
    return at < ascending.size and int(ascending[at]) == key


def _check_meta(meta: dict, config: TableConfig, optimizer: SparseOptimizer, slots_required: bool) -> bool:
    """CKPT-5: the checkpoint's dim is the table's, and its optimizer's slots are the store's where
    they are required.  Returns whether the slots are the store's (else only rows are taken)."""
    table = config.name
    if meta["dim"] != config.dim:
        raise CheckpointError(f"table {table!r}: dim: the checkpoint has dim {meta['dim']}, "
                              f"the table has dim {config.dim}")
    saved_kind = meta["optimizer"].get("kind")
    same_slots = saved_kind == optimizer.kind
    if not same_slots and slots_required:
        raise CheckpointError(f"table {table!r}: optimizer: the checkpoint was trained with {saved_kind!r}, "
                              f"the store uses {optimizer.kind!r}; their slots differ")
    return same_slots


def _decode(files: dict[str, np.ndarray], folder: Path, config: TableConfig, optimizer: SparseOptimizer,
            slots_required: bool):
    """(meta, state, removed or None) from a version's verified files, fully validated (CKPT-5)."""
    table = config.name
    meta = _read_meta(files, folder, table)
    same_slots = _check_meta(meta, config, optimizer, slots_required)
    n, m, dim = meta["n_keys"], meta["n_pending"], config.dim

    def read_slice(name, dtype, attribute):
        return _read_slice(files, folder, name, dtype, attribute, table)

    keys = read_slice("key", _INT64, [n, 8])
    values = read_slice("embedding", _FLOAT32, [n, dim, 4]).reshape(n, dim)
    if same_slots:
        slots = {slot: read_slice(optimizer.checkpoint_slot_name(slot), _FLOAT32, [n, dim, 4]).reshape(n, dim)
                 for slot in optimizer.slot_names}
    else:
        slots = {slot: np.full((n, dim), value, dtype=np.float32)
                 for slot, value in optimizer.slot_initial_values().items()}
    feat = read_slice("feat_info", _INT64, [n + m, 3, 8]).reshape(n + m, 3)
    if not np.array_equal(feat[:n, 0], keys):
        _corrupt(table, folder / "feat_info", "its first keys differ from key/slice.data")
    pending = feat[n:, 0]
    for name, array in (("key", keys), ("feat_info", pending)):
        if array.size > 1 and not np.all(array[1:] > array[:-1]):
            _corrupt(table, folder / name, "keys are not strictly ascending")
    if pending.size and keys.size:   # both ascending (checked above): a binary search finds common keys
        at = np.minimum(np.searchsorted(keys, pending), keys.size - 1)
        both = keys[at] == pending
    else:
        both = np.zeros(0, dtype=bool)
    if both.any():
        _corrupt(table, folder / "feat_info", "a key is both admitted and pending")
    # both key runs are ascending (checked above): their ends bound them and a binary search finds -1,
    # instead of more passes over a million keys
    if any(_holds(run, -1) for run in (keys, pending)):
        _corrupt(table, folder / "feat_info", "holds the padding key -1, which never has a row (ADM-6)")
    ends = [int(run[i]) for run in (keys, pending) if run.size for i in (0, -1)]
    lowest, highest = (min(ends), max(ends)) if ends else (config.key_min, config.key_max)
    if lowest < config.key_min or highest > config.key_max:
        bad = lowest if lowest < config.key_min else highest
        raise CheckpointError(f"table {table!r}: key_dtype: checkpoint key {bad} does not fit the table's "
                              f"key_dtype {config.key_dtype}")
    if (feat[:, 1] < 0).any():
        _corrupt(table, folder / "feat_info", "a count is negative")
    clock, source = meta["clock"], meta["clock_source"]
    if source not in (None, "step", "timestamp") or (clock is None) != (source is None):
        _corrupt(table, folder / "meta.json", f"clock {clock!r} / clock_source {source!r} are inconsistent")
    state = TableState(
        keys=keys, values=values, slots=slots,
        counts=feat[:n, 1].copy(), last_seen=feat[:n, 2].copy(),
        pending_keys=pending.copy(), pending_counts=feat[n:, 1].copy(), pending_last_seen=feat[n:, 2].copy(),
        clock=None if clock is None else int(clock), clock_source=source,
    )
    removed = None
    if meta.get("kind", "full") != "full":
        previous = meta.get("previous")
        if meta.get("kind") != "delta" or not isinstance(previous, str) or not previous:
            _corrupt(table, folder / "meta.json", f"kind {meta.get('kind')!r} / previous {previous!r} "
                                                  f"do not describe a delta")
        n_removed = meta.get("n_removed", 0)
        if not isinstance(n_removed, int) or n_removed < 0:
            _corrupt(table, folder / "meta.json", "n_removed must be a non-negative integer")
        removed = read_slice("removed", _INT64, [n_removed, 8])
    return meta, state, removed


def delta_between(previous: TableState, current: TableState) -> tuple[TableState, np.ndarray]:
    """The keys of ``current`` that differ from ``previous`` (new, or any of
    row, slots, count, last-seen changed), and the keys ``previous`` had that
    ``current`` has not (CKPT-9)."""
    def changed(keys, columns, old_keys, old_columns):
        at = np.minimum(np.searchsorted(old_keys, keys), max(len(old_keys) - 1, 0))
        if len(old_keys) == 0:
            return np.ones(len(keys), dtype=bool)
        same = old_keys[at] == keys
        for new, old in zip(columns, old_columns):
            new_bits = new.view(np.uint32) if new.dtype == np.float32 else new
            old_bits = old.view(np.uint32) if old.dtype == np.float32 else old
            equal = new_bits == old_bits[at]
            same &= equal.all(axis=1) if equal.ndim == 2 else equal
        return ~same

    slot_names = sorted(current.slots)
    admitted = changed(current.keys, [current.values, *(current.slots[s] for s in slot_names), current.counts,
                                      current.last_seen],
                       previous.keys, [previous.values, *(previous.slots[s] for s in slot_names), previous.counts,
                                       previous.last_seen])
    pending = changed(current.pending_keys, [current.pending_counts, current.pending_last_seen],
                      previous.pending_keys, [previous.pending_counts, previous.pending_last_seen])
    now = np.union1d(current.keys, current.pending_keys)
    before = np.union1d(previous.keys, previous.pending_keys)
    removed = np.setdiff1d(before, now)
    delta = TableState(
        keys=current.keys[admitted], values=current.values[admitted],
        slots={s: current.slots[s][admitted] for s in current.slots}, counts=current.counts[admitted],
        last_seen=current.last_seen[admitted], pending_keys=current.pending_keys[pending],
        pending_counts=current.pending_counts[pending], pending_last_seen=current.pending_last_seen[pending],
        clock=current.clock, clock_source=current.clock_source)
    return delta, removed


def list_tables(directory) -> list[str]:
    root = Path(directory)
    try:
        return sorted(p.name for p in root.iterdir() if (p / "meta.json").is_file() and not p.name.startswith("."))
    except OSError:
        return []


def delta_bases(directory) -> list[str]:
    """The checkpoint folders the tables' deltas in ``directory`` build on,
    directly or through other deltas (CKPT-9), sorted; for pruning old
    checkpoints without deleting a base a kept delta needs.  A table whose
    ``meta.json`` cannot be read names no base (reading it reports that)."""
    bases, todo = set(), [os.path.normpath(directory)]
    while todo:
        folder = todo.pop()
        for table in list_tables(folder):
            try:
                previous = json.loads(read_regular(Path(folder, table, "meta.json"))).get("previous")
            except (OSError, ValueError, AttributeError):
                continue
            if isinstance(previous, str) and previous:
                base = os.path.normpath(os.path.join(folder, previous))
                if base not in bases:
                    bases.add(base)
                    todo.append(base)
    return sorted(bases)


# --------------------------------------------------------------- manifest
MANIFEST = "manifest.json"


def _write_manifest(folder: Path, digests: dict[str, tuple[int, int]], *, durable: bool = True) -> None:
    """Every file of the table with its size and CRC-32, written last (CKPT-8).  The
    digests were taken from the bytes as they were written (CKPT-12): nothing is read back."""
    entries = {name: {"bytes": size, "crc32": f"{crc:08x}"} for name, (size, crc) in sorted(digests.items())}
    _write_file(folder, MANIFEST, json.dumps({"format_version": FORMAT_VERSION, "files": entries}, indent=1,
                                             sort_keys=True).encode(), durable=durable)


# ------------------------------------------------------------------ files
# Files are written and read in pieces of this many bytes, each checksummed while it is in
# the cache (CKPT-12); the data files of a table are written by up to IO_THREADS threads,
# as crc32 (mxrec_ref/checksum.py), os.write, os.readv and os.fsync release the GIL.
CHUNK_BYTES = 1 << 22
IO_THREADS = 4
TABLE_THREADS = 4        # tables the TF Saver writes side by side (mxrec_ref/tf/saver.py)


def _write_durably(path: Path, data, durable: bool = True) -> tuple[int, int]:
    """Write ``data`` (a buffer) to a new file and fsync it (CKPT-8); returns its
    (size, CRC-32), taken in the same pass over the bytes as the write (CKPT-12)."""
    view = memoryview(data.reshape(-1).view(np.uint8) if isinstance(data, np.ndarray) else data)
    crc = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    try:
        for start in range(0, len(view), CHUNK_BYTES):
            chunk = view[start:start + CHUNK_BYTES]
            crc = crc32(chunk, crc)
            while chunk:
                chunk = chunk[os.write(fd, chunk):]
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    return len(view), crc


def _write_file(folder: Path, name: str, data, *, durable: bool = True) -> tuple[int, int]:
    """Write and fsync one file (CKPT-8: durable before the switch); its (size, CRC-32)."""
    digest = _write_durably(folder / name, data, durable)
    fault_point(f"fsync {name}")
    return digest


def _write_in_parallel(folder: Path, files: list[tuple[str, np.ndarray]], *,
                       durable: bool = True) -> dict[str, tuple[int, int]]:
    """Write and fsync ``files`` (name, buffer) on a pool of threads; the fault hook
    still names each file in the order given, once it is durable (CKPT-8), so the
    steps a kill test sees do not depend on thread timing."""
    digests = {}
    with ThreadPoolExecutor(max_workers=max(1, min(IO_THREADS, len(files))),
                            thread_name_prefix="mxrec-ckpt-write") as pool:
        futures = [pool.submit(_write_durably, folder / name, data, durable) for name, data in files]
        try:
            for (name, _), future in zip(files, futures):
                digests[name] = future.result()
                fault_point(f"fsync {name}")
        except BaseException:
            for future in futures:
                future.cancel()
            raise
    return digests


def _read_slice(files: dict, folder: Path, name: str, dtype: np.dtype, attribute: list[int],
                table: str) -> np.ndarray:
    data_name, attr_name = f"{name}/slice.data", f"{name}/slice.attribute"
    for part in (data_name, attr_name):
        if part not in files:
            _corrupt(table, folder / part, "file is missing")
    attr = files[attr_name]
    saved_attribute = np.frombuffer(attr, dtype=_INT64, count=len(attr) // 8).tolist()
    if saved_attribute != attribute:
        _corrupt(table, folder / attr_name, f"attribute {saved_attribute} does not match the expected {attribute}")
    expected_bytes = int(np.prod(attribute[:-1])) * dtype.itemsize
    data = files[data_name]
    if len(data) != expected_bytes:
        _corrupt(table, folder / data_name, f"holds {len(data)} bytes, expected {expected_bytes}")
    return np.frombuffer(data, dtype=dtype).astype(dtype.newbyteorder("="), copy=False)


def saved_optimizer(directory, table: str) -> SparseOptimizer | None:
    """The sparse optimizer ``table``'s checkpoint in ``directory`` was trained with, or None where its
    meta.json cannot be read here (a sharded layout, a missing or damaged table: the load reports those).
    A process with no sparse optimizer of its own opens its stores with it (spec/tf.md TF-21)."""
    try:
        with open(os.path.join(directory, table, "meta.json")) as handle:
            return optimizer_from_description(json.load(handle)["optimizer"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _read_meta(files: dict, folder: Path, table: str) -> dict:
    path = folder / "meta.json"
    if "meta.json" not in files:
        _corrupt(table, path, "file is missing")
    try:
        meta = json.loads(bytes(files["meta.json"]))
        if not isinstance(meta, dict):
            raise ValueError("not a JSON object")
    except ValueError as exc:
        _corrupt(table, path, f"unreadable ({exc})")
    required = ("format_version", "table", "dim", "key_dtype", "optimizer", "n_keys", "n_pending",
                "clock", "clock_source")
    missing = [k for k in required if k not in meta]
    if missing:
        _corrupt(table, path, f"fields missing: {missing}")
    if meta["format_version"] != FORMAT_VERSION:
        _corrupt(table, path, f"format version {meta['format_version']} is not {FORMAT_VERSION}")
    for name in ("dim", "n_keys", "n_pending"):
        if not isinstance(meta[name], int) or meta[name] < 0:
            _corrupt(table, path, f"{name} must be a non-negative integer")
    if not isinstance(meta["optimizer"], dict):
        _corrupt(table, path, "optimizer must be an object")
    return meta


def _corrupt(table: str, path: Path, problem: str):
    raise CheckpointError(f"table {table!r}: checkpoint: {str(path)!r}: {problem}")


# ------------------------------------------------------------ the switch
_ACTIVE: set[str] = set()            # temporary folders this process is writing now
_ACTIVE_LOCK = threading.Lock()
_SERIAL = itertools.count()
_TEMPORARY = r"\.{name}\.(?:writing|old)-(\d+)(?:-\d+)?"   # without -<n>: earlier versions' names


@contextmanager
def _temporary_folder(root: Path, table: str):
    """A fresh ``.<table>.writing-<pid>-<n>``; removed when the block ends
    (after a switch it holds the old version), whether the save worked or not."""
    with _ACTIVE_LOCK:
        temporary = root / f".{table}.writing-{os.getpid()}-{next(_SERIAL)}"
        _ACTIVE.add(temporary.name)
    try:
        temporary.mkdir()
        yield temporary
    finally:
        try:
            _remove_entry(temporary)
            fault_point("remove old")
        finally:
            with _ACTIVE_LOCK:
                _ACTIVE.discard(temporary.name)


def remove_stale_temporaries(root: Path, table: str) -> list[str]:
    """Delete the temporary folders of ``table`` that no save is writing:
    those of dead processes, and this process's that no save holds (CKPT-10).
    Returns their names."""
    pattern = re.compile(_TEMPORARY.format(name=re.escape(table)))
    removed = []
    for entry in _temporaries(root, table):
        pid = int(pattern.fullmatch(entry).group(1))
        with _ACTIVE_LOCK:
            busy = entry in _ACTIVE if pid == os.getpid() else _process_alive(pid)
        if not busy and not _is_only_copy(root, table, entry):
            _remove_entry(root / entry)
            removed.append(entry)
    if removed:
        logger.info("table %r: removed stale temporary folders %s from %s", table, removed, root)
    return removed


def _remove_entry(path: Path) -> None:
    """Delete a temporary folder, or the symlink an earlier version's switch left under a temporary
    name when the table folder was a symlink (CKPT-14); rmtree refuses symlinks."""
    if path.is_symlink():
        try:
            path.unlink()
        except OSError:
            pass
    else:
        shutil.rmtree(path, ignore_errors=True)


def _is_only_copy(root: Path, table: str, entry: str) -> bool:
    """An ``.old`` folder is the table itself when a fallback switch was killed between its renames."""
    return ".old-" in entry and not (root / table).exists()


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _switch(temporary: Path, final: Path) -> None:
    """Put the finished folder in place in one atomic step (CKPT-4): exchange
    it with the old table, or rename it in when there is none.  Without
    RENAME_EXCHANGE: rename the old one aside, then the new one in."""
    for _ in range(3):                   # another process may create or replace ``final`` meanwhile
        try:
            if not os.path.lexists(final):
                os.rename(temporary, final)
                fault_point("rename")
            elif use_exchange and _exchange(temporary, final):
                fault_point("exchange")
            else:
                _rename_twice(temporary, final)
            _fsync_directory(final.parent)
            fault_point("fsync parent")
            return
        except OSError as error:
            if error.errno not in (errno.ENOENT, errno.ENOTEMPTY, errno.EEXIST) or not temporary.exists():
                raise
    raise OSError(errno.EBUSY, "the table folder kept changing under a concurrent save", str(final))


def _rename_twice(temporary: Path, final: Path) -> None:
    old = final.with_name(temporary.name.replace(".writing-", ".old-"))
    os.rename(final, old)
    fault_point("rename aside")
    os.rename(temporary, final)
    fault_point("rename in")
    os.rename(old, temporary)            # removed with the temporary folder


# renameat2(2) with RENAME_EXCHANGE (Linux 3.15, glibc 2.28): swaps two paths atomically.
use_exchange = True
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100
try:
    _renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    _renameat2.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)
except (OSError, AttributeError):   # no such libc function: rename twice
    _renameat2 = None


def _exchange(a: Path, b: Path) -> bool:
    """Swap ``a`` and ``b``; False where the system or file system cannot."""
    if _renameat2 is None:
        return False
    if _renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
        return False
    raise OSError(code, os.strerror(code), str(a), None, str(b))


def _fsync_directory(folder: Path) -> None:
    """Make the entries of a folder (a rename, new files) durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def _io_errors(table: str, root: Path):
    """OSErrors of a save as CheckpointError naming the table and the path, the cause chained (CKPT-10)."""
    try:
        yield
    except OSError as error:
        where = error.filename or root
        raise CheckpointError(f"table {table!r}: directory: cannot write checkpoint {str(root)!r}: "
                              f"{error.strerror or error} ({where})") from error
