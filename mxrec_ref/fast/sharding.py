"""The fast path's sharding kernels (spec/sharding.md, SHARD-2, SHARD-3): the twins of
``mxrec_ref.distributed.sharded.route`` and ``dedup``, under the same names, as O(n) C loops
(cext/_route.pyx: a counting sort by owner, and a hash table for the first occurrences).

A sharded table whose shards are fast stores routes with these; any other with the reference's
(``ShardedStore`` picks them by its local store's backend, never by whether the extension is built),
and tests/test_sharding.py compares the two implementations.
"""
from __future__ import annotations

import numpy as np

from .._route import first_occurrence, route as route_by_owner

__all__ = ["route", "dedup"]


def route(keys: np.ndarray, rank_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(order, counts): ``keys[order]`` grouped by owner, rank 0's first, first-occurrence order kept
    inside each group; ``counts[d]`` keys for rank d (a counting sort)."""
    return route_by_owner(np.ascontiguousarray(keys, dtype=np.int64), rank_size)


def dedup(keys: np.ndarray, counts: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct keys in order of first occurrence, the inverse index and each key's number of
    accesses (LKP-2, ADM-2): a hash table, no sort."""
    return first_occurrence(np.ascontiguousarray(keys, dtype=np.int64), counts)
