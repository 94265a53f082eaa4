# cython: language_level=3
"""The sharded store's two O(n) kernels (spec/sharding.md, SHARD-2, SHARD-3): a batch's distinct keys in
order of first occurrence with their occurrence counts (a hash table, no sort), and the counting sort of
keys by owner.  ``mxrec_ref.distributed.sharded`` holds the numpy versions they must equal (a property test
compares them) and uses those when this extension is not built."""
import numpy as np

from libc.stdint cimport int64_t, uint64_t

cdef uint64_t GOLDEN = 0x9E3779B97F4A7C15ULL


def first_occurrence(const int64_t[::1] keys, counts):
    """(distinct keys in order of first occurrence, inverse index, occurrences): each position adds its
    ``counts`` weight, or 1 (LKP-2, ADM-2)."""
    cdef Py_ssize_t n = keys.shape[0], i, m = 0
    cdef int bits = 4
    while (<Py_ssize_t>1 << bits) < 2 * n:
        bits += 1
    cdef Py_ssize_t capacity = <Py_ssize_t>1 << bits
    cdef uint64_t mask = capacity - 1
    table = np.full(capacity, -1, dtype=np.int64)       # slot -> index into unique, -1 empty
    unique = np.empty(n, dtype=np.int64)
    inverse = np.empty(n, dtype=np.int64)
    occurrences = np.zeros(n, dtype=np.int64)
    weights = np.ones(n, dtype=np.int64) if counts is None else np.ascontiguousarray(counts, dtype=np.int64)
    cdef int64_t[::1] slots = table, u = unique, inv = inverse, occ = occurrences
    cdef const int64_t[::1] w = weights
    cdef int64_t key, j
    cdef uint64_t slot
    with nogil:
        for i in range(n):
            key = keys[i]
            slot = (<uint64_t>key * GOLDEN) >> (64 - bits)
            while True:
                j = slots[slot]
                if j < 0:
                    j = m
                    slots[slot] = j
                    u[j] = key
                    m += 1
                    break
                if u[j] == key:
                    break
                slot = (slot + 1) & mask
            inv[i] = j
            occ[j] += w[i]
    return unique[:m].copy(), inverse, occurrences[:m].copy()


def route(const int64_t[::1] keys, Py_ssize_t rank_size):
    """(order, counts): ``keys[order]`` grouped by owner ``key mod rank_size`` (floor), stable; a
    counting sort."""
    cdef Py_ssize_t n = keys.shape[0], i, r
    counts = np.zeros(rank_size, dtype=np.int64)
    order = np.empty(n, dtype=np.int64)
    owners = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] c = counts, o = order, own = owners
    cdef int64_t[::1] start = np.zeros(rank_size + 1, dtype=np.int64)
    cdef int64_t owner
    with nogil:
        for i in range(n):
            owner = keys[i] % rank_size
            if owner < 0:
                owner += rank_size
            own[i] = owner
            c[owner] += 1
        for r in range(rank_size):
            start[r + 1] = start[r] + c[r]
        for i in range(n):
            o[start[own[i]]] = i
            start[own[i]] += 1
    return order, counts
