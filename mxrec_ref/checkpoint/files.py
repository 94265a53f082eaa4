"""Checkpoint files, one pass over the bytes (CKPT-12): written and read in pieces, each piece's CRC-32
taken as it is written or arrives; only regular files are read (CKPT-13)."""
from __future__ import annotations

import errno
import os
import stat
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from ..checksum import crc32
from .checks import check_digest, corrupt
from .faults import fault_point
from .format import CHUNK_BYTES, IO_THREADS


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


def read_at(fd: int, name: str) -> tuple[np.ndarray, int]:
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


def write_durably(path: Path, data, durable: bool = True) -> tuple[int, int]:
    """Write ``data`` (a buffer) to a new file and fsync it (CKPT-8); returns its
    (size, CRC-32), taken in the same pass over the bytes as the write (CKPT-12)."""
    with FileWriter(path, durable=durable) as writer:
        writer.write(data)
        return writer.close()


def write_file(folder: Path, name: str, data, *, durable: bool = True) -> tuple[int, int]:
    """Write and fsync one file (CKPT-8: durable before the switch); its (size, CRC-32)."""
    digest = write_durably(folder / name, data, durable)
    fault_point(f"fsync {name}")
    return digest


def write_in_parallel(folder: Path, files: list[tuple[str, np.ndarray]], *,
                      durable: bool = True) -> dict[str, tuple[int, int]]:
    """Write and fsync ``files`` (name, buffer) on a pool of threads; the fault hook
    still names each file in the order given, once it is durable (CKPT-8), so the
    steps a kill test sees do not depend on thread timing."""
    digests = {}
    with ThreadPoolExecutor(max_workers=max(1, min(IO_THREADS, len(files))),
                            thread_name_prefix="mxrec-ckpt-write") as pool:
        futures = [pool.submit(write_durably, folder / name, data, durable) for name, data in files]
        try:
            for (name, _), future in zip(files, futures):
                digests[name] = future.result()
                fault_point(f"fsync {name}")
        except BaseException:
            for future in futures:
                future.cancel()
            raise
    return digests


def fsync_directory(folder: Path) -> None:
    """Make the entries of a folder (a rename, new files) durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _OpenFile:
    """A file descriptor ``fd`` closed on leaving a ``with`` block unless already closed."""
    fd: int | None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class FileWriter(_OpenFile):
    """A new file written in pieces, the CRC-32 of each piece taken just before it is written (CKPT-12);
    ``close`` fsyncs it (unless not ``durable``) and returns its (size, CRC-32)."""

    def __init__(self, path: Path, *, durable: bool = True):
        self.path, self.durable = path, durable
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        self.size, self.crc = 0, 0

    def write(self, data) -> None:
        """Append ``data``: an array (its bytes in memory order) or a bytes-like object."""
        view = memoryview(np.ascontiguousarray(data).reshape(-1).view(np.uint8) if isinstance(data, np.ndarray)
                          else data)
        for start in range(0, len(view), CHUNK_BYTES):
            chunk = view[start:start + CHUNK_BYTES]
            self.crc = crc32(chunk, self.crc)
            self.size += len(chunk)
            while chunk:
                chunk = chunk[os.write(self.fd, chunk):]

    def close(self) -> tuple[int, int]:
        try:
            if self.durable:
                os.fsync(self.fd)
        finally:
            os.close(self.fd)
            self.fd = None
        return self.size, self.crc


class FileReader(_OpenFile):
    """A file read front to back in rows of ``dtype`` x ``shape``, each piece checksummed as it
    arrives; ``finish`` checks the whole file's size and CRC-32 against its manifest ``entry``
    (CKPT-8, CKPT-12).  ``fd`` is an open descriptor the reader owns."""

    def __init__(self, fd: int, path: Path, entry: dict, dtype: np.dtype, shape: tuple, table: str):
        self.fd, self.path, self.entry, self.table = fd, path, entry, table
        self.dtype, self.shape = dtype, tuple(shape)
        self.row_bytes = dtype.itemsize * int(np.prod(self.shape, dtype=np.int64))
        self.done, self.crc = 0, 0

    def read(self, rows: int) -> np.ndarray:
        want = rows * self.row_bytes
        data = np.empty(want, dtype=np.uint8)
        view, got = memoryview(data), 0
        while got < want:
            n = os.readv(self.fd, [view[got:]])
            if n == 0:
                corrupt(self.table, self.path,
                        f"ends after {self.done + got} bytes, {self.entry.get('bytes')} expected")
            self.crc = crc32(view[got:got + n], self.crc)
            got += n
        self.done += want
        return data.view(self.dtype).astype(self.dtype.newbyteorder("="), copy=False).reshape((rows,) + self.shape)

    def pread_rows(self, first_row: int, rows: int) -> np.ndarray:
        """Rows read at a position, unchecked and leaving the front-to-back pass where it is (a
        first pass that only counts: the checked pass follows)."""
        data = os.pread(self.fd, rows * self.row_bytes, first_row * self.row_bytes)
        return np.frombuffer(data, dtype=self.dtype, count=len(data) // self.dtype.itemsize).reshape(
            (-1,) + self.shape).astype(self.dtype.newbyteorder("="), copy=False)

    def finish(self) -> None:
        """The rest of the file (none, when its rows were all read) and the manifest's checks."""
        while True:
            rest = os.read(self.fd, CHUNK_BYTES)
            if not rest:
                break
            self.crc = crc32(rest, self.crc)
            self.done += len(rest)
        check_digest(self.path, self.done, self.crc, self.entry, self.table)
