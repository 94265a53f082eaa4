"""The folder protocol (CKPT-4, CKPT-8, CKPT-10, CKPT-11, CKPT-14): how a folder of files is put in
place atomically, and how a reader finds one complete version of it.

A save writes into a temporary sibling folder ``.<name>.writing-<pid>-<n>`` (``temporary_folder``),
fsyncs every file and the folder, and ``switch`` puts it in place in one atomic step --
``renameat2(RENAME_EXCHANGE)`` swaps it with the old folder (a plain rename for the first save) -- and
the old version, now under the temporary name, is deleted when the block ends.  Where the file system
cannot exchange, the old folder is renamed aside to ``.<name>.old-<pid>-<n>`` first, and a reader
recovers from a crash between the two renames (``open_table_folder``).  A reader opens the folder once
and reads every file through that descriptor: files are never changed once written, so it reads one
complete version, or finds a file gone because a concurrent save deleted that version, and reads again
(``read_one_version``).
"""
from __future__ import annotations

import ctypes
import errno
import itertools
import logging
import os
import re
import shutil
import threading
from contextlib import contextmanager
from pathlib import Path

from ..errors import CheckpointError
from .faults import fault_point
from .files import fsync_directory
from .format import META, READ_ATTEMPTS

logger = logging.getLogger("mxrec_ref.checkpoint")


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


@contextmanager
def io_errors(table: str, root: Path):
    """OSErrors of a save as CheckpointError naming the table and the path, the cause chained (CKPT-10)."""
    try:
        yield
    except OSError as error:
        where = error.filename or root
        raise CheckpointError(f"table {table!r}: directory: cannot write checkpoint {str(root)!r}: "
                              f"{error.strerror or error} ({where})") from error


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


def prepare_save(root: Path, table: str) -> Path:
    """Make ``root``, delete the table's stale temporary folders (CKPT-10), and return the folder the
    save replaces (``table_target``): a save's first steps, before its temporary folder."""
    root.mkdir(parents=True, exist_ok=True)
    target = table_target(root, table)
    remove_stale_temporaries(root, table)
    if target != root / table:
        remove_stale_temporaries(target.parent, target.name)
    return target


def list_tables(directory) -> list[str]:
    root = Path(directory)
    try:
        return sorted(p.name for p in root.iterdir() if (p / META).is_file() and not p.name.startswith("."))
    except OSError:
        return []


# ------------------------------------------------------------ temporary folders
_ACTIVE: set[str] = set()            # temporary folders this process is writing now
_ACTIVE_LOCK = threading.Lock()
_SERIAL = itertools.count()
_TEMPORARY = r"\.{name}\.(?:writing|old)-(\d+)(?:-\d+)?"   # without -<n>: earlier versions' names


def temporaries(root: Path, name: str) -> list[str]:
    """The temporary entries of ``name`` under ``root``: saves under way, or left by dead ones."""
    pattern = re.compile(_TEMPORARY.format(name=re.escape(name)))
    try:
        return sorted(entry for entry in os.listdir(root) if pattern.fullmatch(entry))
    except OSError:
        return []


@contextmanager
def temporary_folder(root: Path, table: str):
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
    for entry in temporaries(root, table):
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


# ------------------------------------------------------------ the switch
def switch(temporary: Path, final: Path) -> None:
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
            fsync_directory(final.parent)
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
# Set as ``mxrec_ref.checkpoint.use_exchange`` (the package forwards it here); the crash tests turn it off.
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


def write_file_atomically(path, data: bytes) -> None:
    """One small file that a kill leaves either old or new, never half written (CKPT-4): written and
    fsynced under a temporary name beside it, renamed over it, the folder fsynced."""
    path = Path(path)
    with _ACTIVE_LOCK:
        temporary = path.with_name(f".{path.name}.writing-{os.getpid()}-{next(_SERIAL)}")
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise
    fsync_directory(path.parent)


# ------------------------------------------------------------ finding one version to read
class Vanished(Exception):
    """A file of the version being read is missing (``name`` None: meta.json)."""

    def __init__(self, name: str | None, problem: str):
        super().__init__(name)
        self.name, self.problem = name, problem


def read_one_version(root: Path, saved_name: str, table: str, read):
    """``read(fd, folder)`` of one complete version of ``root/saved_name``: the folder is opened once
    and ``read`` reads every file through that descriptor.  A file the manifest lists but the folder
    lacks (``read`` raises Vanished) is corruption -- unless the path now names another folder: a
    concurrent save replaced this version and deleted it under us, and the new one is read instead
    (CKPT-11)."""
    for _ in range(READ_ATTEMPTS):
        fd, opened = open_table_folder(root, saved_name, table)
        try:
            if not exists_at(fd, META):
                raise Vanished(None, "")
            return read(fd, opened)
        except Vanished as vanished:
            if _same_folder(fd, opened):
                if vanished.name is None:
                    raise no_table(root, saved_name, table) from None
                raise CheckpointError(f"table {table!r}: checkpoint: {str(opened / vanished.name)!r}: "
                                      f"{vanished.problem}") from None
        finally:
            os.close(fd)
    raise CheckpointError(f"table {table!r}: checkpoint: {str(root / saved_name)!r} was replaced "
                          f"{READ_ATTEMPTS} times while being read; stop the process saving it, or load another "
                          f"checkpoint")


def open_table_folder(root: Path, saved_name: str, table: str) -> tuple[int, Path]:
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
        if not temporaries(root, saved_name):    # no save under way that could be switching it
            break
    raise no_table(root, saved_name, table)


def no_table(root: Path, saved_name: str, table: str) -> CheckpointError:
    return CheckpointError(f"table {table!r}: directory: no table {saved_name!r} in checkpoint {str(root)!r} "
                           f"(tables present: {list_tables(root)})")


def _interrupted_switch(root: Path, name: str) -> Path | None:
    """Where the rename fallback of ``switch`` was killed between its two
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


def exists_at(fd: int, name: str) -> bool:
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
