"""Sizes from a replay (PLAN-2..PLAN-4): the smallest safe values, the recommended ones with a
margin, the step a smaller value fails at, and size curves over alternative thresholds."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ..errors import UsageError
from .replay import KeyCounts, Schedule, StoreTrace, count_keys, replay_stores
from .sources import Sample
from ..config import TableConfig
from .tables import PlannedTable, in_storage

MARGIN_MAX = 10.0
ACCESS_ALTERNATIVES = (None, 2, 4, 8)          # None: admission off (CFG-6)
EVICTION_FRACTIONS = (Fraction(1, 8), Fraction(1, 4), Fraction(1, 2))   # of the sample's clock span, when unset


def with_margin(minimum: int, margin: float) -> int:
    """ceil(minimum x (1 + margin)), computed on the margin's decimal value (0.1 is exactly a tenth)."""
    return max(1, math.ceil(minimum * (1 + Fraction(repr(float(margin))))))


def check_margin(margin) -> float:
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not 0 <= margin <= MARGIN_MAX:
        raise UsageError(f"plan: --margin: must be a number in [0, {MARGIN_MAX}], got {margin!r}")
    return float(margin)


def first_step_over(series: np.ndarray, limit: int) -> int | None:
    """The first step at which some rank's value exceeds ``limit`` (the step a ``limit``-sized
    table fails at), or None."""
    over = np.flatnonzero((series.reshape(len(series), -1) > limit).any(axis=1))
    return int(over[0]) if len(over) else None


@dataclass(frozen=True)
class Sizes:
    storage: str
    min_device: int
    device: int
    device_fails_at: int | None       # the step a table of min_device - 1 rows fails at
    min_send_count: int
    send_count: int
    send_count_fails_at: int | None   # the step send_count = min_send_count - 1 fails at
    host: int                         # 0 for HBM
    ssd: int                          # 0 unless SSD
    spill_step: int | None            # SSD: the first step whose rows go to disk


@dataclass(frozen=True)
class Curve:
    access_threshold: int | None
    eviction_threshold: int | None
    size: np.ndarray                  # [steps] table size after each step
    peak: np.ndarray                  # [steps] table size after each step's lookups, before its eviction


@dataclass(frozen=True)
class TablePlan:
    table: PlannedTable
    config: TableConfig               # the recommended config (the replayed sizes)
    counts: KeyCounts
    trace: StoreTrace
    sizes: Sizes
    curves: tuple[Curve, ...]
    margin: float

    @property
    def hot_hit_ratio(self) -> float:
        positions = self.trace.totals["key_positions"]
        return self.trace.totals["hot_hit_positions"] / positions if positions else 0.0


def plan_table(sample: Sample, table: PlannedTable, sched: Schedule, *, storage: str, margin: float,
               backend: str = "fast", curves: bool = True) -> TablePlan:
    counts = count_keys(sample, table, sched)
    whole = max(1, int(counts.seen[-1]))            # every key seen: an HBM table this big never fills
    if storage == "hbm":         # the table holds every row: its largest size per owner (EXP-2)
        trace = replay_stores(sample, table, in_storage(table.config, "hbm", device=whole), sched, backend=backend)
        min_device = max(1, int(trace.owner_peak.max()))
        device_fails_at = first_step_over(trace.owner_peak, min_device - 1)
        device = with_margin(min_device, margin)
        config = in_storage(table.config, "hbm", device=device)    # sizes do not depend on capacity until full
    else:                        # the device tier holds one step's keys per owner (TIER-3)
        min_device = max(1, int(counts.owner_distinct.max()))
        device_fails_at = first_step_over(counts.owner_distinct, min_device - 1)
        device = with_margin(min_device, margin)
        config = in_storage(table.config, storage, device=device)
        trace = replay_stores(sample, table, config, sched, backend=backend)
    host = ssd = 0
    spill_step = None
    if storage == "ddr":         # host memory grows (TIER-1): the peak it reaches, with the margin
        host = with_margin(int(trace.placement["host_rows"].max()), margin)
        config = dataclasses.replace(config, host_vocabulary_size=host)
    elif storage == "ssd":       # the host budget replayed; the disk grows: the peak it reaches
        host = config.host_vocabulary_size
        ssd = with_margin(int(trace.placement["disk_rows"].max()), margin)
        config = dataclasses.replace(config, ssd_vocabulary_size=ssd)
        spill_step = first_step_over(trace.traffic["host_to_disk_rows"], 0)
    min_send = max(1, int(counts.batch_distinct.max()))
    sizes = Sizes(storage, min_device, device, device_fails_at, min_send, with_margin(min_send, margin),
                  first_step_over(counts.batch_distinct, min_send - 1), host, ssd, spill_step)
    config = dataclasses.replace(config, send_count=sizes.send_count)
    alternatives = threshold_curves(sample, table, sched, whole, backend) if curves else ()
    return TablePlan(table, config, counts, trace, sizes, alternatives, margin)


def threshold_curves(sample: Sample, table: PlannedTable, sched: Schedule, whole: int, backend: str):
    """The table's size over time under a few access thresholds (eviction as configured) and a few
    eviction thresholds (admission as configured), replayed in an HBM table that holds every key:
    sizes do not depend on the tiers (TIER-2).  An access threshold of None is admission off."""
    config = in_storage(table.config, "hbm", device=whole)
    access = config.access_threshold if config.admission_enabled else None
    eviction = config.eviction_threshold if config.eviction_enabled else None
    if eviction is not None:
        evictions = sorted({eviction // 2, eviction, eviction * 2} - {0})
    else:
        span = _clock_span(sample, sched)
        evictions = sorted({max(1, int(span * f)) for f in EVICTION_FRACTIONS})
    settings = [(a, eviction) for a in sorted({access, *ACCESS_ALTERNATIVES}, key=lambda a: a or 0)]
    settings += [(access, e) for e in evictions if (access, e) not in settings]
    curves = []
    for access_threshold, eviction_threshold in settings:
        # eviction needs access_threshold set (CFG-5): 0 admits every key on first access (CFG-6)
        variant = dataclasses.replace(config, eviction_threshold=eviction_threshold, access_threshold=(
            0 if access_threshold is None and eviction_threshold is not None else access_threshold))
        trace = replay_stores(sample, table, variant, sched, backend=backend)
        curves.append(Curve(access_threshold, eviction_threshold, trace.size, trace.peak_size))
    return tuple(curves)


def _clock_span(sample: Sample, sched: Schedule) -> int:
    """How far the eviction clock runs over the replay: timestamps when the sample has them (EVI-1), else steps."""
    if sample.timestamps is None:
        return sched.steps
    used = sample.timestamps[:sched.steps * sched.ranks * sched.batch_size]
    return max(1, int(used.max() - used.min()))
