"""Incremental checkpoints (CKPT-9): what changed between two states, where a delta may be written,
and which checkpoint folders a delta builds on."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from ..errors import CheckpointError
from ..optimizers import SparseOptimizer, optimizer_from_description
from ..state import TableState
from .files import read_regular
from .folder import list_tables
from .format import MAX_DELTA_CHAIN, META


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
            meta = json.loads(read_regular(Path(folder, table, META)))
        except (OSError, ValueError):
            return
        if not isinstance(meta, dict) or meta.get("kind") != "delta" or not isinstance(meta.get("previous"), str):
            return
        folder = os.path.realpath(os.path.join(folder, meta["previous"]))


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
                previous = json.loads(read_regular(Path(folder, table, META))).get("previous")
            except (OSError, ValueError, AttributeError):
                continue
            if isinstance(previous, str) and previous:
                base = os.path.normpath(os.path.join(folder, previous))
                if base not in bases:
                    bases.add(base)
                    todo.append(base)
    return sorted(bases)


def saved_optimizer(directory, table: str) -> SparseOptimizer | None:
    """The sparse optimizer ``table``'s checkpoint in ``directory`` was trained with, or None where its
    meta.json cannot be read here (a sharded layout, a missing or damaged table: the load reports those).
    A process with no sparse optimizer of its own opens its stores with it (spec/tf.md TF-21)."""
    try:
        with open(os.path.join(directory, table, META)) as handle:
            return optimizer_from_description(json.load(handle)["optimizer"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
