"""When to evict, the same on every rank (spec/sharding.md, SHARD-19).

mxRec's ``EvictHook`` evicts every ``evict_step_interval`` steps or when ``evict_time_interval``
seconds passed since the last eviction.  The step is the same on every rank; the wall clock is not
(ranks start, run and are scheduled at their own pace), so on several ranks rank 0 alone reads its
clock and broadcasts the decision: eviction is collective (SHARD-8), and every rank must call it at
the same step.  What is evicted never depends on the wall clock: each table evicts by its own clock
(its latest step or data timestamp, EVI-*); the clock only decides *when*.
"""
from __future__ import annotations

import time
from typing import Callable

from .comm import Communicator, world


class EvictionSchedule:
    """``due(step)`` after each training step: True when eviction runs now, on every rank alike."""

    def __init__(self, step_interval: int | None, time_interval: float, clock: Callable[[], float] = time.monotonic,
                 comm: Communicator | None = None):
        self.step_interval = step_interval
        self.time_interval = time_interval
        self._clock = clock
        self._comm = comm            # None: this process's communicator, looked up at the first decision
        self._last_trigger: float | None = None

    @property
    def comm(self) -> Communicator:
        if self._comm is None:
            self._comm = world()
        return self._comm

    def start(self) -> None:
        """The time interval counts from now (EvictHook.begin); only rank 0 reads its clock."""
        self._last_trigger = self._clock() if self.comm.rank == 0 else 0.0

    def due(self, step: int) -> bool:
        """Collective on several ranks (one ``bcast``): every rank calls it after the same steps."""
        if self._last_trigger is None:
            self.start()
        by_step = self.step_interval is not None and step % self.step_interval == 0
        comm = self.comm
        now = self._clock() if comm.rank == 0 else None      # only rank 0's clock decides (SHARD-19)
        by_time = comm.rank == 0 and now - self._last_trigger > self.time_interval
        if comm.size > 1:
            by_time = comm.bcast(by_time, root=0)
        if (by_step or by_time) and comm.rank == 0:
            self._last_trigger = now
        return bool(by_step or by_time)
