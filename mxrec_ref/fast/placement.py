"""The fast path's device placement (spec/tiers.md, TIER-4, TIER-12): the twin of
``RefDevicePlacement`` in mxrec_ref/tiers/placement.py, over the core's ``DeviceLRU``
(cext/_tiers.pxi).  The fast store names it (``FastStore.device_placement``, CON-10), with the
core's ``HostHeap`` as its heap of TIER-5's order (the twin of ``PyHostHeap``); the conformance
suite compares the two placements after every call (TIER-11)."""
from __future__ import annotations

import numpy as np

try:
    from .._fast import DeviceLRU
except ImportError:  # not built: this module still imports (mxrec_ref.tiers re-exports the class), it cannot run
    DeviceLRU = None


class FastDevicePlacement:
    """The device tier as the fast core's ``DeviceLRU`` (cext/_tiers.pxi): an
    intrusive list over the store's rows (a key keeps its row while it is in
    memory, EXP-4), least recently used at the head, each lookup's keys one
    group put in key order when it reaches the head -- the reference's order
    (TIER-12).  Membership is one gather after the store's own hash probe;
    a touch is O(keys touched) plus the sort of the groups it sends back."""

    def __init__(self, device_rows: int, row_handles=None):
        if row_handles is None:
            raise ValueError("FastDevicePlacement needs the store's row_handles")
        if DeviceLRU is None:
            raise ImportError("FastDevicePlacement needs the fast path (mxrec_ref._fast) built")
        self.device_rows = device_rows
        self._row_handles = row_handles
        self._lru = DeviceLRU(device_rows)

    def __len__(self) -> int:
        return self._lru.n

    @property
    def queued(self) -> int:
        """Queue entries held, stale ones included (as the reference's ``queued``)."""
        return self._lru.q_tail - self._lru.q_head

    def nbytes(self) -> int:
        """Bytes of the per-row array (16 per row of the store's row range) and the queue."""
        return self._lru.node.nbytes + self._lru.queue.nbytes

    def keys(self) -> np.ndarray:
        node = self._lru.node
        return np.sort(node[node[:, 0] >= 0, 1])

    def contains(self, keys: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """Per key: on the device.  ``rows``: the keys' row handles when the caller has them
        (spares a probe)."""
        keys = np.ascontiguousarray(keys, dtype=np.int64)
        rows = self._row_handles(keys) if rows is None else np.ascontiguousarray(rows, dtype=np.int64)
        return self._lru.contains(rows, keys)

    def touch(self, keys: np.ndarray, rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """As the reference's; ``rows``: the keys' rows where the caller knows them (-1 elsewhere:
        probed here), so a training lookup's own row handles spare a second probe."""
        keys = np.ascontiguousarray(keys, dtype=np.int64)
        if rows is None:                        # every touched key holds a row
            rows = self._row_handles(keys)
        else:
            rows = np.ascontiguousarray(rows, dtype=np.int64)
            unknown = np.flatnonzero(rows < 0)
            if len(unknown):
                rows = rows.copy()
                rows[unknown] = self._row_handles(keys[unknown])
        return self._lru.touch(keys, rows)

    def forget(self, keys: np.ndarray) -> None:
        """Rows that left memory: their rows may be free already, so they are found by key
        among the device rows (a pass over the row range, only on eviction)."""
        keys = np.asarray(keys, dtype=np.int64)
        lru = self._lru
        if len(keys) == 0 or lru.n == 0:
            return
        live = np.flatnonzero(lru.node[:, 0] >= 0)
        lru.remove_rows(live[np.isin(lru.node[live, 1], keys)])

    def clear(self) -> None:
        self._lru.clear()
