# Hot Embedding (spec/hot.md): the hot map, its probes, the block and its refresh.
# Twin of mxrec_ref/ref/hot.py and mxrec_ref/fast/hot.py: set_hot, write_through (HOT-2, HOT-3).
# Included into _fast.pyx; the core's layout is mxrec_ref._fast.pxd.

cdef extern from *:
    """
    /* Lanes of a 4-key hot-map bucket equal to key, as bits 0-3 (SSE2 on
     * x86-64, where it is always available; plain C elsewhere). */
    #if defined(__SSE2__)
    #include <emmintrin.h>
    static inline unsigned int mxrec_hot_lanes4(const int64_t* lanes, int64_t key) {
        __m128i k = _mm_set1_epi64x(key);
        __m128i a = _mm_cmpeq_epi32(_mm_loadu_si128((const __m128i*)lanes), k);
        __m128i b = _mm_cmpeq_epi32(_mm_loadu_si128((const __m128i*)(lanes + 2)), k);
        a = _mm_and_si128(a, _mm_shuffle_epi32(a, 0xB1));   /* both 32-bit halves equal */
        b = _mm_and_si128(b, _mm_shuffle_epi32(b, 0xB1));
        return (unsigned int)_mm_movemask_pd(_mm_castsi128_pd(a))
             | ((unsigned int)_mm_movemask_pd(_mm_castsi128_pd(b)) << 2);
    }
    #else
    static inline unsigned int mxrec_hot_lanes4(const int64_t* lanes, int64_t key) {
        return (unsigned int)(lanes[0] == key) | (unsigned int)(lanes[1] == key) << 1
             | (unsigned int)(lanes[2] == key) << 2 | (unsigned int)(lanes[3] == key) << 3;
    }
    #endif
    """
    int __builtin_ctz(unsigned int x) nogil
    unsigned int mxrec_hot_lanes4(const int64_t* lanes, int64_t key) nogil


cdef void _release_hot(FastCore core) noexcept:
    _release(&core.hot_slot_buffer)
    _release(&core.hot_key_buffer)
    _release(&core.hot_row_buffer)
    _release(&core.hot_value_buffer)
    core.hot_slots = NULL
    core.hot_keys_of = NULL
    core.hot_row = NULL
    core.hot_values = NULL
    core.hot_mask = 0
    core.hot_count = core.hot_live = 0
    core.hot_epoch += 1


cdef inline int32_t _hot_probe(FastCore core, int64_t key, uint64_t hash_value) noexcept nogil:
    """Hot index of ``key`` (``hash_value`` = fast_mix64(key)) or EMPTY,
    without a data-dependent branch: the key can only be in one of its
    two buckets, so all 8 lanes are compared and the first match taken.
    (A linear-probing map mispredicts on most misses, which costs more
    than the memory access.)  Only valid while hot_live > 0."""
    cdef const HotBucket* a = &core.hot_slots[hash_value & core.hot_mask]
    cdef const HotBucket* b = &core.hot_slots[(hash_value >> 32) & core.hot_mask]
    cdef unsigned int match = mxrec_hot_lanes4(a.key, key) | mxrec_hot_lanes4(b.key, key) << 4 | (1u << 8)
    cdef unsigned int lane = __builtin_ctz(match)   # 0-3: a's lanes, 4-7: b's, 8: no match
    # select without branches: the bucket by arithmetic, EMPTY by a mask
    cdef const HotBucket* bucket = <const HotBucket*>(<size_t>a + (<size_t>b - <size_t>a) * ((lane >> 2) & 1))
    return bucket.h[lane & 3] | -(<int32_t>(lane >> 3))


cdef inline int32_t _hot_find(FastCore core, int64_t key) noexcept nogil:
    """Hot index of ``key``, or EMPTY when it is not in the hot set."""
    if core.hot_live == 0:
        return EMPTY
    return _hot_probe(core, key, fast_mix64(<uint64_t>key))


cdef inline int64_t _hot_sentinel(FastCore core, uint64_t bucket) noexcept nogil:
    """The key held by the free lanes of ``bucket``: one whose two buckets
    are both other buckets, so no probe that reads ``bucket`` asks for it."""
    cdef int64_t t = 0
    cdef uint64_t hash_value
    while True:
        hash_value = fast_mix64(<uint64_t>t)
        if (hash_value & core.hot_mask) != bucket and ((hash_value >> 32) & core.hot_mask) != bucket:
            return t
        t += 1


cdef void _hot_leave(FastCore core, int64_t key) noexcept nogil:
    """``key`` lost its row: it leaves the hot set (HOT-2); its lane takes
    the bucket's sentinel again."""
    cdef uint64_t hash_value, bucket
    cdef Py_ssize_t j, side
    if core.hot_live == 0:
        return
    hash_value = fast_mix64(<uint64_t>key)
    for side in range(2):
        bucket = (hash_value & core.hot_mask) if side == 0 else ((hash_value >> 32) & core.hot_mask)
        for j in range(HOT_LANES):
            if core.hot_slots[bucket].key[j] == key:
                core.hot_row[core.hot_slots[bucket].h[j]] = EMPTY
                core.hot_slots[bucket].key[j] = _hot_sentinel(core, bucket)
                core.hot_live -= 1
                core.hot_epoch += 1
                return


cdef void _hot_find_many(FastCore core, const int64_t* keys, Py_ssize_t n, int32_t* out) noexcept nogil:
    """out[i] = hot index of keys[i] or EMPTY; both buckets of key
    i + AHEAD are prefetched (hashes wait in a ring)."""
    cdef Py_ssize_t i
    cdef uint64_t hash_value
    cdef uint64_t ring[AHEAD]
    for i in range(min(n, AHEAD)):
        ring[i] = fast_mix64(<uint64_t>keys[i])
    for i in range(n):
        hash_value = ring[i % AHEAD]
        if i + AHEAD < n:
            ring[i % AHEAD] = fast_mix64(<uint64_t>keys[i + AHEAD])
            fast_prefetch(&core.hot_slots[ring[i % AHEAD] & core.hot_mask])
            fast_prefetch(&core.hot_slots[(ring[i % AHEAD] >> 32) & core.hot_mask])
        out[i] = _hot_probe(core, keys[i], hash_value)


def _py_hot_index_of(FastCore core not None, const int64_t[::1] keys):
    """Each key's index in the hot block (int32, EMPTY for keys not in the
    hot set), or None when the hot set is empty: what _py_lookup_eval and
    _py_plan_train take (for tests; the kernels probe on the way)."""
    cdef Py_ssize_t n = keys.shape[0]
    if core.hot_live == 0:
        return None
    out = np.empty(n, dtype=np.int32)
    cdef int32_t[::1] o_view = out
    if n:
        with nogil:
            _hot_find_many(core, &keys[0], n, &o_view[0])
    return out


cdef void write_through(FastCore core, const int64_t* rows, Py_ssize_t k) noexcept nogil:
    """After an optimizer kernel updated ``rows``: refresh the block copy
    of every hot one (HOT-3).  Rows were just resolved by key, so their
    entries are still cached; the hot map is small."""
    cdef Py_ssize_t j
    cdef int32_t h
    cdef int dim = core.dim
    if core.hot_live == 0:
        return
    for j in range(k):
        h = _hot_find(core, core.row_entries[rows[j]].key)
        if h != EMPTY:
            memcpy(core.hot_values + h * dim, _value_row(core, rows[j]), dim * sizeof(float))


cdef void _find_many_hot(FastCore core, const int64_t* keys, Py_ssize_t n, const int32_t* hot_in,
                         int64_t* out, int32_t* hot_out, bint entries=False) noexcept nogil:
    """_find_many that resolves hot keys through the hot map (a hot key's
    row is hot_row[h]; it always holds one) and only the others through
    the main map, compacted (without a branch) so the prefetch pipeline
    holds only keys that need it.  The hot index of each key comes from
    ``hot_in`` (_py_hot_index_of) or is probed here; it is written to
    ``hot_out`` when that is not NULL.  With ``entries`` the hot keys'
    entries are prefetched (the main map's pipeline does it for the others)."""
    cdef int64_t cold_keys[CHUNK]
    cdef int64_t cold_tags[CHUNK]
    cdef int32_t cold_at[CHUNK]
    cdef int32_t probed[CHUNK]
    cdef Py_ssize_t start = 0, stop, i, m
    cdef int32_t h
    while start < n:
        stop = min(start + CHUNK, n)
        m = 0
        if hot_in == NULL:
            _hot_find_many(core, &keys[start], stop - start, probed)
        for i in range(start, stop):
            h = hot_in[i] if hot_in != NULL else probed[i - start]
            if hot_out != NULL:
                hot_out[i] = h
            out[i] = core.hot_row[h if h != EMPTY else 0]   # cold keys: overwritten below
            if entries and h != EMPTY:
                fast_prefetch(&core.row_entries[out[i]])
            cold_keys[m] = keys[i]
            cold_at[m] = <int32_t>i
            m += h == EMPTY
        _find_many(core, cold_keys, m, cold_tags)
        for i in range(m):
            out[cold_at[i]] = cold_tags[i]
        start = stop


def _py_hot_keys(FastCore core not None):
    """The keys in the hot set now, in hot-block order (for tests)."""
    cdef Py_ssize_t h
    return np.array([core.hot_keys_of[h] for h in range(core.hot_count) if core.hot_row[h] != EMPTY],
                    dtype=np.int64)


def _py_hot_block(FastCore core not None):
    """(keys, copies of their block rows, their rows in the main table) of
    the hot set, in hot-block order (for tests)."""
    cdef Py_ssize_t h, c
    live = [h for h in range(core.hot_count) if core.hot_row[h] != EMPTY]
    values = np.empty((len(live), core.dim), dtype=np.float32)
    for i, h in enumerate(live):
        for c in range(core.dim):
            values[i, c] = core.hot_values[h * core.dim + c]
    return (np.array([core.hot_keys_of[h] for h in live], dtype=np.int64), values,
            np.array([core.hot_row[h] for h in live], dtype=np.int64))


cdef Py_ssize_t _hot_place(FastCore core, const int64_t* keys, Py_ssize_t n, Py_ssize_t buckets) noexcept:
    """Fill the hot map (``buckets`` buckets, allocated) with keys[h] -> h,
    each in the emptier of its two buckets.  Returns n; or how many were
    placed when both buckets of a key were full; or -1 - i when keys[i]
    repeats; -2 - n when out of memory."""
    cdef Py_ssize_t i, b, j, side
    cdef uint64_t hash_value
    cdef uint64_t choice[2]
    cdef int fill[2]
    cdef uint8_t* used = <uint8_t*>malloc(buckets)
    if used == NULL:
        return -2 - n
    memset(used, 0, buckets)
    memset(core.hot_slots, 0, buckets * sizeof(HotBucket))
    for b in range(buckets):
        core.hot_slots[b].key[0] = _hot_sentinel(core, b)
        for j in range(1, HOT_LANES):
            core.hot_slots[b].key[j] = core.hot_slots[b].key[0]
    for i in range(n):
        hash_value = fast_mix64(<uint64_t>keys[i])
        choice[0] = hash_value & core.hot_mask
        choice[1] = (hash_value >> 32) & core.hot_mask
        for side in range(2):
            for j in range(used[choice[side]]):
                if core.hot_slots[choice[side]].key[j] == keys[i]:
                    free(used)
                    return -1 - i
            fill[side] = used[choice[side]]
        side = 0 if fill[0] <= fill[1] else 1
        if fill[side] == HOT_LANES:
            free(used)
            return i
        b = choice[side]
        core.hot_slots[b].key[used[b]] = keys[i]
        core.hot_slots[b].h[used[b]] = <int32_t>i
        used[b] += 1
        core.hot_keys_of[i] = keys[i]
    free(used)
    return n


def set_hot(FastCore core not None, const int64_t[::1] keys):
    """Make ``keys`` (distinct, each holding a row) the hot set and copy
    their rows into the block; no keys clears it (HOT-2).  Hot index h is
    the key's position in ``keys``."""
    cdef Py_ssize_t n = keys.shape[0], i, buckets, placed
    cdef int64_t[::1] r_view
    cdef int dim = core.dim
    _release_hot(core)
    if n == 0:
        return
    if n > INDEX_LIMIT:
        raise MemoryError(f"mxrec_ref fast store: a hot block of more than {INDEX_LIMIT} rows")
    rows = np.empty(n, dtype=np.int64)
    r_view = rows
    with nogil:
        _find_many(core, &keys[0], n, &r_view[0])
    if np.any(rows < 0):
        raise KeyError(f"set_hot: key {int(np.asarray(keys)[np.flatnonzero(rows < 0)[0]])} holds no row")
    buckets = _table_size(n) // HOT_LANES     # load <= 0.5
    while True:
        try:
            _reserve(&core.hot_slot_buffer, buckets * sizeof(HotBucket))
            _reserve(&core.hot_key_buffer, n * sizeof(int64_t))
            _reserve(&core.hot_row_buffer, n * sizeof(int32_t))
            _reserve(&core.hot_value_buffer, n * dim * sizeof(float))
        except MemoryError:
            _release_hot(core)
            raise
        core.hot_slots = <HotBucket*>core.hot_slot_buffer.data
        core.hot_keys_of = <int64_t*>core.hot_key_buffer.data
        core.hot_mask = buckets - 1
        placed = _hot_place(core, &keys[0], n, buckets)
        if placed == n:
            break
        if placed < -1 - n:
            _release_hot(core)
            raise MemoryError("mxrec_ref fast store: cannot allocate the hot map")
        if placed < 0:
            _release_hot(core)
            raise ValueError(f"set_hot: key {keys[-1 - placed]} is repeated")
        buckets *= 2   # both buckets of a key full (rare at load 0.5): place all again in a bigger map
    core.hot_row = <int32_t*>core.hot_row_buffer.data
    core.hot_values = <float*>core.hot_value_buffer.data
    core.hot_count = core.hot_live = n
    with nogil:
        for i in range(n):
            if i + AHEAD < n:
                fast_prefetch(_value_row(core, r_view[i + AHEAD]))
            core.hot_row[i] = <int32_t>r_view[i]
            memcpy(core.hot_values + i * dim, _value_row(core, r_view[i]), dim * sizeof(float))


def hot_candidates(FastCore core not None, Py_ssize_t n):
    """The keys holding a row that a refresh of ``n`` hot rows can choose
    (HOT-2 orders by count, then key): (keys with a count above the n-th
    highest count, their counts, keys with exactly that count, that
    count), unsorted.
    The n-th highest count comes from a radix select (counts are often
    tied by the million, which slows numpy's introselect down)."""
    cdef Py_ssize_t r, m = core.n_admitted, i, k = 0, n_above = 0, n_tied = 0, rank
    cdef uint64_t prefix, prefix_mask, value, all_and = ~(<uint64_t>0), all_or = 0
    cdef Py_ssize_t histogram[256]
    cdef int shift, b
    cdef int64_t threshold
    if n <= 0 or m == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), 0
    values = np.empty(m, dtype=np.uint64)   # counts as order-preserving unsigned values
    cdef uint64_t[::1] v_view = values
    with nogil:
        for r in range(core.next_row):
            if core.row_live[r] and k < m:
                value = <uint64_t>core.row_entries[r].count ^ (1ULL << 63)
                v_view[k] = value
                all_and &= value
                all_or |= value
                k += 1
        m = k
        rank = min(n, m)   # find the rank-th highest value (from 1), a byte at a time
        shift = 0          # from the highest byte in which the values differ
        while shift < 56 and ((all_and ^ all_or) >> (shift + 8)) != 0:
            shift += 8
        prefix_mask = ~((1ULL << (shift + 8)) - 1) if shift < 56 else 0
        prefix = all_and & prefix_mask
        while True:
            memset(histogram, 0, sizeof(histogram))
            for i in range(m):
                value = v_view[i]
                if (value & prefix_mask) == prefix:
                    histogram[(value >> shift) & 0xFF] += 1
            b = 255
            while histogram[b] < rank:
                rank -= histogram[b]
                b -= 1
            prefix |= (<uint64_t>b) << shift
            prefix_mask |= (<uint64_t>0xFF) << shift
            if shift == 0:
                break
            shift -= 8
        threshold = <int64_t>(prefix ^ (1ULL << 63))
        for r in range(core.next_row):
            if core.row_live[r]:
                n_above += core.row_entries[r].count > threshold
                n_tied += core.row_entries[r].count == threshold
    above = np.empty(n_above, dtype=np.int64)
    above_counts = np.empty(n_above, dtype=np.int64)
    tied = np.empty(n_tied, dtype=np.int64)
    cdef int64_t[::1] a_view = above, ac_view = above_counts, t_view = tied
    n_above = n_tied = 0
    with nogil:
        for r in range(core.next_row):
            if core.row_live[r]:
                if core.row_entries[r].count > threshold:
                    a_view[n_above] = core.row_entries[r].key
                    ac_view[n_above] = core.row_entries[r].count
                    n_above += 1
                elif core.row_entries[r].count == threshold:
                    t_view[n_tied] = core.row_entries[r].key
                    n_tied += 1
    return above, above_counts, tied, threshold


cdef const int32_t* _hot_pointer(FastCore core, hot_index, Py_ssize_t n) except? NULL:
    """The data of a hot index from _py_hot_index_of, gather or
    plan_train (int32 [n]), or NULL for None, an empty batch or no hot
    set.  Every index must still name a key in the hot set."""
    cdef const int32_t[::1] view
    cdef Py_ssize_t i
    if hot_index is None or n == 0 or core.hot_live == 0:
        return NULL
    view = hot_index
    if view.shape[0] != n:
        raise ValueError("hot_index: one entry per unique key is needed")
    for i in range(n):
        if view[i] != EMPTY and not (0 <= view[i] < core.hot_count and core.hot_row[view[i]] != EMPTY):
            raise ValueError("hot_index: stale (the hot set changed since it was computed)")
    return &view[0]
