"""The fast path's hot block (spec/hot.md): the twins of mxrec_ref/ref/hot.py.

When and which keys become hot is mxrec_ref/hot.py's policy, shared by both backends; the block,
its probes, ``set_hot`` and the write-through of every optimizer kernel are cext/_hot.pxi's.
"""
from __future__ import annotations

import numpy as np

from .. import hot as policy
from .._fast import hot_candidates as _core_hot_candidates, set_hot


def refresh_hot(core, capacity: int) -> None:
    """HOT-2: the ``capacity`` keys holding a row with the highest counts become the hot set
    (policy.choose_hot_keys), chosen among the core's candidates, and their rows are copied."""
    chosen = np.zeros(0, dtype=np.int64)
    if capacity > 0 and core.size:
        keys, counts = hot_candidates(*_core_hot_candidates(core, capacity), capacity)
        chosen = policy.choose_hot_keys(keys, counts, capacity)
    set_hot(core, chosen)


def hot_candidates(above: np.ndarray, above_counts: np.ndarray, tied: np.ndarray, threshold: int, n: int):
    """The keys (and counts) policy.choose_hot_keys can pick for ``n`` hot rows,
    from the core's hot_candidates: every key with a count above the n-th
    highest count, then the smallest keys with exactly that count (HOT-2
    breaks ties by the smaller key).  choose_hot_keys orders by count, then
    key, whatever the input order, so its result on these is its result on
    all keys -- but a refresh of a table of millions of keys sorts n keys."""
    need = n - len(above)
    if len(tied) > need:
        tied = np.partition(tied, need - 1)[:need] if need > 0 else tied[:0]
    return (np.concatenate([above, tied]),
            np.concatenate([above_counts, np.full(len(tied), threshold, dtype=np.int64)]))
