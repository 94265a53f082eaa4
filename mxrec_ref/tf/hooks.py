"""`EvictHook` (reference 2.6): triggers eviction between training steps."""
from __future__ import annotations

import time

import tensorflow as tf

from .config_initializer import ConfigInitializer
from .constants import DEFAULT_EVICT_TIME_INTERVAL


class EvictHook(tf.compat.v1.train.SessionRunHook):
    """After a training step, evict when ``evict_step_interval`` divides the global
    step, or when ``evict_time_interval`` seconds passed since the last trigger.

    Eviction itself uses each table's own clock (its latest step or data
    timestamp), never the wall clock; the wall clock only decides *when* the
    time-interval trigger fires, as in mxRec.  Pass ``clock=`` (a function
    returning seconds) to make that trigger deterministic too.
    """

    def __init__(self, evict_enable=False, evict_time_interval=DEFAULT_EVICT_TIME_INTERVAL, evict_step_interval=None,
                 clock=time.monotonic):
        if evict_step_interval is not None and (isinstance(evict_step_interval, bool)
                                                or not isinstance(evict_step_interval, int) or evict_step_interval < 1):
            raise ValueError(f"EvictHook: evict_step_interval: must be None or a positive integer, "
                             f"got {evict_step_interval!r}")
        if not isinstance(evict_time_interval, (int, float)) or evict_time_interval <= 0:
            raise ValueError(f"EvictHook: evict_time_interval: must be a positive number of seconds, "
                             f"got {evict_time_interval!r}")
        self.evict_enable = bool(evict_enable)
        self.evict_time_interval = evict_time_interval
        self.evict_step_interval = evict_step_interval
        self._clock = clock
        self._last_trigger = None
        self.evicted: dict[str, int] = {}      # table -> keys evicted by this hook

    def begin(self):
        self._last_trigger = self._clock()
        self._seen_step = None

    def after_run(self, run_context, run_values):
        if not self.evict_enable:
            return
        # The global step this run ended at, as the tables' lookups read it.  Fetching
        # the global step from the hook would race with the optimizer's increment.
        tables = [t for t in ConfigInitializer.get_instance().tables.values() if t.train_lookups_run]
        if not tables:
            return
        step = max(t.last_train_step for t in tables) + 1
        if step == self._seen_step:        # an evaluation run: no training step happened
            return
        self._seen_step = step
        now = self._clock()
        by_step = self.evict_step_interval is not None and step % self.evict_step_interval == 0
        by_time = now - self._last_trigger > self.evict_time_interval
        if by_step or by_time:
            self._last_trigger = now
            self.evict_now()

    def evict_now(self) -> dict[str, int]:
        for table in ConfigInitializer.get_instance().tables.values():
            if table._store is not None and table.config.eviction_enabled:
                self.evicted[table.table_name] = self.evicted.get(table.table_name, 0) + len(table.store.evict())
        return self.evicted
