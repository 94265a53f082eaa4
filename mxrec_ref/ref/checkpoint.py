"""The reference's side of checkpoints (spec/checkpoint.md): the table as a ``TableState`` and
back.  The on-disk format is the mxrec_ref/checkpoint package's alone; the fast twins carry the same
names in mxrec_ref/fast/checkpoint.py and cext/_checkpoint.pxi.
"""
from __future__ import annotations

import numpy as np

from ..state import TableState
from .expansion import ensure_rows
from .table import Table


def export_state(table: Table, clock: int | None, clock_source: str | None) -> TableState:
    """CON-6: admitted keys ascending with their rows, slots, counts and last-seen; pending keys
    ascending with theirs; the clock."""
    keys = np.array(sorted(table.row_of), dtype=np.int64)
    rows = np.array([table.row_of[k] for k in keys.tolist()], dtype=np.int64)
    pending = np.array(sorted(k for k in table.count if k not in table.row_of), dtype=np.int64)
    return TableState(
        keys=keys,
        values=table.values[rows].copy(),
        slots={name: array[rows].copy() for name, array in table.slots.items()},
        counts=np.array([table.count[k] for k in keys.tolist()], dtype=np.int64),
        last_seen=np.array([table.last_seen[k] for k in keys.tolist()], dtype=np.int64),
        pending_keys=pending,
        pending_counts=np.array([table.count[k] for k in pending.tolist()], dtype=np.int64),
        pending_last_seen=np.array([table.last_seen[k] for k in pending.tolist()], dtype=np.int64),
        clock=clock,
        clock_source=clock_source,
    )


def import_state(table: Table, state: TableState, capacity: int) -> None:
    """Fill an empty ``table`` from ``state``: loaded keys take rows 0..n-1 in ascending key
    order (CKPT-6); pending keys keep their counts and last-seen (CKPT-2)."""
    n = len(state.keys)
    ensure_rows(table, n, capacity)
    table.next_row = n
    table.values[:n] = state.values
    for name in table.slots:
        table.slots[name][:n] = state.slots[name]
    for row, key in enumerate(state.keys.tolist()):
        table.row_of[key] = row
    for keys, counts, seen in ((state.keys, state.counts, state.last_seen),
                               (state.pending_keys, state.pending_counts, state.pending_last_seen)):
        for key, count, last in zip(keys.tolist(), counts.tolist(), seen.tolist()):
            table.count[key] = count
            table.last_seen[key] = last
