"""The fast path's side of checkpoints (spec/checkpoint.md): the twins of
mxrec_ref/ref/checkpoint.py, over the core's entry and row copies (cext/_checkpoint.pxi)."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .._fast import copy_rows, export_entries, load_entries, load_rows, reserve_rows
from ..state import TableState


def export_state(core, slot_index: dict[str, int], clock: int | None, clock_source: str | None) -> TableState:
    """CON-6: admitted keys ascending with their rows, slots, counts and last-seen; pending keys
    ascending with theirs; the clock."""
    keys, counts, last_seen, rows = export_entries(core, True)
    pending, pending_counts, pending_seen, _ = export_entries(core, False)
    # the gathers of the values and of each slot release the GIL: one thread each
    with ThreadPoolExecutor(max_workers=1 + len(slot_index), thread_name_prefix="mxrec-ckpt-export") as pool:
        values = pool.submit(copy_rows, core, rows, -1)
        slots = {name: pool.submit(copy_rows, core, rows, i) for name, i in slot_index.items()}
        values, slots = values.result(), {name: slot.result() for name, slot in slots.items()}
    return TableState(
        keys=keys,
        values=values,
        slots=slots,
        counts=counts,
        last_seen=last_seen,
        pending_keys=pending,
        pending_counts=pending_counts,
        pending_last_seen=pending_seen,
        clock=clock,
        clock_source=clock_source,
    )


def import_state(core, state: TableState, slot_arrays: list[np.ndarray], capacity: int) -> None:
    """Fill an emptied core from ``state`` (``slot_arrays``: its slots in the core's order): loaded
    keys take rows 0..n-1 in ascending key order (CKPT-6); pending keys keep their counts and
    last-seen (CKPT-2); the hot set is empty."""
    reserve_rows(core, len(state.keys), capacity)
    # the rows' values and the keys' entries are disjoint memory, both filled without the
    # GIL: side by side; the result does not depend on which finishes first
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="mxrec-ckpt-import") as pool:
        copying = pool.submit(load_rows, core, capacity, state.values, slot_arrays)
        try:
            load_entries(core, _int64(state.keys), _int64(state.counts), _int64(state.last_seen), True)
        finally:
            copying.result()
    load_entries(core, _int64(state.pending_keys), _int64(state.pending_counts), _int64(state.pending_last_seen),
                      False)


def _int64(array) -> np.ndarray:
    return np.ascontiguousarray(array, dtype=np.int64).reshape(-1)
