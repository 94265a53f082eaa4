"""The reference's row rules (spec/expansion.md): placement and physical growth.

Capacity and its growth (EXP-2, EXP-3) are written once in mxrec_ref/contract.py; the fast
twins of these carry the same names in mxrec_ref/fast/expansion.py and cext/_expansion.pxi.
"""
from __future__ import annotations

import numpy as np

from ..config import TableConfig
from ..initializers import initial_rows
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


def place_rows(table: Table, keys: list[int], config: TableConfig, slot_initial_values: dict[str, float],
               capacity: int) -> None:
    """Give each new key a row (EXP-1): freed rows first (last freed first), then
    never-used rows in ascending order (EXP-4); fill it from the initializer and the
    optimizer's initial slot values (INIT-1, INIT-5, EVI-4)."""
    if not keys:
        return
    rows = []
    for key in keys:
        row = table.row_of[key] = take_row(table)
        rows.append(row)
    ensure_rows(table, table.next_row, capacity)
    rows = np.array(rows, dtype=np.int64)
    table.values[rows] = initial_rows(config, np.array(keys, dtype=np.int64))
    for name, value in slot_initial_values.items():
        table.slots[name][rows] = np.float32(value)


def _grown(array: np.ndarray, rows: int) -> np.ndarray:
    out = np.zeros((rows, array.shape[1]), dtype=array.dtype)
    out[: array.shape[0]] = array
    return out
