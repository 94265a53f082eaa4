"""The fast path's tier moves (spec/tiers.md, CON-10): the twins of mxrec_ref/ref/tiers.py,
over the core's row copies (cext/_tiers.pxi)."""
from __future__ import annotations

import numpy as np

from .._fast import copy_rows, entries_at, export_entries, remove_keys, row_handles
from .._fast import put_rows as _put_rows


def rows_of(core, slot_index: dict[str, int], keys: np.ndarray, rows: np.ndarray | None = None):
    """Copies of what ``keys`` (all holding a row, at ``rows`` when given) carry to another tier:
    (values, {slot: values}, counts, last_seen)."""
    rows = row_handles(core, keys) if rows is None else _int64(rows)
    counts, last_seen = entries_at(core, rows)
    return (copy_rows(core, rows, -1), {name: copy_rows(core, rows, i) for name, i in slot_index.items()},
            counts, last_seen)


def entries_of(core, keys: np.ndarray, rows: np.ndarray):
    """(counts, last_seen) of ``keys`` (all holding a row), found by their row handles ``rows``:
    no second probe of the key map."""
    return entries_at(core, _int64(rows))


def drop_rows(core, keys: np.ndarray) -> None:
    """Forget ``keys`` (their rows moved to another tier): rows go on the free stack in the given
    order, as eviction frees them (EXP-4); hot ones leave the hot set (HOT-2)."""
    remove_keys(core, keys)


def put_rows(core, slot_index: dict[str, int], keys, values, slots, counts, last_seen, capacity: int) -> None:
    """Take back ``keys`` (not in the history) with the state they carry; rows are handed out as
    for new keys (EXP-4)."""
    _put_rows(core, _int64(keys), _int64(counts), _int64(last_seen), values,
              [slots[name] for name in slot_index], capacity)


def admitted_entries(core):
    """(keys ascending, counts, last_seen) of every key holding a row."""
    keys, counts, last_seen, _ = export_entries(core, True)
    return keys, counts, last_seen


def _int64(array) -> np.ndarray:
    return np.ascontiguousarray(array, dtype=np.int64).reshape(-1)
