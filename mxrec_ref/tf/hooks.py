"""Session hooks: `EvictHook` (reference 2.6) triggers eviction between training steps;
`StatsSummaryHook` writes the tables' statistics for TensorBoard (spec/observability.md)."""
from __future__ import annotations

import os
import time

import tensorflow as tf

from ..distributed.schedule import EvictionSchedule
from .config_initializer import ConfigInitializer
from .constants import DEFAULT_EVICT_TIME_INTERVAL
from .stats_scalars import check_positive, check_stat_names, check_tables, stat_scalars


class EvictHook(tf.compat.v1.train.SessionRunHook):
    """After a training step, evict when ``evict_step_interval`` divides the global
    step, or when ``evict_time_interval`` seconds passed since the last trigger.

    Eviction itself uses each table's own clock (its latest step or data
    timestamp), never the wall clock; the wall clock only decides *when* the
    time-interval trigger fires, as in mxRec.  Pass ``clock=`` (a function
    returning seconds) to make that trigger deterministic too.  On several ranks only
    rank 0's clock is read and its decision is broadcast (SHARD-19).
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
        # on several ranks rank 0's clock decides and every rank follows (SHARD-19)
        self._schedule = EvictionSchedule(evict_step_interval, evict_time_interval, clock)
        self.evicted: dict[str, int] = {}      # table -> keys evicted by this hook

    def begin(self):
        self._schedule.start()
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
        if self._schedule.due(step):
            self.evict_now()

    def evict_now(self) -> dict[str, int]:
        for table in ConfigInitializer.get_instance().tables.values():
            if table.opened_store is not None and table.config.eviction_enabled:
                self.evicted[table.table_name] = self.evicted.get(table.table_name, 0) + len(table.store.evict())
        return self.evicted


class StatsSummaryHook(tf.compat.v1.train.SessionRunHook):
    """Writes each table's ``stats()`` as TensorBoard scalars ``mxrec/<table>/<statistic>``
    every ``every_n_steps`` global steps and once more at the end of the session (OBS-3).

    ``tables``: stores or ``SparseTable``s (default: every table of ``create_table``);
    ``stats``: the statistics to write (default: all of STAT_NAMES).  The step is the
    global step after the run (read with its own ``session.run``, so it never races
    the optimizer's increment); without a global step, the number of runs so far.
    The writer is ``FileWriterCache``'s for ``output_dir``, the one
    ``MonitoredTrainingSession``'s own summaries share.
    """

    def __init__(self, output_dir, every_n_steps: int = 100, tables=None, stats=None):
        if not isinstance(output_dir, (str, os.PathLike)) or not str(output_dir):
            raise ValueError(f"StatsSummaryHook: output_dir: must be a folder path, got {output_dir!r}")
        self.every_n_steps = check_positive(every_n_steps, "every_n_steps", "StatsSummaryHook")
        self.output_dir = str(output_dir)
        self.stats = check_stat_names(stats, "StatsSummaryHook")
        self._tables = check_tables(tables, "StatsSummaryHook")
        self._writer = None
        self._global_step = None
        self._step = 0
        self._last_written = None

    def begin(self):
        self._writer = tf.compat.v1.summary.FileWriterCache.get(self.output_dir)
        self._global_step = tf.compat.v1.train.get_global_step()

    def after_create_session(self, session, coord):
        self._step = self._read_step(session, runs=0)
        self._last_written = None

    def after_run(self, run_context, run_values):
        step = self._read_step(run_context.session, runs=self._step + 1)
        crossed = step // self.every_n_steps > self._step // self.every_n_steps
        self._step = step
        if crossed:
            self.write(step)

    def end(self, session):
        if self._last_written != self._step:
            self.write(self._step)
        self._writer.flush()

    def write(self, step: int) -> None:
        """Write the statistics now, at ``step``."""
        values = [tf.compat.v1.Summary.Value(tag=tag, simple_value=float(value))
                  for tag, value in stat_scalars(self._tables, self.stats)]
        if values:
            self._writer.add_summary(tf.compat.v1.Summary(value=values), global_step=int(step))
        self._last_written = step

    def _read_step(self, session, runs: int) -> int:
        return runs if self._global_step is None else int(session.run(self._global_step))
