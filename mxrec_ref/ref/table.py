"""The reference's state of one table, in plain dictionaries and numpy arrays.

Every rule module of ``mxrec_ref.ref`` reads and changes a ``Table``; ``RefStore``
(ref/store.py) owns one and calls those rules in spec order.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Table:
    dim: int
    slot_names: tuple[str, ...]
    # the optimizer's initial slot values, what a new row's slots start from (INIT-5); the fast
    # twin's FastCore holds them too
    slot_initial_values: dict[str, float] = field(default_factory=dict)
    row_of: dict[int, int] = field(default_factory=dict)      # admitted key -> row index
    count: dict[int, int] = field(default_factory=dict)       # every key in the history (admitted and pending)
    last_seen: dict[int, int] = field(default_factory=dict)
    free_rows: list[int] = field(default_factory=list)        # LIFO stack of rows freed by eviction (EXP-4)
    next_row: int = 0                                         # rows [0, next_row) have been handed out once
    values: np.ndarray = None                                 # float32 [allocated rows, dim]
    slots: dict[str, np.ndarray] = None                       # optimizer slot -> float32 [allocated rows, dim]
    hot: dict[int, int] = field(default_factory=dict)         # hot key -> its row in the hot block (HOT-2)
    hot_block: np.ndarray = None                              # float32 [hot keys, dim]

    def __post_init__(self):
        self.values = np.zeros((0, self.dim), dtype=np.float32)
        self.slots = {name: np.zeros((0, self.dim), dtype=np.float32) for name in self.slot_names}
        self.hot_block = np.zeros((0, self.dim), dtype=np.float32)
