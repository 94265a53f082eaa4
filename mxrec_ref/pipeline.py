"""The key pipeline (spec/pipeline.md): the work of coming training batches is done while the
current step trains, and the step's lookup only commits it and reads the rows.

``KeyPipeline`` drives the stores of a model's tables through one batch stream:
``push(keys)`` hands over the next batch's keys, and every table resolves it ahead at once
(``Store.resolve_ahead``: dedup, the probe, initial rows) -- in a worker thread by default, so that
work overlaps the caller's step; ``pop(step=...)`` is the oldest pushed batch's training lookup on
every table (``Store.gather``).  A resolve ahead changes nothing a store shows (PIPE-1), so the
results, the tables, the statistics and the checkpoints of a pipelined run are the serial run's, bit
for bit, whatever the threads' timing and whatever the caller does between steps (saves, evictions,
``set_threshold``, evaluation): the pipeline is an execution strategy.  Off (``enabled=False`` or
``MXREC_KEY_PIPELINE=0``), ``pop`` runs the plain ``Store.lookup`` (PIPE-7).
"""
from __future__ import annotations

import logging
import os
import queue
import threading
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field

from .errors import UsageError
from .state import LookupResult

logger = logging.getLogger(__name__)

DEPTH = 1            # batches pushed beyond the next one to pop (PIPE-5)
SWITCH = "MXREC_KEY_PIPELINE"
# PIPE-7: the work ahead needs a core beside the step's: on 2 vCPUs it gains (Wide&Deep 1.14x, 2 ranks 1.05x,
# 26-table model 1.0x, bench/README.md), pinned to one core it costs (0.95x)
MIN_CORES = 2


def usable_cores() -> int:
    """The cores this process may run on (its affinity: ``taskset``, ``mpirun --bind-to core``), else the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):         # no affinity on this platform
        return os.cpu_count() or 1


def enabled_by_default() -> bool:
    """PIPE-7: ``MXREC_KEY_PIPELINE`` says (``0``, ``false``, ``off``, ``no``: off; anything else: on);
    unset, on when the process may run on at least MIN_CORES cores."""
    value = os.environ.get(SWITCH)
    if value is None or not value.strip():
        return usable_cores() >= MIN_CORES
    return value.strip().lower() not in ("0", "false", "off", "no")


def _per_table(value, n: int) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value] * n


@dataclass
class _Pushed:
    """One pushed batch: its keys and lookup arguments per store and, when resolved ahead, the future
    of its ``AheadBatch`` list (or the error of a key check, raised by ``pop``)."""

    keys: list
    counts: list
    ahead: Future = field(default_factory=Future)


class KeyPipeline:
    """One batch stream over ``stores`` (one ``Store`` per table, in the order the step looks them up):
    ``push`` batch t+1, ``pop`` batch t, apply t's gradients -- at most ``depth`` batches pushed beyond
    the next one to pop (PIPE-5)."""

    def __init__(self, stores, *, depth: int = DEPTH, worker: bool = True, enabled: bool | None = None):
        self.stores = list(stores)
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise UsageError(f"tables {self._names()}: depth: the key pipeline's depth must be an integer >= 1, "
                             f"got {depth!r}")
        self.depth = depth
        self.enabled = enabled_by_default() if enabled is None else bool(enabled)
        self._pushed: deque[_Pushed] = deque()
        self._pushes = self._pops = 0          # batches pushed, batches popped
        self._turn = threading.Condition()     # the worker's gate: see _work
        self._jobs: queue.Queue | None = None
        self._worker: threading.Thread | None = None
        if worker and self.enabled:
            self._jobs = queue.Queue()
            self._worker = threading.Thread(target=self._work, name="mxrec-key-pipeline", daemon=True)
            self._worker.start()

    def _names(self) -> str:
        return ", ".join(repr(store.name) for store in self.stores)

    # ----------------------------------------------------------------- API
    @property
    def pending(self) -> int:
        """Batches pushed and not popped."""
        return len(self._pushed)

    def push(self, keys, *, counts=None) -> None:
        """Hand over the next training batch: ``keys`` one array per store (``counts`` likewise, or
        None).  Its work starts now, in the worker when there is one; a
        check that fails is raised by the batch's ``pop``, as the serial lookup would raise it then."""
        keys = list(keys)
        if len(keys) != len(self.stores):
            raise UsageError(f"tables {self._names()}: keys: one key array per table ({len(self.stores)}), "
                             f"got {len(keys)}")
        if len(self._pushed) > self.depth:
            raise UsageError(f"tables {self._names()}: push: {len(self._pushed)} batches are pushed and not "
                             f"popped; the pipeline's depth is {self.depth} (PIPE-5): pop one first")
        pushed = _Pushed(keys, _per_table(counts, len(self.stores)))
        if not self.enabled:
            pushed.ahead.set_result(None)
        elif self._jobs is not None:
            self._jobs.put((self._pushes, pushed))
        else:
            self._resolve(pushed)
        self._pushed.append(pushed)
        self._pushes += 1

    def pop(self, *, step: int, timestamp: int | None = None, pad_to=None) -> list[LookupResult]:
        """The training lookup of the oldest pushed batch on every store, in store order, now, with
        ``step``, ``timestamp`` and ``pad_to`` (one value, or one per store) (PIPE-2); an error ends the
        batch at its table, as in the serial step."""
        if not self._pushed:
            raise UsageError(f"tables {self._names()}: pop: no batch was pushed")
        pushed = self._pushed.popleft()
        try:
            return self._lookups(pushed, step, timestamp, _per_table(pad_to, len(self.stores)))
        finally:
            self._popped()          # an error too: the batch is done with (the worker's gate counts it)

    def _lookups(self, pushed: _Pushed, step, timestamp, pad_to: list) -> list[LookupResult]:
        batches = pushed.ahead.result()
        results = []
        for i, store in enumerate(self.stores):
            if batches is None:        # the pipeline is off: the plain lookup (PIPE-7)
                results.append(store.lookup(pushed.keys[i], train=True, step=step, timestamp=timestamp,
                                            pad_to=pad_to[i], counts=pushed.counts[i]))
            elif isinstance(batches[i], BaseException):
                raise batches[i]
            else:
                results.append(store.gather(batches[i], step=step, timestamp=timestamp, pad_to=pad_to[i]))
        return results

    def _popped(self) -> None:
        with self._turn:
            self._pops += 1
            self._turn.notify_all()

    def wait_next(self) -> None:
        """Until the next batch to pop is resolved ahead (``pop`` waits for it anyway; this splits the
        wait from the gathers, for profiling)."""
        if self._pushed:
            self._pushed[0].ahead.result()

    _closing = False

    def close(self) -> None:
        """Stop the worker once it has resolved what was pushed (those batches stay poppable)."""
        if self._worker is not None:
            with self._turn:
                self._closing = True
                self._turn.notify_all()
            self._jobs.put(None)
            self._worker.join()
            self._worker = self._jobs = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------- worker
    def _work(self) -> None:
        """Resolve the pushed batches in order, batch j once batch j - depth was popped: the work ahead
        then runs while the caller's step computes, not while its lookups commit (the two would only
        take turns at the stores' locks and the GIL).  Timing only: no result depends on it (PIPE-1)."""
        while (job := self._jobs.get()) is not None:
            index, pushed = job
            with self._turn:
                self._turn.wait_for(lambda: self._pops >= index - self.depth + 1 or self._closing)
            self._resolve(pushed)

    def _resolve(self, pushed: _Pushed) -> None:
        """Every store's ``resolve_ahead`` of ``pushed``; a store whose key check fails gets its error
        instead, raised when ``pop`` reaches that table."""
        batches = []
        for i, store in enumerate(self.stores):
            try:
                batches.append(store.resolve_ahead(pushed.keys[i], counts=pushed.counts[i]))
            except Exception as error:     # noqa: BLE001 -- raised by pop, where the serial lookup would raise
                batches.append(error)
        pushed.ahead.set_result(batches)
