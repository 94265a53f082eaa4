"""The five collectives a sharded table needs, behind one small interface (spec/sharding.md).

``Communicator`` is what ``ShardedStore`` calls: ``allgather`` and ``bcast`` of small Python
objects (headers, errors, statistics), ``alltoallv`` of numpy rows, ``allgather_array`` for a
rank-order reduction, and ``barrier``.  Three implementations:

* ``SingleProcess``: rank 0 of 1, what every process is without an MPI launcher;
* ``VirtualWorld(n).communicators()``: n virtual ranks in one process, one thread each, for the
  equality tests (SHARD-9) -- the same code path as MPI, without a launcher;
* ``MpiCommunicator``: mpi4py on a duplicate of ``COMM_WORLD`` (so a user's own MPI traffic
  never matches ours).

mpi4py is imported only when a launcher started this process (``world()``): importing it calls
``MPI_Init``, which a plain ``python`` run must never pay for or fail on.
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from abc import ABC, abstractmethod

import numpy as np

from ..errors import MxrecError

# Environment variables an MPI launcher sets in every rank it starts: Open MPI (4 and 5 / PRRTE),
# MPICH / Intel MPI (Hydra), Slurm's PMI.
LAUNCHER_VARIABLES = ("OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK", "MPI_LOCALNRANKS")
TIMEOUT_VARIABLE = "MXREC_REF_COLLECTIVE_TIMEOUT"
DEFAULT_TIMEOUT_S = 300.0
logger = logging.getLogger("mxrec_ref.distributed")


class CollectiveError(MxrecError):
    """A collective could not complete: another rank failed or left (SHARD-8)."""


class Communicator(ABC):
    """One rank's view of a group of ``size`` ranks.  Every method is collective: every rank of the
    group calls it, in the same order (SHARD-8), or the group waits forever."""

    rank: int
    size: int
    context = "a collective"    # what the rank is doing, for the watchdog's message (ShardedStore sets it)

    @abstractmethod
    def allgather(self, obj) -> list:
        """Every rank's ``obj`` (a small picklable value), in rank order."""

    @abstractmethod
    def bcast(self, obj, root: int = 0):
        """``root``'s ``obj`` on every rank."""

    @abstractmethod
    def barrier(self) -> None: ...

    @abstractmethod
    def _alltoallv(self, send: np.ndarray, send_counts: np.ndarray, recv_counts: np.ndarray) -> np.ndarray: ...

    @abstractmethod
    def allgather_array(self, array: np.ndarray) -> list[np.ndarray]:
        """Every rank's equally shaped ``array``, in rank order (a deterministic reduction sums them
        in this order; MPI_Allreduce's order is the library's, SHARD-7)."""

    def alltoallv(self, send: np.ndarray, send_counts: np.ndarray, recv_counts: np.ndarray | None = None):
        """Personalised exchange of rows.  ``send`` holds the rows for rank 0, then rank 1, ...
        (``send_counts[d]`` rows for rank d); returns the rows received, from rank 0 first, and the
        number from each rank.  ``recv_counts`` may be given when the caller knows it (it saves an
        exchange of counts)."""
        send = np.ascontiguousarray(send)
        send_counts = np.asarray(send_counts, dtype=np.int64)
        if send_counts.shape != (self.size,) or int(send_counts.sum()) != len(send):
            raise ValueError(f"alltoallv: send_counts {send_counts.tolist()} do not add up to {len(send)} rows "
                             f"for {self.size} ranks")
        if recv_counts is None:
            recv_counts = np.asarray(self.allgather(send_counts), dtype=np.int64)[:, self.rank]
        recv_counts = np.asarray(recv_counts, dtype=np.int64)
        return self._alltoallv(send, send_counts, recv_counts), recv_counts

    def allreduce_sum(self, value: int) -> int:
        return int(sum(self.allgather(int(value))))

    def allreduce_array(self, array: np.ndarray) -> np.ndarray:
        """The library's sum over ranks (MPI_Allreduce: fast, but its order of additions is its own,
        so bits may differ from the rank-order sum, SHARD-7); emulations take the rank-order sum."""
        return rank_order_sum(self, array)


def rank_order_sum(comm: Communicator, array: np.ndarray) -> np.ndarray:
    """The sum over ranks of ``array``, added in rank order (rank 0 first) on every rank, so every rank
    gets the same bits and two runs agree (SHARD-7); ``MPI_Allreduce`` orders the additions its own way."""
    array = np.asarray(array)
    parts = comm.allgather_array(array)
    total = np.array(parts[0], copy=True).reshape(array.shape)
    for part in parts[1:]:
        total += np.asarray(part).reshape(array.shape)
    return total


def alltoallv_columns(comm: Communicator, columns: list, send_counts, recv_counts) -> list:
    """One ``alltoallv`` of several row-aligned arrays (the same rows, each its own dtype and row
    shape): their bytes side by side in one uint8 matrix, exchanged once and split again -- bit for bit
    what one exchange per array gives, with one collective instead of several (a sharded step runs
    two of these per table and direction)."""
    columns = [np.ascontiguousarray(column) for column in columns]
    n = len(columns[0])
    widths = [column.dtype.itemsize * int(np.prod(column.shape[1:], dtype=np.int64)) for column in columns]
    packed = np.empty((n, sum(widths)), dtype=np.uint8)
    start = 0
    for column, width in zip(columns, widths):
        packed[:, start:start + width] = column.view(np.uint8).reshape(n, width)
        start += width
    received, _ = comm.alltoallv(packed, send_counts, recv_counts)
    out, start = [], 0
    for column, width in zip(columns, widths):
        part = np.ascontiguousarray(received[:, start:start + width])
        out.append(part.view(column.dtype).reshape((len(received),) + column.shape[1:]))
        start += width
    return out


def gather_rows(comm: Communicator, rows: np.ndarray, counts) -> np.ndarray:
    """Every rank's ``rows`` concatenated in rank order (``counts[r]`` rows from rank r) on every rank:
    an all-gather of unequal parts, as one ``alltoallv`` that sends this rank's rows to every rank."""
    rows = np.ascontiguousarray(rows)
    send = np.concatenate([rows] * comm.size) if comm.size > 1 else rows
    received, _ = comm.alltoallv(send, np.full(comm.size, len(rows), np.int64), np.asarray(counts, np.int64))
    return received


class SingleProcess(Communicator):
    """Rank 0 of 1: every collective returns what was given."""

    rank, size = 0, 1

    def allgather(self, obj) -> list:
        return [obj]

    def bcast(self, obj, root: int = 0):
        return obj

    def barrier(self) -> None:
        return None

    def _alltoallv(self, send, send_counts, recv_counts):
        return send.copy()

    def allgather_array(self, array):
        return [np.array(array, copy=True)]


class VirtualWorld:
    """``size`` virtual ranks in one process, one thread per rank (SHARD-9's emulation).

    A collective is two barrier waits: every rank posts its part, then every rank reads what it
    needs, then the next collective may overwrite the posts.  A rank that fails calls ``abort``
    (``run`` does it), which wakes every waiting rank with CollectiveError instead of a hang."""

    def __init__(self, size: int, timeout: float = 120.0):
        if size < 1:
            raise ValueError(f"VirtualWorld: size: must be >= 1, got {size}")
        self.size = size
        self._posts: list = [None] * size
        self._barrier = threading.Barrier(size, timeout=timeout)

    def communicators(self) -> list["VirtualCommunicator"]:
        return [VirtualCommunicator(self, rank) for rank in range(self.size)]

    def abort(self) -> None:
        self._barrier.abort()

    def exchange(self, rank: int, post, read):
        """Post ``post`` as ``rank``'s part; return ``read(posts)`` once every rank has posted."""
        try:
            self._posts[rank] = post
            self._barrier.wait()
            result = read(self._posts)
            self._barrier.wait()
        except threading.BrokenBarrierError:
            raise CollectiveError(f"rank {rank}: another virtual rank failed or timed out in a collective") \
                from None
        return result

    def run(self, function) -> list:
        """``function(rank, communicator)`` on every virtual rank at once; the results in rank order.
        The first rank's exception (in rank order) is raised after every thread has stopped."""
        results, errors = [None] * self.size, [None] * self.size

        def body(rank, communicator):
            try:
                results[rank] = function(rank, communicator)
            except BaseException as error:    # noqa: BLE001 -- re-raised below, in rank order
                errors[rank] = error
                self.abort()

        threads = [threading.Thread(target=body, args=(rank, comm), name=f"virtual-rank-{rank}")
                   for rank, comm in enumerate(self.communicators())]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        first = [e for e in errors if e is not None and not isinstance(e, CollectiveError)] or \
            [e for e in errors if e is not None]
        if first:
            raise first[0]
        return results


class VirtualCommunicator(Communicator):
    def __init__(self, world: VirtualWorld, rank: int):
        self.world, self.rank, self.size = world, rank, world.size

    def allgather(self, obj) -> list:
        return self.world.exchange(self.rank, obj, list)

    def bcast(self, obj, root: int = 0):
        return self.world.exchange(self.rank, obj, lambda posts: posts[root])

    def barrier(self) -> None:
        self.world.exchange(self.rank, None, lambda posts: None)

    def _alltoallv(self, send, send_counts, recv_counts):
        starts = np.concatenate([[0], np.cumsum(send_counts)])
        post = (send, starts)
        me = self.rank

        def read(posts):
            parts = [rows[start[me]:start[me + 1]] for rows, start in posts]
            return np.concatenate(parts) if parts else send[:0].copy()

        received = self.world.exchange(me, post, read)
        if len(received) != int(recv_counts.sum()):
            raise CollectiveError(f"rank {me}: alltoallv received {len(received)} rows, expected "
                                  f"{int(recv_counts.sum())}")
        return np.array(received, copy=True)

    def allgather_array(self, array):
        return [np.array(a, copy=True) for a in self.allgather(np.asarray(array))]


class MpiCommunicator(Communicator):
    """mpi4py on a duplicate of ``comm`` (default COMM_WORLD): buffers travel as numpy memory
    (Alltoallv, Allgather); small headers are pickled (allgather, bcast)."""

    def __init__(self, comm=None, timeout: float | None = None):
        from mpi4py import MPI    # lazy: importing mpi4py initialises MPI (module docstring)
        self._mpi = MPI
        self.comm = (MPI.COMM_WORLD if comm is None else comm).Dup()
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.local_size = self.comm.Split_type(MPI.COMM_TYPE_SHARED).Get_size()
        self.watchdog = Watchdog(self, collective_timeout() if timeout is None else timeout)
        if self.size > 1:
            install_abort_hook()

    def allgather(self, obj) -> list:
        with self.watchdog.waiting("allgather"):
            return self.comm.allgather(obj)

    def bcast(self, obj, root: int = 0):
        with self.watchdog.waiting("bcast"):
            return self.comm.bcast(obj, root=root)

    def barrier(self) -> None:
        with self.watchdog.waiting("barrier"):
            self.comm.Barrier()

    def abort(self, code: int = 1) -> None:
        self.comm.Abort(code)

    def _alltoallv(self, send, send_counts, recv_counts):
        per_row = int(np.prod(send.shape[1:], dtype=np.int64))
        recv = np.empty((int(recv_counts.sum()),) + send.shape[1:], dtype=send.dtype)
        flat_send, flat_recv = _bytes_view(send), _bytes_view(recv)
        width = per_row * send.dtype.itemsize          # bytes per row: every dtype travels as bytes
        s_counts, r_counts = send_counts * width, recv_counts * width
        s_displs = np.concatenate([[0], np.cumsum(s_counts)[:-1]])
        r_displs = np.concatenate([[0], np.cumsum(r_counts)[:-1]])
        with self.watchdog.waiting("all-to-all"):
            self.comm.Alltoallv([flat_send, (s_counts, s_displs), self._mpi.BYTE],
                                [flat_recv, (r_counts, r_displs), self._mpi.BYTE])
        return recv

    def allreduce_array(self, array):
        array = np.ascontiguousarray(array)
        out = np.empty_like(array)
        with self.watchdog.waiting("allreduce"):
            self.comm.Allreduce(array, out, op=self._mpi.SUM)
        return out

    def allgather_array(self, array):
        array = np.ascontiguousarray(array)
        out = np.empty((self.size,) + array.shape, dtype=array.dtype)
        with self.watchdog.waiting("allgather"):
            self.comm.Allgather([_bytes_view(array), self._mpi.BYTE], [_bytes_view(out), self._mpi.BYTE])
        return [out[r].reshape(array.shape) for r in range(self.size)]


def collective_timeout() -> float:
    """MXREC_REF_COLLECTIVE_TIMEOUT: seconds a rank may wait in one collective (default 300; 0: forever)."""
    text = os.environ.get(TIMEOUT_VARIABLE, "").strip()
    if not text:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise MxrecError(f"{TIMEOUT_VARIABLE}: must be a number of seconds >= 0 (0: wait forever), got {text!r}")
    return value


class Watchdog:
    """Ends the whole job when this rank waits too long in one collective (SHARD-15): a rank that
    failed, or runs other steps, would otherwise leave the others waiting forever.  A daemon thread
    looks once a second; mpi4py frees the GIL while MPI waits, so it runs while the rank is blocked."""

    def __init__(self, comm: "MpiCommunicator", timeout: float):
        self.comm, self.timeout = comm, timeout
        self._since: float | None = None
        self._what = ""
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def waiting(self, primitive: str):
        if self.timeout <= 0:
            yield
            return
        with self._lock:
            self._since, self._what = time.monotonic(), f"{self.comm.context} ({primitive})"
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="mxrec-collective-watchdog", daemon=True)
                self._thread.start()
        try:
            yield
        finally:
            with self._lock:
                self._since = None

    def _watch(self) -> None:
        while True:
            time.sleep(min(1.0, self.timeout / 4))
            with self._lock:
                since, what = self._since, self._what
            if since is not None and time.monotonic() - since > self.timeout:
                waited = time.monotonic() - since
                message = (f"mxrec-ref: rank {self.comm.rank} of {self.comm.size} waited {waited:.0f} s in {what}; "
                           f"all ranks must run the same steps (another rank failed, stopped or runs other "
                           f"steps); ending the job ({TIMEOUT_VARIABLE}={self.timeout:g})")
                print(message, file=sys.stderr, flush=True)     # once: the library's log has no handler
                self.comm.abort(1)
                return


def end_job_after_error(status: int = 1) -> None:
    """SHARD-21: this rank failed (its error is printed): on several MPI ranks, end the whole job now
    (``MPI_Abort``).  Otherwise the rank's exit waits in ``MPI_Finalize`` for ranks that wait for it in a
    collective, until the watchdog's timeout (SHARD-15).  Nothing happens without MPI or on one rank."""
    comm = _WORLD
    if not isinstance(comm, MpiCommunicator) or comm.size == 1:
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:     # noqa: BLE001 -- a closed stream must not keep the job alive
            pass
    comm.abort(status if isinstance(status, int) and 0 < status < 256 else 1)


_HOOKED: list = []


def install_abort_hook() -> None:
    """SHARD-21: an uncaught exception prints as before (the hook that was installed), then ends the job.
    Installed once, with the first MPI communicator of several ranks."""
    if _HOOKED:
        return
    previous = sys.excepthook

    def print_then_end_job(kind, value, tb):
        try:
            previous(kind, value, tb)
        finally:
            end_job_after_error(1)

    _HOOKED.append(previous)
    sys.excepthook = print_then_end_job


def _bytes_view(array: np.ndarray) -> np.ndarray:
    return array.reshape(-1).view(np.uint8) if array.size else np.zeros(0, dtype=np.uint8)


def launched_by_mpi() -> bool:
    """True when an MPI launcher (mpirun, mpiexec, srun) started this process."""
    return any(name in os.environ for name in LAUNCHER_VARIABLES)


_WORLD: Communicator | None = None
_WORLD_LOCK = threading.Lock()


def world() -> Communicator:
    """This process's communicator: MPI when a launcher started it (SHARD-1), else rank 0 of 1.
    Created once; mpi4py is imported only here."""
    global _WORLD
    with _WORLD_LOCK:
        if _WORLD is None:
            if launched_by_mpi():
                try:
                    _WORLD = MpiCommunicator()
                except ImportError as error:
                    raise MxrecError(f"this process was started by an MPI launcher but mpi4py is not installed "
                                     f"({error}); install it with `pip install mxrec-ref[mpi]` or run without "
                                     f"mpirun") from None
            else:
                _WORLD = SingleProcess()
        return _WORLD


def set_world(communicator: Communicator | None) -> None:
    """Replace this process's communicator (tests; None: decide again at the next ``world()``)."""
    global _WORLD
    with _WORLD_LOCK:
        _WORLD = communicator
