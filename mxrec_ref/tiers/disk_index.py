"""The SSD tier's in-memory index (spec/tiers.md, TIER-9): key -> where its live record is.

The reference's index, numpy only; its fast twin ``FastDiskIndex`` (mxrec_ref/fast/disk.py)
replaces the two primitives that loop over keys (``_search``, ``_merge``) by the core's C loops
and keeps everything else, so both hold the same arrays after every call.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

NONE = np.empty(0, dtype=np.int64)
OFFSET_BITS = 40     # a record's location word: file id << 40 | byte offset (files stay far below 1 TiB)
_OFFSET_MASK = (1 << OFFSET_BITS) - 1


def pack_locations(entries: np.ndarray) -> np.ndarray:
    """[n, 2] (file id, offset) as one int64 word each; -1 where the file id is -1."""
    words = (entries[:, 0] << OFFSET_BITS) | entries[:, 1]
    words[entries[:, 0] < 0] = -1
    return words


def unpack_locations(words: np.ndarray) -> np.ndarray:
    """Location words as [n, 2] (file id, offset), both -1 for -1."""
    entries = np.empty((len(words), 2), dtype=np.int64)
    np.right_shift(words, OFFSET_BITS, out=entries[:, 0])     # -1 stays -1 (arithmetic shift)
    np.bitwise_and(words, _OFFSET_MASK, out=entries[:, 1])
    entries[words < 0, 1] = -1
    return entries


class Hits(NamedTuple):
    """Where a search found each key: its location word (-1 where absent), and per level whether it
    is there and at which position."""
    words: np.ndarray
    in_delta: np.ndarray
    delta_at: np.ndarray
    in_main: np.ndarray
    main_at: np.ndarray


class DiskIndex:
    """key -> (file id, offset) for every key on disk, as two int64 columns
    (the key and a location word, file id << 40 | offset): 16 bytes a row
    (TIER-9).  Counts and last-seen times live only in the records; eviction
    bounds them per file instead (``DiskTier.expired``).  Numpy arrays, so
    that batches are looked up and updated with ``np.searchsorted`` instead of
    one dict operation per key.

    Two sorted levels, disjoint in keys: ``main`` and a small ``delta`` that
    new keys are merged into (cheap for small batches); the delta is merged
    into main once it passes sqrt(DELTA_MIN x main) keys, which balances the
    two costs: a batch of b new keys costs O(delta) to insert and the merge
    O(main) every delta / b batches, so O(sqrt(main)) a batch either way
    (an eighth of main, as before, made the delta inserts grow with the table).
    A key already in a level is updated in place there; a removed key keeps
    its slot with location -1 (a tombstone, reusable by a later write) until
    the next merge drops it.  Everything is sorted by key: no hash order."""

    DELTA_MIN = 4096

    def __init__(self):
        self.clear()

    def clear(self) -> None:
        self.main_keys, self.main = NONE, NONE
        self.delta_keys, self.delta = NONE, NONE
        self.n = 0  # live keys

    def __len__(self) -> int:
        return self.n

    def search(self, keys: np.ndarray) -> Hits:
        """Where ``keys`` are: one search of both levels."""
        return self._search(keys)

    def lookup(self, keys: np.ndarray) -> np.ndarray:
        """Entries [n, 2] (file id, offset) of ``keys``, -1 where absent."""
        return unpack_locations(self._search(keys).words)

    def put(self, keys: np.ndarray, entries: np.ndarray) -> np.ndarray:
        """Set ``keys`` (sorted, unique) to ``entries`` [n, 2] (file id >= 0); returns their
        previous entries (file id -1 where absent)."""
        words = pack_locations(entries)
        old, in_delta, dpos, in_main, mpos = self._search(keys)
        self.delta[dpos[in_delta]] = words[in_delta]
        self.main[mpos[in_main]] = words[in_main]
        new = ~(in_delta | in_main)
        self.n += int(np.count_nonzero(old < 0))
        if new.any():
            new_keys, new_words = keys[new], words[new]
            if len(self.delta_keys) + len(new_keys) > max(self.DELTA_MIN, math.isqrt(self.DELTA_MIN * len(self.main_keys))):
                self.main_keys, self.main = self._merge(self.main_keys, self.main,
                                                        *self._merge(self.delta_keys, self.delta, new_keys,
                                                                     new_words))
                self.delta_keys, self.delta = NONE, NONE
            else:
                self.delta_keys, self.delta = self._merge(self.delta_keys, self.delta, new_keys, new_words)
        return unpack_locations(old)

    def drop(self, keys: np.ndarray) -> np.ndarray:
        """Forget ``keys`` (sorted, unique); returns their previous entries (file id -1 where absent)."""
        hits = self._search(keys)
        self.drop_hits(hits, np.flatnonzero(hits.words >= 0))
        return unpack_locations(hits.words)

    def drop_hits(self, hits: Hits, found: np.ndarray) -> None:
        """Forget the keys at positions ``found`` of a search's ``hits`` (all present), without
        searching again: a call that has read them leaves the index as it found them."""
        self.delta[hits.delta_at[found][hits.in_delta[found]]] = -1
        self.main[hits.main_at[found][hits.in_main[found]]] = -1
        self.n -= len(found)

    def nbytes(self) -> int:
        """Bytes of the index's arrays (both levels, tombstones included)."""
        return sum(array.nbytes for array in (self.main_keys, self.main, self.delta_keys, self.delta))

    def items(self) -> tuple[np.ndarray, np.ndarray]:
        """(keys sorted, entries [n, 2]) of every live key."""
        keys, words = self._merge(self.main_keys, self.main, self.delta_keys, self.delta)
        return keys, unpack_locations(words)

    # ------------------------------------------------ the two kernels (FastDiskIndex: C loops)
    def _search(self, keys: np.ndarray) -> Hits:
        delta_at, in_delta = _find(self.delta_keys, keys)
        main_at, in_main = _find(self.main_keys, keys)
        in_main &= ~in_delta
        words = self.main[main_at] if len(self.main_keys) else np.full(len(keys), -1, dtype=np.int64)
        words[~in_main] = -1
        if len(self.delta_keys):
            words[in_delta] = self.delta[delta_at[in_delta]]
        return Hits(words, in_delta, delta_at, in_main, main_at)

    @staticmethod
    def _merge(keys_a, words_a, keys_b, words_b):
        """Two sorted, key-disjoint levels as one, tombstones dropped."""
        keys_a, words_a = _live(keys_a, words_a)
        keys_b, words_b = _live(keys_b, words_b)
        if len(keys_a) == 0:
            return keys_b, words_b
        if len(keys_b) == 0:
            return keys_a, words_a
        at = np.searchsorted(keys_a, keys_b)
        return np.insert(keys_a, at, keys_b), np.insert(words_a, at, words_b)


def _find(keys_sorted: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(position, found) of ``keys`` in one level."""
    if len(keys_sorted) == 0:
        return np.zeros(len(keys), dtype=np.intp), np.zeros(len(keys), dtype=bool)
    if len(keys) > 64 and not bool(np.all(keys[1:] >= keys[:-1])):
        # Sorted queries walk the level forward (numpy narrows each search by the last one),
        # random ones miss the cache on every step once the level outgrows it.
        order = np.argsort(keys, kind="stable")
        pos = np.empty(len(keys), dtype=np.intp)
        pos[order] = np.searchsorted(keys_sorted, keys[order])
    else:
        pos = np.searchsorted(keys_sorted, keys)
    np.minimum(pos, len(keys_sorted) - 1, out=pos)
    return pos, keys_sorted[pos] == keys


def _live(keys, words):
    """A level without its tombstones (itself when it has none; callers
    never modify a level they did not build)."""
    keep = words >= 0
    return (keys, words) if keep.all() else (keys[keep], words[keep])
