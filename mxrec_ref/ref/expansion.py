"""The reference's row rules (spec/expansion.md): placement, physical growth and a new row's fill.

Each admitted key holds one row (EXP-1); capacity and its growth (EXP-2, EXP-3) are written once
in mxrec_ref/contract.py.  The fast twins carry the same names in cext/_expansion.pxi.
"""
from __future__ import annotations

import numpy as np

from .table import Table


def take_row(table: Table) -> int:
    """The next row to hand out (EXP-4): the last freed, else the next never-used one."""
    if table.free_rows:
        return table.free_rows.pop()
    table.next_row += 1
    return table.next_row - 1


def ensure_rows(table: Table, n_rows: int, capacity: int) -> None:
    """Physical rows are allocated as they are first used, doubling, so a
    table declared with 10^9 rows costs nothing until keys arrive."""
    have = table.values.shape[0]
    if n_rows <= have:
        return
    new = min(max(n_rows, 2 * have, 1024), max(capacity, n_rows))
    table.values = _grown(table.values, new)
    table.slots = {name: _grown(array, new) for name, array in table.slots.items()}


def fill_row(table: Table, row: int, init: np.ndarray) -> None:
    """A new row's values ``init`` and the optimizer slots' initial values (the table's
    ``slot_initial_values``; INIT-1, INIT-5); a reused row keeps nothing of its last key (EVI-4).
    A slot without an initial value keeps what the row held (only possible for a custom optimizer)."""
    table.values[row] = init
    for name, value in table.slot_initial_values.items():
        table.slots[name][row] = np.float32(value)


def _grown(array: np.ndarray, rows: int) -> np.ndarray:
    out = np.zeros((rows, array.shape[1]), dtype=array.dtype)
    out[: array.shape[0]] = array
    return out
