"""The key pipeline (spec/pipeline.md): the resolves of coming training batches run while the
current step trains, and the step only gathers rows and applies gradients.

``KeyPipeline`` drives the stores of a model's tables through one batch stream:
``push(keys)`` hands over the next batch's keys and resolves them at once on every table
(``Store.resolve_ahead``) -- in a worker thread by default, so the resolve overlaps the caller's
step; ``pop()`` gathers the oldest pushed batch; the caller applies its gradients with
``Store.apply_gradients`` as usual.  Everything a pipelined run computes equals the serial run's,
bit for bit (PIPE-1..PIPE-4): the pipeline is an execution strategy, the serial order is the
specification.  With the pipeline off (``enabled=False`` or ``MXREC_KEY_PIPELINE=0``), or for a
table whose engine cannot resolve ahead (PIPE-6), ``pop`` runs the plain ``Store.lookup``.
"""
from __future__ import annotations

import logging
import os
import queue
import threading
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass

from .errors import UsageError
from .state import LookupResult

logger = logging.getLogger(__name__)

DEPTH = 1            # batches resolved ahead of the one the caller trains on (PIPE-5)
SWITCH = "MXREC_KEY_PIPELINE"


def enabled_by_default() -> bool:
    """PIPE-7: on unless ``MXREC_KEY_PIPELINE`` is ``0``, ``false`` or ``off``."""
    return os.environ.get(SWITCH, "1").strip().lower() not in ("0", "false", "off", "no")


@dataclass
class _Pushed:
    """One pushed batch: its keys and lookup arguments per store, and, when resolved ahead, the
    future of its ``AheadBatch`` per store (None for a table run serially)."""

    keys: list
    step: int
    timestamp: int | None
    pad_to: list
    counts: list
    ahead: Future | None = None


class KeyPipeline:
    """One batch stream over ``stores`` (one ``Store`` per table, in the order the serial step looks
    them up): ``push`` batch t+1, ``pop`` batch t, apply t -- up to ``depth`` batches pushed ahead of
    the one popped last (PIPE-5)."""

    def __init__(self, stores, *, depth: int = DEPTH, worker: bool = True, enabled: bool | None = None):
        self.stores = list(stores)
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            names = ", ".join(repr(store.name) for store in self.stores)
            raise UsageError(f"tables {names}: depth: the key pipeline's depth must be an integer >= 1, got {depth!r}")
        self.depth = depth
        self.enabled = enabled_by_default() if enabled is None else bool(enabled)
        self.ahead = [self.enabled and store.engine.resolves_ahead for store in self.stores]
        for store, ahead in zip(self.stores, self.ahead):
            if self.enabled and not ahead:
                logger.warning("table %r: the key pipeline runs its batches serially: a %s reads rows while it "
                               "resolves (PIPE-6)", store.name, type(store.engine).__name__)
        self._pushed: deque[_Pushed] = deque()
        self._jobs: queue.Queue | None = None
        self._worker: threading.Thread | None = None
        if worker and any(self.ahead):
            self._jobs = queue.Queue()
            self._worker = threading.Thread(target=self._work, name="mxrec-key-pipeline", daemon=True)
            self._worker.start()

    # ----------------------------------------------------------------- API
    @property
    def pending(self) -> int:
        """Batches pushed and not popped."""
        return len(self._pushed)

    def push(self, keys, *, step: int, timestamp: int | None = None, pad_to=None, counts=None) -> None:
        """Hand over the next training batch: ``keys`` one array per store (``pad_to`` and ``counts``
        likewise, or one value for all); its resolves start now, in the worker when there is one.
        At most ``depth`` batches beyond the next one to pop may be pushed (PIPE-5)."""
        n = len(self.stores)
        keys = list(keys)
        if len(keys) != n:
            raise UsageError(f"tables {', '.join(repr(s.name) for s in self.stores)}: keys: one key array per "
                             f"table ({n}), got {len(keys)}")
        if len(self._pushed) > self.depth:
            raise UsageError(f"table {self.stores[0].name!r}: push: {len(self._pushed)} batches are pushed and "
                             f"not popped; the pipeline's depth is {self.depth} (PIPE-5): pop one first")
        per_table = [value if isinstance(value, (list, tuple)) else [value] * n for value in (pad_to, counts)]
        pushed = _Pushed(keys, step, timestamp, *per_table)
        if any(self.ahead):
            pushed.ahead = Future()
            if self._jobs is not None:
                for store, ahead in zip(self.stores, self.ahead):
                    if ahead:
                        store.announce_ahead()     # a boundary call is refused from now on (PIPE-4)
                self._jobs.put(pushed)
            else:
                self._resolve(pushed)
        self._pushed.append(pushed)

    def pop(self) -> list[LookupResult]:
        """The training lookup results of the oldest pushed batch, one per store: gathered now for
        the tables resolved ahead (PIPE-2), looked up now for the others.  An error of its resolve
        is raised here."""
        if not self._pushed:
            raise UsageError(f"table {self.stores[0].name!r}: pop: no batch was pushed")
        pushed = self._pushed.popleft()
        batches, error = pushed.ahead.result() if pushed.ahead is not None else ([], None)
        if error is not None:
            for store, batch in zip(self.stores, batches):
                if batch is not None:
                    store.gather(batch)    # the tables before the failed one looked up, as in the serial step
            raise error
        batches += [None] * (len(self.stores) - len(batches))
        results = []
        for i, (store, batch) in enumerate(zip(self.stores, batches)):
            if batch is not None:
                results.append(store.gather(batch))
            else:
                results.append(store.lookup(pushed.keys[i], train=True, step=pushed.step, timestamp=pushed.timestamp,
                                            pad_to=pushed.pad_to[i], counts=pushed.counts[i]))
        return results

    def wait(self) -> None:
        """Until every pushed batch's resolve has run: then reads of the stores (``stats``, ``export``,
        ...) are those of a defined point, the serial state after the resolves of every pushed batch
        (PIPE-4); without ``wait``, a read while the worker runs sees the threads' timing."""
        for pushed in self._pushed:
            if pushed.ahead is not None:
                pushed.ahead.result()

    def close(self) -> None:
        """Stop the worker (the batches pushed stay poppable)."""
        if self._worker is not None:
            self._jobs.put(None)
            self._worker.join()
            self._worker = self._jobs = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------- worker
    def _work(self) -> None:
        while (pushed := self._jobs.get()) is not None:
            self._resolve(pushed)

    def _resolve(self, pushed: _Pushed) -> None:
        """Every ahead table's resolve of ``pushed``, in table order (PIPE-1).  An error ends the batch
        at that table, as it ends the serial step's lookups there; ``pop`` raises it."""
        batches, error, announced = [], None, self._jobs is not None
        for i, (store, ahead) in enumerate(zip(self.stores, self.ahead)):
            if not ahead:
                batches.append(None)
                continue
            try:
                batches.append(store.resolve_ahead(pushed.keys[i], step=pushed.step, timestamp=pushed.timestamp,
                                                   pad_to=pushed.pad_to[i], counts=pushed.counts[i],
                                                   announced=announced))
            except Exception as raised:     # raised where the batch is popped
                error = raised
                break
        if error is not None and announced:     # the tables after the failed one resolve nothing
            for store, ahead in zip(self.stores[i + 1:], self.ahead[i + 1:]):
                if ahead:
                    store.withdraw_ahead()
        pushed.ahead.set_result((batches, error))
