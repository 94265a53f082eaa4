"""The fast path's tier moves (spec/tiers.md, CON-10): the twins of mxrec_ref/ref/tiers.py,
over the core's row copies (cext/_tiers.pxi)."""
from __future__ import annotations

import numpy as np


def rows_of(core, slot_index: dict[str, int], keys: np.ndarray):
    """Copies of what ``keys`` (all holding a row) carry to another tier:
    (values, {slot: values}, counts, last_seen)."""
    rows = core.row_handles(keys)
    counts, last_seen = core.entries_of(keys)
    return (core.copy_rows(rows, -1), {name: core.copy_rows(rows, i) for name, i in slot_index.items()},
            counts, last_seen)


def drop_rows(core, keys: np.ndarray) -> None:
    """Forget ``keys`` (their rows moved to another tier): rows go on the free stack in the given
    order, as eviction frees them (EXP-4); hot ones leave the hot set (HOT-2)."""
    core.remove_keys(keys)


def put_rows(core, slot_index: dict[str, int], keys, values, slots, counts, last_seen, capacity: int) -> None:
    """Take back ``keys`` (not in the history) with the state they carry; rows are handed out as
    for new keys (EXP-4)."""
    core.put_rows(_int64(keys), _int64(counts), _int64(last_seen), values,
                  [slots[name] for name in slot_index], capacity)


def admitted_entries(core):
    """(keys ascending, counts, last_seen) of every key holding a row."""
    keys, counts, last_seen, _ = core.export_entries(True)
    return keys, counts, last_seen


def _int64(array) -> np.ndarray:
    return np.ascontiguousarray(array, dtype=np.int64).reshape(-1)
