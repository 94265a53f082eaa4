"""Which in-memory rows are on the device tier (spec/tiers.md, TIER-4), and
which host rows go to disk first (TIER-5), both kept incrementally (TIER-12).

The device tier of a DDR or SSD table is a fixed budget of
``device_vocabulary_size`` rows.  A lookup makes every row of its batch
device-resident; when that overflows the budget, the least recently used
device rows (ties by key) go back to the host.  Host membership needs no
bookkeeping of its own: a row in host memory that is not on the device is on
the host.

The order is kept as *tick buckets* (TIER-12): each training lookup is one tick,
and its keys form one bucket, sorted by key, appended to a queue.  A key's
current tick is in a map; a bucket entry whose key has since been touched
again (or left memory) is stale and skipped when the queue is consumed from
the oldest end.  So touching ``b`` keys costs O(b log b) and choosing ``e``
victims O(e + stale entries skipped), never a sort of the device tier; the
queue is rebuilt from the map when stale entries outnumber live ones, which
keeps it O(device rows) in memory and O(1) amortised per touch.

Two implementations with one interface, as everywhere in mxrec-ref: the
reference (a dict and a deque of lists, written to be read) and the fast one
(the same buckets as numpy arrays, the map as arrays sorted by key).  The
conformance suite checks that they agree after every call.
"""
from __future__ import annotations

import heapq
from collections import deque

import numpy as np

_EMPTY = np.zeros(0, dtype=np.int64)


class RefDevicePlacement:
    """The device tier as a dict key -> tick of its last use, and the tick
    buckets (a deque of [tick, keys sorted, next position]) in tick order."""

    def __init__(self, device_rows: int):
        self.device_rows = device_rows
        self._last_use: dict[int, int] = {}
        self._buckets: deque = deque()
        self._entries = 0       # keys in the buckets, stale ones included
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
        bucket = sorted(keys.tolist())
        for key in bucket:
            self._last_use[key] = self._tick
        self._buckets.append([self._tick, bucket, 0])
        self._entries += len(bucket)
        victims = []
        excess = len(self._last_use) - self.device_rows
        while len(victims) < excess:       # oldest tick first, by key within a tick
            tick, bucket, at = entry = self._buckets[0]
            if at == len(bucket):
                self._buckets.popleft()
                self._entries -= len(bucket)
                continue
            entry[2] = at + 1
            key = bucket[at]
            if self._last_use.get(key) == tick:
                del self._last_use[key]
                victims.append(key)
        self._compact()
        return np.array(victims, dtype=np.int64)

    def forget(self, keys: np.ndarray) -> None:
        """Rows that left memory (evicted, or moved to disk); their bucket entries go stale."""
        for key in keys.tolist():
            self._last_use.pop(key, None)
        self._compact()

    def clear(self) -> None:
        self._last_use.clear()
        self._buckets.clear()
        self._entries = 0

    def _compact(self) -> None:
        """Rebuild the buckets from the map once stale entries outnumber live ones."""
        if self._entries <= 2 * len(self._last_use) + 1024:
            return
        by_tick: dict[int, list] = {}
        for key, tick in self._last_use.items():
            by_tick.setdefault(tick, []).append(key)
        self._buckets = deque([tick, sorted(by_tick[tick]), 0] for tick in sorted(by_tick))
        self._entries = len(self._last_use)


class FastDevicePlacement:
    """The device tier as parallel arrays sorted by key (keys, last-use
    ticks), and the tick buckets as a deque of [tick, keys sorted (numpy),
    next position]: the same order as the reference, vectorised per bucket."""

    def __init__(self, device_rows: int):
        self.device_rows = device_rows
        self._keys = _EMPTY
        self._last_use = _EMPTY
        self._buckets: deque = deque()
        self._entries = 0
        self._tick = 0

    def __len__(self) -> int:
        return len(self._keys)

    def keys(self) -> np.ndarray:
        return self._keys.copy()

    def contains(self, keys: np.ndarray) -> np.ndarray:
        return _member(self._keys, keys)

    def touch(self, keys: np.ndarray) -> np.ndarray:
        self._tick += 1
        bucket = np.sort(np.asarray(keys, dtype=np.int64))
        at = np.searchsorted(self._keys, bucket)
        held = _member(self._keys, bucket)
        self._last_use[at[held]] = self._tick
        fresh = ~held
        if fresh.any():     # one memmove of the arrays, no sort of the tier
            self._keys = np.insert(self._keys, at[fresh], bucket[fresh])
            self._last_use = np.insert(self._last_use, at[fresh], self._tick)
        self._buckets.append([self._tick, bucket, 0])
        self._entries += len(bucket)
        excess = len(self._keys) - self.device_rows
        chosen = []
        while excess > 0:                  # oldest tick first, by key within a tick
            tick, bucket, start = entry = self._buckets[0]
            if start == len(bucket):
                self._buckets.popleft()
                self._entries -= len(bucket)
                continue
            rest = bucket[start:]
            pos = np.searchsorted(self._keys, rest)
            np.minimum(pos, max(len(self._keys) - 1, 0), out=pos)
            live = (self._keys[pos] == rest) & (self._last_use[pos] == tick)
            live_at = np.flatnonzero(live)
            if len(live_at) > excess:      # the bucket is only partly consumed
                live_at = live_at[:excess]
                entry[2] = start + int(live_at[-1]) + 1
            else:
                entry[2] = len(bucket)
            chosen.append(rest[live_at])
            excess -= len(live_at)
        if not chosen:
            self._compact()
            return np.zeros(0, dtype=np.int64)
        victims = np.concatenate(chosen)
        self._remove(np.sort(victims))
        self._compact()
        return victims

    def forget(self, keys: np.ndarray) -> None:
        self._remove(np.unique(np.asarray(keys, dtype=np.int64)))
        self._compact()

    def clear(self) -> None:
        self._keys = _EMPTY
        self._last_use = _EMPTY
        self._buckets.clear()
        self._entries = 0

    def _remove(self, keys_sorted: np.ndarray) -> None:
        """Drop ``keys_sorted`` (sorted, distinct) from the map; absent ones are ignored."""
        if len(keys_sorted) == 0 or len(self._keys) == 0:
            return
        pos = np.minimum(np.searchsorted(self._keys, keys_sorted), len(self._keys) - 1)
        pos = pos[self._keys[pos] == keys_sorted]
        self._keys = np.delete(self._keys, pos)
        self._last_use = np.delete(self._last_use, pos)

    def _compact(self) -> None:
        if self._entries <= 2 * len(self._keys) + 1024:
            return
        order = np.lexsort((self._keys, self._last_use))
        ticks, keys = self._last_use[order], self._keys[order]
        cuts = np.flatnonzero(np.diff(ticks)) + 1
        self._buckets = deque([int(part_ticks[0]), part_keys, 0]
                              for part_ticks, part_keys in zip(np.split(ticks, cuts), np.split(keys, cuts))
                              if len(part_keys))
        self._entries = len(self._keys)


class HostOrder:
    """TIER-5's order over the host rows of an SSD table (in memory, off the
    device): least count first, then older last-seen, then smaller key, kept
    as a heap of (count, last_seen, key) with lazy deletion (TIER-12).

    Every host row has an entry with its current (count, last_seen): the
    wrapper pushes a row when it arrives on the host (sent back from the
    device, brought back from disk, loaded) and again after every call that
    touched it.  An entry is stale when its key has left the host or its
    count or last-seen time changed since; ``candidates`` pops entries in
    heap order and the caller checks them against the store.  One class for
    both backends: the order is the same by construction, and the heap
    costs O(log n) per row a call touches, never a pass over the host rows.
    The heap is rebuilt from the store once stale entries outnumber live ones."""

    def __init__(self):
        self._heap: list[tuple[int, int, int]] = []

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, keys: np.ndarray, counts: np.ndarray, last_seen: np.ndarray) -> None:
        entries = list(zip(np.asarray(counts).tolist(), np.asarray(last_seen).tolist(),
                           np.asarray(keys).tolist()))
        if len(entries) > len(self._heap):     # heapify is O(n): cheaper than n pushes here
            self._heap.extend(entries)
            heapq.heapify(self._heap)
            return
        for entry in entries:
            heapq.heappush(self._heap, entry)

    def pop(self, n: int) -> list[tuple[int, int, int]]:
        """The ``n`` smallest entries (fewer if the heap runs out), smallest first."""
        heap = self._heap
        return [heapq.heappop(heap) for _ in range(min(n, len(heap)))]

    def reset(self, keys: np.ndarray, counts: np.ndarray, last_seen: np.ndarray) -> None:
        self._heap = []
        self.push(keys, counts, last_seen)

    def clear(self) -> None:
        self._heap = []


def _member(sorted_keys: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """keys[i] in sorted_keys, for each i (sorted_keys ascending)."""
    if len(sorted_keys) == 0 or len(keys) == 0:
        return np.zeros(len(keys), dtype=bool)
    at = np.minimum(np.searchsorted(sorted_keys, keys), len(sorted_keys) - 1)
    return sorted_keys[at] == keys
