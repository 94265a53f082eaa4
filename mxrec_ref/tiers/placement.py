"""Which in-memory rows are on the device tier (spec/tiers.md, TIER-4).

The device tier of a DDR or SSD table is a fixed budget of
``device_vocabulary_size`` rows.  A lookup makes every row of its batch
device-resident; when that overflows the budget, the least recently used
device rows (ties by key) go back to the host.  Host membership needs no
bookkeeping of its own: a row in host memory that is not on the device is on
the host.

Two implementations with one interface, as everywhere in mxrec-ref: the
reference (a dict, written to be read) and the fast one (sorted numpy arrays,
vectorised).  The conformance suite checks that they agree after every call.
"""
from __future__ import annotations

import numpy as np


class RefDevicePlacement:
    """The device tier as a dict key -> tick of its last use."""

    def __init__(self, device_rows: int):
        self.device_rows = device_rows
        self._last_use: dict[int, int] = {}
        self._tick = 0

    def __len__(self) -> int:
        return len(self._last_use)

    def keys(self) -> np.ndarray:
        return np.array(sorted(self._last_use), dtype=np.int64)

    def contains(self, keys: np.ndarray) -> np.ndarray:
        return np.array([k in self._last_use for k in keys.tolist()], dtype=bool)

    def touch(self, keys: np.ndarray) -> np.ndarray:
        """Make ``keys`` (distinct) device rows used now; returns the rows sent
        back to the host to stay within budget, in the order chosen."""
        self._tick += 1
        for key in keys.tolist():
            self._last_use[key] = self._tick
        excess = len(self._last_use) - self.device_rows
        if excess <= 0:
            return np.zeros(0, dtype=np.int64)
        victims = sorted(self._last_use, key=lambda k: (self._last_use[k], k))[:excess]
        for key in victims:
            del self._last_use[key]
        return np.array(victims, dtype=np.int64)

    def forget(self, keys: np.ndarray) -> None:
        """Rows that left memory (evicted, or moved to disk)."""
        for key in keys.tolist():
            self._last_use.pop(key, None)

    def clear(self) -> None:
        self._last_use.clear()


class FastDevicePlacement:
    """The device tier as parallel arrays sorted by key: keys and last-use ticks."""

    def __init__(self, device_rows: int):
        self.device_rows = device_rows
        self._keys = np.zeros(0, dtype=np.int64)
        self._last_use = np.zeros(0, dtype=np.int64)
        self._tick = 0

    def __len__(self) -> int:
        return len(self._keys)

    def keys(self) -> np.ndarray:
        return self._keys.copy()

    def contains(self, keys: np.ndarray) -> np.ndarray:
        return _member(self._keys, keys)

    def touch(self, keys: np.ndarray) -> np.ndarray:
        self._tick += 1
        fresh = keys[~_member(self._keys, keys)]
        merged = np.concatenate([self._keys, fresh])
        last_use = np.concatenate([self._last_use, np.zeros(len(fresh), dtype=np.int64)])
        order = np.argsort(merged, kind="stable")
        self._keys, self._last_use = merged[order], last_use[order]
        self._last_use[np.searchsorted(self._keys, keys)] = self._tick
        excess = len(self._keys) - self.device_rows
        if excess <= 0:
            return np.zeros(0, dtype=np.int64)
        # Least recently used first, ties by key: lexsort's last key is primary.
        victims_at = np.lexsort((self._keys, self._last_use))[:excess]
        victims = self._keys[victims_at]
        keep = np.ones(len(self._keys), dtype=bool)
        keep[victims_at] = False
        self._keys, self._last_use = self._keys[keep], self._last_use[keep]
        return victims

    def forget(self, keys: np.ndarray) -> None:
        keep = ~_member(np.sort(keys), self._keys)
        self._keys, self._last_use = self._keys[keep], self._last_use[keep]

    def clear(self) -> None:
        self._keys = np.zeros(0, dtype=np.int64)
        self._last_use = np.zeros(0, dtype=np.int64)


def _member(sorted_keys: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """keys[i] in sorted_keys, for each i (sorted_keys ascending)."""
    if len(sorted_keys) == 0 or len(keys) == 0:
        return np.zeros(len(keys), dtype=bool)
    at = np.minimum(np.searchsorted(sorted_keys, keys), len(sorted_keys) - 1)
    return sorted_keys[at] == keys
