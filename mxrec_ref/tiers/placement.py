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
reference here (a dict and a deque of lists, written to be read; pure Python,
whether or not the extension is built) and the fast one in
mxrec_ref/fast/placement.py (the core's ``DeviceLRU``: the map as arrays
indexed by the store's row of each key, found by the store's hash probe).  A
store names its own (``device_placement``, ``host_heap``: CON-10), so which one
runs follows the store's backend.  The conformance suite checks that they
agree after every call.
"""
from __future__ import annotations

import heapq
from collections import deque

import numpy as np

class RefDevicePlacement:
    """The device tier as a dict key -> tick of its last use, and the tick
    buckets (a deque of [tick, keys sorted, next position]) in tick order."""

    def __init__(self, device_rows: int, row_handles=None):
        self.device_rows = device_rows      # row_handles: the fast twin's need; keys suffice here
        self._last_use: dict[int, int] = {}
        self._buckets: deque = deque()
        self.queued = 0         # keys in the buckets, stale ones included (bounded: _compact)
        self._tick = 0

    def __len__(self) -> int:
        return len(self._last_use)

    def keys(self) -> np.ndarray:
        return np.array(sorted(self._last_use), dtype=np.int64)

    def contains(self, keys: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """Per key: on the device.  ``rows``: the fast twin's saving (the keys' row handles), unused here."""
        return np.array([k in self._last_use for k in keys.tolist()], dtype=bool)

    def touch(self, keys: np.ndarray, rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Make ``keys`` (distinct) device rows used now; returns the rows sent
        back to the host to stay within budget, in the order chosen, and
        whether each of ``keys`` was on the device before.  ``rows``: the
        keys' rows where the caller knows them (-1 elsewhere); the fast twin's
        saving, unused here."""
        self._tick += 1
        was_on_device = np.array([key in self._last_use for key in keys.tolist()], dtype=bool)
        bucket = sorted(keys.tolist())
        for key in bucket:
            self._last_use[key] = self._tick
        self._buckets.append([self._tick, bucket, 0])
        self.queued += len(bucket)
        victims = []
        excess = len(self._last_use) - self.device_rows
        while len(victims) < excess:       # oldest tick first, by key within a tick
            tick, bucket, at = entry = self._buckets[0]
            if at == len(bucket):
                self._buckets.popleft()
                self.queued -= len(bucket)
                continue
            entry[2] = at + 1
            key = bucket[at]
            if self._last_use.get(key) == tick:
                del self._last_use[key]
                victims.append(key)
        self._compact()
        return np.array(victims, dtype=np.int64), was_on_device

    def forget(self, keys: np.ndarray) -> None:
        """Rows that left memory (evicted, or moved to disk); their bucket entries go stale."""
        for key in keys.tolist():
            self._last_use.pop(key, None)
        self._compact()

    def clear(self) -> None:
        self._last_use.clear()
        self._buckets.clear()
        self.queued = 0

    def _compact(self) -> None:
        """Rebuild the buckets from the map once stale entries outnumber live ones."""
        if self.queued <= 2 * len(self._last_use) + 1024:
            return
        by_tick: dict[int, list] = {}
        for key, tick in self._last_use.items():
            by_tick.setdefault(tick, []).append(key)
        self._buckets = deque([tick, sorted(by_tick[tick]), 0] for tick in sorted(by_tick))
        self.queued = len(self._last_use)


class HostOrder:
    """TIER-5's order over the host rows of an SSD table (in memory, off the
    device): least count first, then older last-seen, then smaller key, kept
    as a heap of (count, last_seen, key) with lazy deletion (TIER-12).  The
    heap is the backend's (``TierMoves.host_heap``): the reference's
    ``PyHostHeap`` (``heapq``) or the fast path's ``HostHeap`` (C, 24 bytes an
    entry); both order the same triples as tuples, so both pop the same.

    Every host row has an entry with its current (count, last_seen) by the
    time the heap is popped: the wrapper notes a row when it arrives on the
    host (sent back from the device, brought back from disk) and after every
    call that touched it, and pushes the noted host rows' entries before it
    pops (a load rebuilds the heap).  An entry is stale when its key has left the host or its
    count or last-seen time changed since; ``pop`` returns entries in
    heap order and the caller checks them against the store.  The heap
    costs O(log n) per row a call touches, never a pass over the host rows.
    The heap is rebuilt from the store once stale entries outnumber live ones."""

    def __init__(self, heap=None):
        self._heap = PyHostHeap() if heap is None else heap
        self._noted: list[np.ndarray] = []   # keys to give a fresh entry before the next pop
        self.noted = 0

    def __len__(self) -> int:
        return len(self._heap)

    def note(self, keys: np.ndarray) -> None:
        self._noted.append(keys)
        self.noted += len(keys)

    def take_noted(self) -> np.ndarray:
        """The noted keys, distinct; the note list is emptied."""
        keys = np.sort(np.concatenate(self._noted)) if self._noted else np.zeros(0, dtype=np.int64)
        if len(keys) > 1:        # a sort and a mask: cheaper than np.unique's hash and sort
            first = np.empty(len(keys), dtype=bool)
            first[0] = True
            np.not_equal(keys[1:], keys[:-1], out=first[1:])
            keys = keys[first]
        self._noted, self.noted = [], 0
        return keys

    def push(self, keys: np.ndarray, counts: np.ndarray, last_seen: np.ndarray) -> None:
        self._heap.push(keys, counts, last_seen)

    def pop(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(counts, last_seen, keys) of the ``n`` smallest entries (fewer if the heap runs out),
        smallest first."""
        return self._heap.pop(n)

    def reset(self, keys: np.ndarray, counts: np.ndarray, last_seen: np.ndarray) -> None:
        self.clear()
        self.push(keys, counts, last_seen)

    def clear(self) -> None:
        self._heap.clear()
        self._noted, self.noted = [], 0


class PyHostHeap:
    """The reference's heap of (count, last_seen, key): ``heapq`` over Python
    ints, the three int64 fields as order-preserving unsigned 64-bit words
    (sign bit flipped), count highest -- ints compare as the tuples would, in
    ~60 bytes instead of a tuple's ~160."""

    def __init__(self):
        self._heap: list[int] = []

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, keys: np.ndarray, counts: np.ndarray, last_seen: np.ndarray) -> None:
        words = [_ordered_words(column).tolist() for column in (counts, last_seen, keys)]
        entries = [(count << 128) | (seen << 64) | key for count, seen, key in zip(*words)]
        if len(entries) > len(self._heap):     # heapify is O(n): cheaper than n pushes here
            self._heap.extend(entries)
            heapq.heapify(self._heap)
            return
        for entry in entries:
            heapq.heappush(self._heap, entry)

    def pop(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        heap = self._heap
        popped = [heapq.heappop(heap) for _ in range(min(n, len(heap)))]
        mask = (1 << 64) - 1
        return tuple(_from_ordered_words(np.array(column, dtype=np.uint64)) for column in
                     ([e >> 128 for e in popped], [(e >> 64) & mask for e in popped], [e & mask for e in popped]))

    def clear(self) -> None:
        self._heap = []


_SIGN = np.uint64(1 << 63)


def _ordered_words(values) -> np.ndarray:
    """int64 values as uint64 words in the same order (the sign bit flipped)."""
    return np.ascontiguousarray(values, dtype=np.int64).view(np.uint64) ^ _SIGN


def _from_ordered_words(words: np.ndarray) -> np.ndarray:
    return (words ^ _SIGN).view(np.int64)
