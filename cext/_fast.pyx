# cython: language_level=3
# distutils: extra_compile_args = -O3 -ffp-contract=off -fno-fast-math -fno-math-errno
# (this line replaces setup.py's extra_compile_args for this module, so it
# repeats them; -fno-math-errno is the addition, see "Float arithmetic")
"""The fast path's state and kernels: one ``FastCore`` per store.

``mxrec_ref.fast.FastStore`` holds the rules that need Python (errors,
capacity, the clock, statistics, the initializer); this module holds the data
and every per-key / per-element loop, each run without the GIL.

Layout
------
The key history is an open-addressing hash map with linear probing over a
power-of-two array of ``int32`` *slots* (load factor <= 0.5).  A slot holds a
tagged index:

    -1        free slot
    r >= 0    an admitted key; r is its row
    -2 - p    a pending key (seen, not admitted); p indexes the pending pool

Each key has a 24-byte *entry* {key, count, last_seen}.  An admitted key's
entry lives at its row in ``row_entries`` (parallel to the row values), so a
slot leads straight to the row: no separate row field and no extra hop.
Pending keys' entries are packed in ``pending`` (removal moves the last one
into the hole).  Per admitted key: 24 (entry) + 1 (row-in-use flag) + 8..16
(slots at load 0.5..0.25) + 4 * dim (values) bytes, e.g. 97..105 for dim 16.

Rows are handed out as the spec fixes (EXP-4): the most recently freed row
first, else the next never-used one.  ``row_live`` marks rows that hold a key
(a freed row, or a row orphaned by a checkpoint with a repeated key, does not).

The batch loops prefetch slots, entries and rows a few keys ahead, which
hides most of the memory latency of a table much larger than the caches.
Map deletion is backward-shift deletion (no tombstones).  Entry order is
unobservable: export and eviction sort by key.

All large arrays are page-aligned anonymous mappings grown with mremap
(``_fast_helpers.h``): growing does not copy, untouched capacity costs no
memory, and fresh rows read as zero, as the reference's ``np.zeros`` growth.
numpy never holds a view of them: rows leave the core as copies, so growth
cannot leave a dangling array.

Hot block
---------
Hot Embedding (spec/hot.md) keeps the K keys FastStore chose (set_hot, K =
hot_rows at most) in a second, small structure:

    hot map       buckets of 4 keys + their hot index h, one cache line each;
                  a key lives in one of its two buckets (low and high half of
                  fast_mix64(key)), so a probe reads both lines and compares
                  all 8 lanes without a branch (SSE2); free lanes hold a key
                  that never probes that bucket.  2K lanes (load <= 0.5);
                  if both buckets of a key are full, set_hot doubles the map.
    hot_row[h]    the key's row in the main table; EMPTY once the key lost
                  its row (remove_keys), which also frees its lane
    hot_values    [K, dim] copies of the rows' values, contiguous

Lookups probe every unique key's hot index on the way (lookup_eval_hot,
plan_train_hot): hot keys skip the main map (their row is hot_row[h]) and
are copied from hot_values; FastStore counts the positions of hot keys
(position_stats_hot, HOT-4).  Every optimizer kernel ends by copying each
updated row that is hot back into hot_values (write-through), so the block
never differs from the rows (HOT-3).  Imports (load_rows, load_entries) and
clear empty the set.  K = 16384 rows of dim 16 is 1 MiB of values plus
512 KiB of map.

Measured on a 2-core EPYC VM (bench/test_hot_bench.py): the block does not
make CPU lookups faster.  The main table's rows of hot keys already stay in
the caches, so reading them from the block saves little, while exact hit
counting needs a hot-map probe for every unique key (~5 ns each).  A hot map
in front of dedup (per position) was slower than dedup's scratch table.

Float arithmetic
----------------
The optimizer kernels repeat ``mxrec_ref/ref/optimizers.py`` element by
element with C ``float`` variables in the same order.  Compiled with
-ffp-contract=off -fno-fast-math (no FMA, no reassociation) they are
bit-identical to numpy's float32 operations; -fno-math-errno only lets GCC
vectorise sqrtf (IEEE sqrt is correctly rounded, scalar or vector).  The one
function that is not correctly rounded, ``pow`` (FTRL with
learning_rate_power != -0.5), is left to numpy by the caller: numpy's SIMD
power and libm's ``powf`` disagree in the last bit.
"""
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memset
from libc.math cimport fabsf, isfinite, sqrtf

import numpy as np


cdef extern from "_fast_helpers.h" nogil:
    uint64_t fast_mix64(uint64_t x)
    int64_t fast_count_update(int64_t old, int64_t coefficient, int64_t occurrences)
    int64_t fast_saturating_add(int64_t a, int64_t b)
    void fast_prefetch(const void* p)
    size_t fast_buffer_bytes(size_t bytes)
    void* fast_buffer_resize(void* old, size_t old_bytes, size_t new_bytes)
    void fast_buffer_free(void* p, size_t bytes)
    void fast_buffer_populate(void* p, size_t bytes)
    void fast_crc32_init()
    uint32_t fast_crc32(const uint8_t* p, size_t n)


cdef enum:
    EMPTY = -1           # a free slot; "no row"
    MIN_SLOTS = 16       # smallest hash / scratch table
    MIN_ENTRIES = 1024   # first allocation of the pending pool and the free list
    MIN_ROWS = 1024      # first allocation of row storage (as the reference)
    AHEAD = 8            # prefetch distance of the batch loops, in keys
    CHUNK = 512          # keys per find-then-use round (their entries stay in L1)
    HOT_LANES = 4        # keys per bucket of the hot map (32 bytes)

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

cdef int64_t PADDING_KEY = -1
# Rows and pending indexes are tagged into int32 slots; this is the most
# either may reach.  2**31 keys would need > 200 GB anyway.
cdef int64_t INDEX_LIMIT = 2**31 - 3


cdef struct Entry:
    int64_t key
    int64_t count        # access count, saturating at 2**63 - 1
    int64_t last_seen    # table clock of the last training access


cdef struct HotBucket:
    int64_t key[4]       # HOT_LANES keys; free lanes hold the bucket's sentinel (see _hot_sentinel)
    int32_t h[4]         # their hot indexes
    int64_t pad[2]       # one 64-byte cache line per bucket


cdef struct Buffer:
    void* data
    size_t bytes         # page-rounded size held


cdef int _reserve(Buffer* buffer, size_t bytes) except -1:
    """Grow ``buffer`` to at least ``bytes`` (contents kept, new bytes zero)."""
    cdef void* data
    if buffer.data != NULL and bytes <= buffer.bytes:
        return 0
    data = fast_buffer_resize(buffer.data, buffer.bytes, bytes)
    if data == NULL:
        raise MemoryError(f"mxrec_ref fast store: cannot allocate {bytes} bytes")
    buffer.data = data
    buffer.bytes = fast_buffer_bytes(bytes)
    return 0


cdef void _release(Buffer* buffer) noexcept:
    fast_buffer_free(buffer.data, buffer.bytes)
    buffer.data = NULL
    buffer.bytes = 0


cdef inline Py_ssize_t _table_size(Py_ssize_t n) noexcept nogil:
    """Smallest power of two >= 2 * n (load factor <= 0.5), at least MIN_SLOTS."""
    cdef Py_ssize_t size = MIN_SLOTS
    while size < 2 * n:
        size *= 2
    return size


cdef inline uint64_t _home(int64_t key, uint64_t mask) noexcept nogil:
    return fast_mix64(<uint64_t>key) & mask


cdef inline Py_ssize_t _grown(Py_ssize_t have, Py_ssize_t need, Py_ssize_t minimum) noexcept nogil:
    """Geometric growth by 1.5: amortised O(1) per element (and mremap makes a
    growth cheap), at most 50% reserved beyond what is used."""
    return max(need, have + have // 2, minimum)


cdef inline int32_t _pending_tag(Py_ssize_t p) noexcept nogil:
    return <int32_t>(-2 - p)


cdef inline Py_ssize_t _pending_index(int64_t tag) noexcept nogil:
    return -2 - tag


cdef inline size_t _touched(Py_ssize_t items, size_t item_bytes, size_t held) noexcept nogil:
    """Bytes of a buffer that have been written (whole pages), i.e. resident."""
    if items <= 0:
        return 0
    return min(fast_buffer_bytes(items * item_bytes), held)


cdef class FastCore:
    """Key history, row placement and row storage of one table (see module doc)."""

    # --- hash map: slot -> tagged index (see module doc)
    cdef Buffer slot_buffer
    cdef int32_t* slots
    cdef uint64_t slot_mask
    # --- pending keys' entries, packed in [0, n_pending)
    cdef Buffer pending_buffer
    cdef Entry* pending
    cdef Py_ssize_t n_pending
    cdef Py_ssize_t pending_capacity
    cdef Py_ssize_t pending_high        # most pending keys held at once (pages touched)
    # --- row placement (EXP-4): LIFO stack of freed rows, then never-used rows
    cdef Buffer free_buffer
    cdef int32_t* free_rows
    cdef Py_ssize_t n_free
    cdef Py_ssize_t free_high
    cdef Py_ssize_t next_row            # rows [0, next_row) have been handed out once
    cdef Py_ssize_t n_admitted
    # --- per-call dedup scratch table (reused between calls)
    cdef Buffer scratch_buffer
    # --- per-row storage, [row_capacity] each: entries, in-use flags, values, optimizer slots
    cdef readonly int dim
    cdef Py_ssize_t row_capacity
    cdef Buffer row_entry_buffer
    cdef Entry* row_entries
    cdef Buffer live_buffer
    cdef uint8_t* row_live
    cdef Buffer value_buffer
    cdef Buffer* slot_buffers
    cdef Py_ssize_t n_slot_arrays
    cdef float* slot_init               # initial value of each optimizer slot
    cdef uint8_t* slot_has_init         # 0: a reused row keeps the slot's old values (reference _place)
    # --- hot block (spec/hot.md; see "Hot block" in the module doc)
    cdef Buffer hot_slot_buffer
    cdef HotBucket* hot_slots           # hot map: key -> hot index, [hot_mask + 1] buckets of HOT_LANES
    cdef uint64_t hot_mask              # buckets - 1
    cdef Py_ssize_t hot_count           # K: entries of the block since the last set_hot
    cdef Py_ssize_t hot_live            # keys in the hot set now (K minus those that lost their row)
    cdef Buffer hot_key_buffer
    cdef int64_t* hot_keys_of           # [K] the key of hot index h (kept after it leaves the set)
    cdef Buffer hot_row_buffer
    cdef int32_t* hot_row               # [K] the key's row in the main table, EMPTY once it left the set
    cdef Buffer hot_value_buffer
    cdef float* hot_values              # [K, dim] copies of the hot rows' values (written through)

    def __cinit__(self, int dim, slot_init_values):
        """``slot_init_values``: one float or None per optimizer slot, in
        ``optimizer.slot_names`` order."""
        cdef Py_ssize_t i, n = len(slot_init_values)
        self.dim = dim
        self.slot_buffers = <Buffer*>malloc(max(n, 1) * sizeof(Buffer))
        self.slot_init = <float*>malloc(max(n, 1) * sizeof(float))
        self.slot_has_init = <uint8_t*>malloc(max(n, 1) * sizeof(uint8_t))
        if self.slot_buffers == NULL or self.slot_init == NULL or self.slot_has_init == NULL:
            raise MemoryError()
        memset(self.slot_buffers, 0, max(n, 1) * sizeof(Buffer))
        self.n_slot_arrays = n
        for i, value in enumerate(slot_init_values):
            self.slot_has_init[i] = value is not None
            self.slot_init[i] = <float>float(np.float32(0.0 if value is None else value))
        self.clear()

    def __dealloc__(self):
        self._release_all()
        free(self.slot_buffers)
        free(self.slot_init)
        free(self.slot_has_init)

    cdef void _release_all(self) noexcept:
        cdef Py_ssize_t s
        _release(&self.slot_buffer)
        _release(&self.pending_buffer)
        _release(&self.free_buffer)
        _release(&self.scratch_buffer)
        _release(&self.row_entry_buffer)
        _release(&self.live_buffer)
        _release(&self.value_buffer)
        self._release_hot()
        if self.slot_buffers != NULL:
            for s in range(self.n_slot_arrays):
                _release(&self.slot_buffers[s])
        self.slots = NULL
        self.pending = NULL
        self.free_rows = NULL
        self.row_entries = NULL
        self.row_live = NULL

    cdef void _release_hot(self) noexcept:
        _release(&self.hot_slot_buffer)
        _release(&self.hot_key_buffer)
        _release(&self.hot_row_buffer)
        _release(&self.hot_value_buffer)
        self.hot_slots = NULL
        self.hot_keys_of = NULL
        self.hot_row = NULL
        self.hot_values = NULL
        self.hot_mask = 0
        self.hot_count = self.hot_live = 0

    # ================================================================ state
    def clear(self):
        """Forget everything and release the memory (import starts here)."""
        self._release_all()
        _reserve(&self.slot_buffer, MIN_SLOTS * sizeof(int32_t))
        self.slots = <int32_t*>self.slot_buffer.data
        memset(self.slots, 0xFF, MIN_SLOTS * sizeof(int32_t))  # all EMPTY (-1)
        self.slot_mask = MIN_SLOTS - 1
        self.n_pending = self.pending_capacity = self.pending_high = 0
        self.n_free = self.free_high = self.next_row = self.n_admitted = 0
        self.row_capacity = 0

    @property
    def size(self):
        """Keys holding a row."""
        return self.n_admitted

    @property
    def history_size(self):
        """Keys in the history, admitted and pending."""
        return self.n_admitted + self.n_pending

    def memory_bytes(self, bint allocated=False):
        """Bytes of the map, the entries (with row flags), the free list, the
        row values and the hot block; optimizer slots excluded.  By default the bytes
        written so far (whole pages: what is resident, since untouched
        capacity of an anonymous mapping costs nothing); with ``allocated``
        the reserved capacity."""
        cdef size_t entry_bytes = sizeof(Entry) + sizeof(uint8_t)
        cdef size_t hot_bytes = (self.hot_slot_buffer.bytes
                                 + self.hot_key_buffer.bytes + self.hot_row_buffer.bytes + self.hot_value_buffer.bytes)
        if allocated:
            return {
                "map_slots": int(self.slot_buffer.bytes),
                "entries": int(self.row_entry_buffer.bytes + self.live_buffer.bytes + self.pending_buffer.bytes),
                "free_list": int(self.free_buffer.bytes),
                "values": int(self.value_buffer.bytes),
                "hot_block": int(hot_bytes),
            }
        return {
            "map_slots": int(self.slot_buffer.bytes),  # memset in full when created
            "entries": int(_touched(self.next_row, sizeof(Entry), self.row_entry_buffer.bytes)
                           + _touched(self.next_row, sizeof(uint8_t), self.live_buffer.bytes)
                           + _touched(self.pending_high, sizeof(Entry), self.pending_buffer.bytes)),
            "free_list": int(_touched(self.free_high, sizeof(int32_t), self.free_buffer.bytes)),
            "values": int(_touched(self.next_row, self.dim * sizeof(float), self.value_buffer.bytes)),
            "hot_block": int(hot_bytes),  # written in full by set_hot
        }

    cdef inline float* _value_row(self, Py_ssize_t row) noexcept nogil:
        return <float*>self.value_buffer.data + row * self.dim

    cdef inline float* _slot_row(self, Py_ssize_t slot, Py_ssize_t row) noexcept nogil:
        return <float*>self.slot_buffers[slot].data + row * self.dim

    cdef inline Entry* _entry(self, int64_t tag) noexcept nogil:
        """The entry a (non-free) slot value points to."""
        if tag >= 0:
            return &self.row_entries[tag]
        return &self.pending[_pending_index(tag)]

    # =========================================================== hash map
    cdef inline int32_t _find_from(self, int64_t key, uint64_t i) noexcept nogil:
        """Tagged index of ``key`` probing from slot ``i`` (its home), or
        EMPTY.  The map always has a free slot, so the probe ends."""
        cdef int32_t tag
        while True:
            tag = self.slots[i]
            if tag == EMPTY or self._entry(tag).key == key:
                return tag
            i = (i + 1) & self.slot_mask

    cdef inline int32_t _find(self, int64_t key) noexcept nogil:
        return self._find_from(key, _home(key, self.slot_mask))

    cdef void _find_many(self, const int64_t* keys, Py_ssize_t n, int64_t* out) noexcept nogil:
        """out[i] = tagged index of keys[i] or EMPTY.  A three-stage pipeline:
        key i + 2*AHEAD has its slot prefetched, key i + AHEAD its entry, key
        i is resolved (out[] holds the home slot in between)."""
        cdef Py_ssize_t i, j
        cdef int32_t tag
        for i in range(n + 2 * AHEAD):
            if i < n:
                out[i] = <int64_t>_home(keys[i], self.slot_mask)
                fast_prefetch(&self.slots[out[i]])
            j = i - AHEAD
            if 0 <= j < n:
                tag = self.slots[out[j]]
                if tag != EMPTY:
                    fast_prefetch(self._entry(tag))
            j = i - 2 * AHEAD
            if j >= 0:
                out[j] = self._find_from(keys[j], <uint64_t>out[j])

    cdef inline uint64_t _slot_of(self, int64_t key) noexcept nogil:
        """Slot holding ``key``, which must be in the map."""
        cdef uint64_t i = _home(key, self.slot_mask)
        while self._entry(self.slots[i]).key != key:
            i = (i + 1) & self.slot_mask
        return i

    cdef inline void _link(self, int64_t key, int32_t tag) noexcept nogil:
        """Map ``key`` (absent, its entry already written) to ``tag``."""
        cdef uint64_t i = _home(key, self.slot_mask)
        while self.slots[i] != EMPTY:
            i = (i + 1) & self.slot_mask
        self.slots[i] = tag

    cdef void _unlink(self, int64_t key) noexcept nogil:
        """Remove ``key`` from the map by backward-shift deletion: later
        members of the probe run move up, so no tombstone is needed.  Entries
        must still be intact (homes are recomputed from their keys)."""
        cdef uint64_t mask = self.slot_mask
        cdef uint64_t hole = self._slot_of(key)
        cdef uint64_t j = hole
        cdef uint64_t home
        cdef int32_t moved
        while True:
            j = (j + 1) & mask
            moved = self.slots[j]
            if moved == EMPTY:
                break
            home = _home(self._entry(moved).key, mask)
            # ``moved`` may fill the hole only if its home is not in (hole, j]
            # cyclically; otherwise a probe from its home would stop at the hole.
            if ((j - home) & mask) >= ((j - hole) & mask):
                self.slots[hole] = moved
                hole = j
        self.slots[hole] = EMPTY

    # ========================================================== hot block
    cdef inline int32_t _hot_probe(self, int64_t key, uint64_t hash_value) noexcept nogil:
        """Hot index of ``key`` (``hash_value`` = fast_mix64(key)) or EMPTY,
        without a data-dependent branch: the key can only be in one of its
        two buckets, so all 8 lanes are compared and the first match taken.
        (A linear-probing map mispredicts on most misses, which costs more
        than the memory access.)  Only valid while hot_live > 0."""
        cdef const HotBucket* a = &self.hot_slots[hash_value & self.hot_mask]
        cdef const HotBucket* b = &self.hot_slots[(hash_value >> 32) & self.hot_mask]
        cdef unsigned int match = mxrec_hot_lanes4(a.key, key) | mxrec_hot_lanes4(b.key, key) << 4 | (1u << 8)
        cdef unsigned int lane = __builtin_ctz(match)   # 0-3: a's lanes, 4-7: b's, 8: no match
        # select without branches: the bucket by arithmetic, EMPTY by a mask
        cdef const HotBucket* bucket = <const HotBucket*>(<size_t>a + (<size_t>b - <size_t>a) * ((lane >> 2) & 1))
        return bucket.h[lane & 3] | -(<int32_t>(lane >> 3))

    cdef inline int32_t _hot_find(self, int64_t key) noexcept nogil:
        """Hot index of ``key``, or EMPTY when it is not in the hot set."""
        if self.hot_live == 0:
            return EMPTY
        return self._hot_probe(key, fast_mix64(<uint64_t>key))

    cdef inline int64_t _hot_sentinel(self, uint64_t bucket) noexcept nogil:
        """The key held by the free lanes of ``bucket``: one whose two buckets
        are both other buckets, so no probe that reads ``bucket`` asks for it."""
        cdef int64_t t = 0
        cdef uint64_t hash_value
        while True:
            hash_value = fast_mix64(<uint64_t>t)
            if (hash_value & self.hot_mask) != bucket and ((hash_value >> 32) & self.hot_mask) != bucket:
                return t
            t += 1

    cdef void _hot_leave(self, int64_t key) noexcept nogil:
        """``key`` lost its row: it leaves the hot set (HOT-2); its lane takes
        the bucket's sentinel again."""
        cdef uint64_t hash_value, bucket
        cdef Py_ssize_t j, side
        if self.hot_live == 0:
            return
        hash_value = fast_mix64(<uint64_t>key)
        for side in range(2):
            bucket = (hash_value & self.hot_mask) if side == 0 else ((hash_value >> 32) & self.hot_mask)
            for j in range(HOT_LANES):
                if self.hot_slots[bucket].key[j] == key:
                    self.hot_row[self.hot_slots[bucket].h[j]] = EMPTY
                    self.hot_slots[bucket].key[j] = self._hot_sentinel(bucket)
                    self.hot_live -= 1
                    return

    cdef void _hot_find_many(self, const int64_t* keys, Py_ssize_t n, int32_t* out) noexcept nogil:
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
                fast_prefetch(&self.hot_slots[ring[i % AHEAD] & self.hot_mask])
                fast_prefetch(&self.hot_slots[(ring[i % AHEAD] >> 32) & self.hot_mask])
            out[i] = self._hot_probe(keys[i], hash_value)

    def hot_index_of(self, const int64_t[::1] keys):
        """Each key's index in the hot block (int32, EMPTY for keys not in the
        hot set), or None when the hot set is empty: what lookup_eval,
        plan_train, commit_train and position_stats_hot take."""
        cdef Py_ssize_t n = keys.shape[0]
        if self.hot_live == 0:
            return None
        out = np.empty(n, dtype=np.int32)
        cdef int32_t[::1] o_view = out
        if n:
            with nogil:
                self._hot_find_many(&keys[0], n, &o_view[0])
        return out

    cdef void _hot_write_through(self, const int64_t* rows, Py_ssize_t k) noexcept nogil:
        """After an optimizer kernel updated ``rows``: refresh the block copy
        of every hot one (HOT-3).  Rows were just resolved by key, so their
        entries are still cached; the hot map is small."""
        cdef Py_ssize_t j
        cdef int32_t h
        cdef int dim = self.dim
        if self.hot_live == 0:
            return
        for j in range(k):
            h = self._hot_find(self.row_entries[rows[j]].key)
            if h != EMPTY:
                memcpy(self.hot_values + h * dim, self._value_row(rows[j]), dim * sizeof(float))

    cdef void _find_many_hot(self, const int64_t* keys, Py_ssize_t n, const int32_t* hot_in,
                             int64_t* out, int32_t* hot_out, bint entries=False) noexcept nogil:
        """_find_many that resolves hot keys through the hot map (a hot key's
        row is hot_row[h]; it always holds one) and only the others through
        the main map, compacted (without a branch) so the prefetch pipeline
        holds only keys that need it.  The hot index of each key comes from
        ``hot_in`` (hot_index_of) or is probed here; it is written to
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
                self._hot_find_many(&keys[start], stop - start, probed)
            for i in range(start, stop):
                h = hot_in[i] if hot_in != NULL else probed[i - start]
                if hot_out != NULL:
                    hot_out[i] = h
                out[i] = self.hot_row[h if h != EMPTY else 0]   # cold keys: overwritten below
                if entries and h != EMPTY:
                    fast_prefetch(&self.row_entries[out[i]])
                cold_keys[m] = keys[i]
                cold_at[m] = <int32_t>i
                m += h == EMPTY
            self._find_many(cold_keys, m, cold_tags)
            for i in range(m):
                out[cold_at[i]] = cold_tags[i]
            start = stop

    @property
    def hot_size(self):
        """Keys in the hot set now (HOT-4)."""
        return self.hot_live

    def hot_keys(self):
        """The keys in the hot set now, in hot-block order (for tests)."""
        cdef Py_ssize_t h
        return np.array([self.hot_keys_of[h] for h in range(self.hot_count) if self.hot_row[h] != EMPTY],
                        dtype=np.int64)

    def hot_block(self):
        """(keys, copies of their block rows, their rows in the main table) of
        the hot set, in hot-block order (for tests)."""
        cdef Py_ssize_t h, c
        live = [h for h in range(self.hot_count) if self.hot_row[h] != EMPTY]
        values = np.empty((len(live), self.dim), dtype=np.float32)
        for i, h in enumerate(live):
            for c in range(self.dim):
                values[i, c] = self.hot_values[h * self.dim + c]
        return (np.array([self.hot_keys_of[h] for h in live], dtype=np.int64), values,
                np.array([self.hot_row[h] for h in live], dtype=np.int64))

    cdef Py_ssize_t _hot_place(self, const int64_t* keys, Py_ssize_t n, Py_ssize_t buckets) noexcept:
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
        memset(self.hot_slots, 0, buckets * sizeof(HotBucket))
        for b in range(buckets):
            self.hot_slots[b].key[0] = self._hot_sentinel(b)
            for j in range(1, HOT_LANES):
                self.hot_slots[b].key[j] = self.hot_slots[b].key[0]
        for i in range(n):
            hash_value = fast_mix64(<uint64_t>keys[i])
            choice[0] = hash_value & self.hot_mask
            choice[1] = (hash_value >> 32) & self.hot_mask
            for side in range(2):
                for j in range(used[choice[side]]):
                    if self.hot_slots[choice[side]].key[j] == keys[i]:
                        free(used)
                        return -1 - i
                fill[side] = used[choice[side]]
            side = 0 if fill[0] <= fill[1] else 1
            if fill[side] == HOT_LANES:
                free(used)
                return i
            b = choice[side]
            self.hot_slots[b].key[used[b]] = keys[i]
            self.hot_slots[b].h[used[b]] = <int32_t>i
            used[b] += 1
            self.hot_keys_of[i] = keys[i]
        free(used)
        return n

    def set_hot(self, const int64_t[::1] keys):
        """Make ``keys`` (distinct, each holding a row) the hot set and copy
        their rows into the block; no keys clears it (HOT-2).  Hot index h is
        the key's position in ``keys``."""
        cdef Py_ssize_t n = keys.shape[0], i, buckets, placed
        cdef int64_t[::1] r_view
        cdef int dim = self.dim
        self._release_hot()
        if n == 0:
            return
        if n > INDEX_LIMIT:
            raise MemoryError(f"mxrec_ref fast store: a hot block of more than {INDEX_LIMIT} rows")
        rows = np.empty(n, dtype=np.int64)
        r_view = rows
        with nogil:
            self._find_many(&keys[0], n, &r_view[0])
        if np.any(rows < 0):
            raise KeyError(f"set_hot: key {int(np.asarray(keys)[np.flatnonzero(rows < 0)[0]])} holds no row")
        buckets = _table_size(n) // HOT_LANES     # load <= 0.5
        while True:
            try:
                _reserve(&self.hot_slot_buffer, buckets * sizeof(HotBucket))
                _reserve(&self.hot_key_buffer, n * sizeof(int64_t))
                _reserve(&self.hot_row_buffer, n * sizeof(int32_t))
                _reserve(&self.hot_value_buffer, n * dim * sizeof(float))
            except MemoryError:
                self._release_hot()
                raise
            self.hot_slots = <HotBucket*>self.hot_slot_buffer.data
            self.hot_keys_of = <int64_t*>self.hot_key_buffer.data
            self.hot_mask = buckets - 1
            placed = self._hot_place(&keys[0], n, buckets)
            if placed == n:
                break
            if placed < -1 - n:
                self._release_hot()
                raise MemoryError("mxrec_ref fast store: cannot allocate the hot map")
            if placed < 0:
                self._release_hot()
                raise ValueError(f"set_hot: key {keys[-1 - placed]} is repeated")
            buckets *= 2   # both buckets of a key full (rare at load 0.5): place all again in a bigger map
        self.hot_row = <int32_t*>self.hot_row_buffer.data
        self.hot_values = <float*>self.hot_value_buffer.data
        self.hot_count = self.hot_live = n
        with nogil:
            for i in range(n):
                if i + AHEAD < n:
                    fast_prefetch(self._value_row(r_view[i + AHEAD]))
                self.hot_row[i] = <int32_t>r_view[i]
                memcpy(self.hot_values + i * dim, self._value_row(r_view[i]), dim * sizeof(float))

    def hot_candidates(self, Py_ssize_t n):
        """The keys holding a row that a refresh of ``n`` hot rows can choose
        (HOT-2 orders by count, then key): (keys with a count above the n-th
        highest count, their counts, keys with exactly that count, that
        count), unsorted.
        The n-th highest count comes from a radix select (counts are often
        tied by the million, which slows numpy's introselect down)."""
        cdef Py_ssize_t r, m = self.n_admitted, i, k = 0, n_above = 0, n_tied = 0, rank
        cdef uint64_t prefix, prefix_mask, value, all_and = ~(<uint64_t>0), all_or = 0
        cdef Py_ssize_t histogram[256]
        cdef int shift, b
        cdef int64_t threshold
        if n <= 0 or m == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), 0
        values = np.empty(m, dtype=np.uint64)   # counts as order-preserving unsigned values
        cdef uint64_t[::1] v_view = values
        with nogil:
            for r in range(self.next_row):
                if self.row_live[r] and k < m:
                    value = <uint64_t>self.row_entries[r].count ^ (1ULL << 63)
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
            for r in range(self.next_row):
                if self.row_live[r]:
                    n_above += self.row_entries[r].count > threshold
                    n_tied += self.row_entries[r].count == threshold
        above = np.empty(n_above, dtype=np.int64)
        above_counts = np.empty(n_above, dtype=np.int64)
        tied = np.empty(n_tied, dtype=np.int64)
        cdef int64_t[::1] a_view = above, ac_view = above_counts, t_view = tied
        n_above = n_tied = 0
        with nogil:
            for r in range(self.next_row):
                if self.row_live[r]:
                    if self.row_entries[r].count > threshold:
                        a_view[n_above] = self.row_entries[r].key
                        ac_view[n_above] = self.row_entries[r].count
                        n_above += 1
                    elif self.row_entries[r].count == threshold:
                        t_view[n_tied] = self.row_entries[r].key
                        n_tied += 1
        return above, above_counts, tied, threshold

    cdef void _drop_pending(self, Py_ssize_t p) noexcept nogil:
        """Free pending entry ``p`` (its key already unmapped or remapped):
        the last pending entry moves into the hole and its slot follows."""
        cdef Py_ssize_t last = self.n_pending - 1
        if p != last:
            self.pending[p] = self.pending[last]
            self.slots[self._slot_of(self.pending[p].key)] = _pending_tag(p)
        self.n_pending -= 1

    cdef int32_t _add_pending(self, int64_t key, int64_t count, int64_t last_seen) noexcept nogil:
        cdef Py_ssize_t p = self.n_pending
        self.n_pending += 1
        self.pending_high = max(self.pending_high, self.n_pending)
        self.pending[p].key = key
        self.pending[p].count = count
        self.pending[p].last_seen = last_seen
        self._link(key, _pending_tag(p))
        return _pending_tag(p)

    cdef _reserve_history(self, Py_ssize_t n_new, Py_ssize_t n_new_pending):
        """Room for ``n_new`` more history keys, ``n_new_pending`` of them
        possibly pending: a map at load <= 0.5 and the pending pool.
        Allocation only, nothing observable changes, so it runs before the
        last check of a call can fail."""
        cdef Py_ssize_t total = self.n_admitted + self.n_pending + n_new
        cdef Py_ssize_t size, capacity
        cdef Buffer fresh
        if total > INDEX_LIMIT or self.n_pending + n_new_pending > INDEX_LIMIT:
            raise MemoryError(f"mxrec_ref fast store: more than {INDEX_LIMIT} keys in one table's history")
        if self.n_pending + n_new_pending > self.pending_capacity:
            capacity = _grown(self.pending_capacity, self.n_pending + n_new_pending, MIN_ENTRIES)
            _reserve(&self.pending_buffer, capacity * sizeof(Entry))
            self.pending = <Entry*>self.pending_buffer.data
            self.pending_capacity = capacity
        size = _table_size(total)
        if size > <Py_ssize_t>(self.slot_mask + 1):
            fresh.data = NULL
            fresh.bytes = 0
            _reserve(&fresh, size * sizeof(int32_t))
            _release(&self.slot_buffer)
            self.slot_buffer = fresh
            self.slots = <int32_t*>fresh.data
            self.slot_mask = size - 1
            with nogil:
                self._rehash()

    cdef void _rehash(self) noexcept nogil:
        """Map every key again into the (new, empty) slot array.  Walks the
        entries in memory order -- live rows, then pending keys -- so only the
        slot writes are random."""
        cdef Py_ssize_t r, p
        fast_buffer_populate(self.slots, (self.slot_mask + 1) * sizeof(int32_t))
        memset(self.slots, 0xFF, (self.slot_mask + 1) * sizeof(int32_t))
        for r in range(self.next_row):
            if r + AHEAD < self.next_row:
                fast_prefetch(&self.slots[_home(self.row_entries[r + AHEAD].key, self.slot_mask)])
            if self.row_live[r]:
                self._link(self.row_entries[r].key, <int32_t>r)
        for p in range(self.n_pending):
            self._link(self.pending[p].key, _pending_tag(p))

    cdef _reserve_free(self, Py_ssize_t total):
        cdef Py_ssize_t have = self.free_buffer.bytes // sizeof(int32_t)
        if total > have or self.free_rows == NULL:
            _reserve(&self.free_buffer, _grown(have, total, MIN_ENTRIES) * sizeof(int32_t))
            self.free_rows = <int32_t*>self.free_buffer.data

    cdef _ensure_rows(self, Py_ssize_t n_rows, Py_ssize_t capacity):
        """Rows [0, n_rows) exist (zero until written).  Grown by 1.5, capped
        by the table capacity, so a table declared with 10^9 rows costs
        nothing until keys arrive."""
        cdef Py_ssize_t new, s
        if n_rows <= self.row_capacity:
            return
        if n_rows > INDEX_LIMIT:
            raise MemoryError(f"mxrec_ref fast store: more than {INDEX_LIMIT} rows in one table")
        new = min(_grown(self.row_capacity, n_rows, MIN_ROWS), max(capacity, n_rows))
        _reserve(&self.row_entry_buffer, new * sizeof(Entry))
        _reserve(&self.live_buffer, new * sizeof(uint8_t))
        _reserve(&self.value_buffer, new * self.dim * sizeof(float))
        for s in range(self.n_slot_arrays):
            _reserve(&self.slot_buffers[s], new * self.dim * sizeof(float))
        self.row_entries = <Entry*>self.row_entry_buffer.data
        self.row_live = <uint8_t*>self.live_buffer.data
        self.row_capacity = new

    cdef void _populate_rows(self, Py_ssize_t first, Py_ssize_t n) noexcept:
        """Fault in the never-used rows [first, first + n) about to be written."""
        cdef Py_ssize_t s
        if n <= 0:
            return
        with nogil:
            fast_buffer_populate(&self.row_entries[first], n * sizeof(Entry))
            fast_buffer_populate(&self.row_live[first], n * sizeof(uint8_t))
            fast_buffer_populate(self._value_row(first), n * self.dim * sizeof(float))
            for s in range(self.n_slot_arrays):
                fast_buffer_populate(self._slot_row(s, first), n * self.dim * sizeof(float))

    cdef int32_t _take_row(self) noexcept nogil:
        """The next row to hand out (EXP-4): the most recently freed, else
        the next never-used one (whose slots read zero: fresh pages)."""
        cdef int32_t row
        if self.n_free > 0:
            self.n_free -= 1
            return self.free_rows[self.n_free]
        row = <int32_t>self.next_row
        self.next_row += 1
        return row

    cdef void _fill_row(self, int32_t row, const float* init) noexcept nogil:
        """A new row's values and the optimizer slots' initial values."""
        cdef Py_ssize_t s, c
        cdef float* slot_row
        memcpy(self._value_row(row), init, self.dim * sizeof(float))
        for s in range(self.n_slot_arrays):
            if self.slot_has_init[s]:
                slot_row = self._slot_row(s, row)
                for c in range(self.dim):
                    slot_row[c] = self.slot_init[s]

    # ============================================================== lookup
    def dedup(self, const int64_t[::1] keys, weights):
        """(unique keys in first-occurrence order, inverse, occurrences), where
        occurrences sums ``weights`` (int64 per position) or counts positions."""
        cdef Py_ssize_t n = keys.shape[0]
        cdef Py_ssize_t size = _table_size(n)
        cdef Py_ssize_t n_unique = 0
        cdef const int64_t[::1] weight_view
        cdef const int64_t* weight_data = NULL
        cdef int64_t[::1] u_view, i_view, o_view
        if n > INDEX_LIMIT:
            raise MemoryError(f"mxrec_ref fast store: a batch of more than {INDEX_LIMIT} keys")
        if weights is not None:
            weight_view = weights
            if n:
                weight_data = &weight_view[0]
        _reserve(&self.scratch_buffer, size * sizeof(int32_t))
        unique = np.empty(n, dtype=np.int64)
        inverse = np.empty(n, dtype=np.int64)
        occurrences = np.empty(n, dtype=np.int64)
        u_view, i_view, o_view = unique, inverse, occurrences
        if n:
            with nogil:
                n_unique = _dedup(&keys[0], weight_data, n, <int32_t*>self.scratch_buffer.data,
                                  size - 1, &u_view[0], &i_view[0], &o_view[0])
        return unique[:n_unique].copy(), inverse, occurrences[:n_unique].copy()

    def plan_train(self, const int64_t[::1] unique, const int64_t[::1] occurrences,
                   int64_t coefficient, int64_t threshold, hot_index=None):
        """What a training lookup would do, changing nothing: (tagged index of
        each key, new counts, indexes into ``unique`` of the keys to admit, in
        order, number of keys new to the history).  The padding key is
        skipped (ADM-1).  ``hot_index`` (from hot_index_of, nothing changed
        since) lets hot keys skip the main map."""
        return self._plan_train(unique, occurrences, coefficient, threshold,
                                self._hot_pointer(hot_index, unique.shape[0]), NULL)

    def plan_train_hot(self, const int64_t[::1] unique, const int64_t[::1] occurrences,
                       int64_t coefficient, int64_t threshold):
        """plan_train, plus each key's hot index (hot_index_of, probed chunk by
        chunk on the way; None without a hot set): hot keys skip the main map."""
        cdef Py_ssize_t n = unique.shape[0]
        cdef int32_t[::1] h_view
        if self.hot_live == 0 or n == 0:
            return self._plan_train(unique, occurrences, coefficient, threshold, NULL, NULL) + (None,)
        hot_index = np.empty(n, dtype=np.int32)
        h_view = hot_index
        return self._plan_train(unique, occurrences, coefficient, threshold, NULL, &h_view[0]) + (hot_index,)

    cdef tuple _plan_train(self, const int64_t[::1] unique, const int64_t[::1] occurrences,
                           int64_t coefficient, int64_t threshold, const int32_t* hot_in, int32_t* hot_out):
        """plan_train; hot keys are resolved through the hot block when
        ``hot_in`` (known hot indexes) or ``hot_out`` (probe, and write them
        there) is given."""
        cdef Py_ssize_t n = unique.shape[0], start = 0, stop, u, n_admit = 0, n_new = 0
        cdef int64_t count, tag
        tags = np.empty(n, dtype=np.int64)
        new_counts = np.zeros(n, dtype=np.int64)
        admit = np.empty(n, dtype=np.int64)
        cdef int64_t[::1] t_view = tags, c_view = new_counts, a_view = admit
        with nogil:
            while start < n:  # in chunks, so the entries just found are still in L1
                stop = min(start + CHUNK, n)
                if hot_in != NULL:
                    self._find_many_hot(&unique[start], stop - start, hot_in + start, &t_view[start], NULL, True)
                elif hot_out != NULL:
                    self._find_many_hot(&unique[start], stop - start, NULL, &t_view[start], hot_out + start, True)
                else:
                    self._find_many(&unique[start], stop - start, &t_view[start])
                for u in range(start, stop):
                    if unique[u] == PADDING_KEY:
                        continue
                    tag = t_view[u]
                    count = fast_count_update(self._entry(tag).count if tag != EMPTY else 0,
                                              coefficient, occurrences[u])
                    c_view[u] = count
                    if tag == EMPTY:
                        n_new += 1
                    if tag < 0 and count >= threshold:   # new or pending, and due
                        a_view[n_admit] = u
                        n_admit += 1
                start = stop
        return tags, new_counts, admit[:n_admit].copy(), n_new

    cdef const int32_t* _hot_pointer(self, hot_index, Py_ssize_t n) except? NULL:
        """The data of a hot index from hot_index_of, lookup_eval_hot or
        plan_train_hot (int32 [n]), or NULL for None, an empty batch or no hot
        set.  Every index must still name a key in the hot set."""
        cdef const int32_t[::1] view
        cdef Py_ssize_t i
        if hot_index is None or n == 0 or self.hot_live == 0:
            return NULL
        view = hot_index
        if view.shape[0] != n:
            raise ValueError("hot_index: one entry per unique key is needed")
        for i in range(n):
            if view[i] != EMPTY and not (0 <= view[i] < self.hot_count and self.hot_row[view[i]] != EMPTY):
                raise ValueError("hot_index: stale (the hot set changed since it was computed)")
        return &view[0]

    def commit_train(self, const int64_t[::1] unique, const int64_t[::1] tags,
                     const int64_t[::1] new_counts, const int64_t[::1] admit, Py_ssize_t n_new,
                     int64_t clock, init_rows, Py_ssize_t capacity, Py_ssize_t total, default_row,
                     hot_index=None):
        """Apply a plan: count and time-stamp every key, add the new ones to the
        history, give the admitted keys rows filled with ``init_rows`` and the
        slots' initial values.  Every allocation happens before the first
        change.  Returns the lookup's (rows, admitted), see _gather; hot keys'
        rows are copied from the hot block (``hot_index`` from plan_train_hot)."""
        cdef Py_ssize_t n = unique.shape[0], n_admit = admit.shape[0]
        cdef const int32_t* hot = self._hot_pointer(hot_index, n)
        cdef Py_ssize_t fresh = max(0, n_admit - self.n_free)
        cdef const float[:, ::1] init
        cdef const float* init_data = NULL
        if n_admit:
            init = init_rows
            init_data = &init[0, 0]
        self._reserve_history(n_new, n_new)
        self._ensure_rows(self.next_row + fresh, capacity)
        self._populate_rows(self.next_row, fresh)
        out, admitted, fill = self._lookup_outputs(total, default_row)
        cdef float[:, ::1] out_view = out
        cdef uint8_t[::1] a_view = admitted
        cdef const float[::1] fill_view = fill
        with nogil:
            if n:
                self._commit(&unique[0], &tags[0], &new_counts[0], n, clock, &admit[0] if n_admit else NULL,
                             n_admit, init_data, &fill_view[0], &out_view[0, 0], &a_view[0], hot)
            if total > n:  # padding past the unique keys
                self._gather(NULL, 0, total - n, &fill_view[0], &out_view[n, 0], &a_view[n])
        return out, admitted.view(np.bool_)

    cdef void _commit(self, const int64_t* unique, const int64_t* tags, const int64_t* new_counts,
                      Py_ssize_t n, int64_t clock, const int64_t* admit, Py_ssize_t n_admit,
                      const float* init, const float* fill, float* out, uint8_t* admitted,
                      const int32_t* hot) noexcept nogil:
        """One pass over the unique keys: count and time-stamp each, admit the
        next key due when it comes up (admit[] is in unique order, so rows go
        out in first-occurrence order, EXP-4), then copy its row or the
        default into the output."""
        cdef Py_ssize_t u, j = 0
        cdef int dim = self.dim
        cdef int64_t key, tag
        cdef int32_t row
        cdef Entry* entry
        cdef bint pending_moved = False
        for u in range(n):
            if u + 2 * AHEAD < n and tags[u + 2 * AHEAD] != EMPTY:
                fast_prefetch(self._entry(tags[u + 2 * AHEAD]))
            if u + AHEAD < n and tags[u + AHEAD] >= 0:
                if hot != NULL and hot[u + AHEAD] != EMPTY:
                    fast_prefetch(self.hot_values + hot[u + AHEAD] * dim)
                else:
                    fast_prefetch(self._value_row(tags[u + AHEAD]))
            key = unique[u]
            tag = tags[u]
            if key != PADDING_KEY:
                if tag < EMPTY and pending_moved:
                    # pending: an admission earlier in this pass may have moved it
                    tag = self._find(key)
                if j < n_admit and admit[j] == u:
                    row = self._take_row()
                    entry = &self.row_entries[row]
                    entry.key = key
                    self.row_live[row] = 1
                    self.n_admitted += 1
                    if tag == EMPTY:
                        self._link(key, row)
                    else:  # pending -> admitted: the slot now names the row
                        self.slots[self._slot_of(key)] = row
                        self._drop_pending(_pending_index(tag))
                        pending_moved = True
                    self._fill_row(row, init + j * dim)
                    j += 1
                    tag = row
                elif tag == EMPTY:
                    tag = self._add_pending(key, 0, 0)
                entry = self._entry(tag)
                entry.count = new_counts[u]
                entry.last_seen = clock
            if tag >= 0:
                admitted[u] = 1
                if hot != NULL and hot[u] != EMPTY:   # a hot key: the block's copy (HOT-3)
                    memcpy(out + u * dim, self.hot_values + hot[u] * dim, dim * sizeof(float))
                else:
                    memcpy(out + u * dim, self._value_row(tag), dim * sizeof(float))
            else:
                memcpy(out + u * dim, fill, dim * sizeof(float))

    def lookup_eval(self, const int64_t[::1] unique, Py_ssize_t total, default_row, hot_index=None):
        """An evaluation lookup's (rows, admitted), see _gather; changes
        nothing.  With ``hot_index`` (from hot_index_of) hot keys skip the
        main map and are answered from the hot block (HOT-3)."""
        return self._lookup_eval(unique, total, default_row, self._hot_pointer(hot_index, unique.shape[0]), NULL)

    def lookup_eval_hot(self, const int64_t[::1] unique, Py_ssize_t total, default_row):
        """lookup_eval, plus each key's hot index (hot_index_of, probed chunk
        by chunk on the way; None without a hot set): hot keys skip the main
        map and are answered from the hot block (HOT-3)."""
        cdef Py_ssize_t n = unique.shape[0]
        cdef int32_t[::1] h_view
        if self.hot_live == 0 or n == 0:
            return self._lookup_eval(unique, total, default_row, NULL, NULL) + (None,)
        hot_index = np.empty(n, dtype=np.int32)
        h_view = hot_index
        return self._lookup_eval(unique, total, default_row, NULL, &h_view[0]) + (hot_index,)

    cdef tuple _lookup_eval(self, const int64_t[::1] unique, Py_ssize_t total, default_row,
                            const int32_t* hot_in, int32_t* hot_out):
        cdef Py_ssize_t n = unique.shape[0], start = 0, stop
        cdef const int32_t* hot
        tags = np.empty(n, dtype=np.int64)
        cdef int64_t[::1] t_view = tags
        out, admitted, fill = self._lookup_outputs(total, default_row)
        cdef float[:, ::1] out_view = out
        cdef uint8_t[::1] a_view = admitted
        cdef const float[::1] fill_view = fill
        with nogil:
            while start < n:  # in chunks, so the keys just found are still in L1
                stop = min(start + CHUNK, n)
                if hot_in != NULL or hot_out != NULL:
                    self._find_many_hot(&unique[start], stop - start, hot_in + start if hot_in != NULL else NULL,
                                        &t_view[start], hot_out + start if hot_out != NULL else NULL)
                    hot = hot_in + start if hot_in != NULL else hot_out + start
                    self._gather_hot(&t_view[start], hot, stop - start, &fill_view[0],
                                     &out_view[start, 0], &a_view[start])
                else:
                    self._find_many(&unique[start], stop - start, &t_view[start])
                    self._gather(&t_view[start], stop - start, stop - start, &fill_view[0],
                                 &out_view[start, 0], &a_view[start])
                start = stop
            if total > n:  # padding past the unique keys
                self._gather(NULL, 0, total - n, &fill_view[0], &out_view[n, 0], &a_view[n])
        return out, admitted.view(np.bool_)

    cdef tuple _lookup_outputs(self, Py_ssize_t total, default_row):
        out = np.empty((total, self.dim), dtype=np.float32)
        admitted = np.zeros(total, dtype=np.uint8)
        fill = np.ascontiguousarray(default_row, dtype=np.float32)
        if fill.shape != (self.dim,):
            raise ValueError(f"default row must have {self.dim} values")
        return out, admitted, fill

    cdef void _gather(self, const int64_t* tags, Py_ssize_t n, Py_ssize_t total, const float* fill,
                      float* out, uint8_t* admitted) noexcept nogil:
        """out[u] = the row of tags[u] and admitted[u] = 1 for keys holding a
        row; ``fill`` (the default row) elsewhere and for u in [n, total)."""
        cdef Py_ssize_t u
        cdef int dim = self.dim
        for u in range(total):
            if u + AHEAD < n and tags[u + AHEAD] >= 0:
                fast_prefetch(self._value_row(tags[u + AHEAD]))
            if u < n and tags[u] >= 0:
                admitted[u] = 1
                memcpy(out + u * dim, self._value_row(tags[u]), dim * sizeof(float))
            else:
                memcpy(out + u * dim, fill, dim * sizeof(float))

    cdef void _gather_hot(self, const int64_t* tags, const int32_t* hot, Py_ssize_t n, const float* fill,
                          float* out, uint8_t* admitted) noexcept nogil:
        """_gather for n keys, hot ones (hot[u] != EMPTY, tags[u] their row)
        copied from the block."""
        cdef Py_ssize_t u
        cdef int dim = self.dim
        for u in range(n):
            if u + AHEAD < n:
                if hot[u + AHEAD] != EMPTY:
                    fast_prefetch(self.hot_values + hot[u + AHEAD] * dim)
                elif tags[u + AHEAD] >= 0:
                    fast_prefetch(self._value_row(tags[u + AHEAD]))
            if hot[u] != EMPTY:
                admitted[u] = 1
                memcpy(out + u * dim, self.hot_values + hot[u] * dim, dim * sizeof(float))
            elif tags[u] >= 0:
                admitted[u] = 1
                memcpy(out + u * dim, self._value_row(tags[u]), dim * sizeof(float))
            else:
                memcpy(out + u * dim, fill, dim * sizeof(float))

    def position_stats(self, const int64_t[::1] keys, const int64_t[::1] inverse, admitted):
        """(padding positions, positions whose key holds a row)."""
        cdef const uint8_t[::1] a_view = admitted.view(np.uint8)
        cdef Py_ssize_t n = keys.shape[0], p, padding = 0, with_row = 0
        with nogil:
            for p in range(n):
                padding += keys[p] == PADDING_KEY
                with_row += a_view[inverse[p]]
        return padding, with_row

    def position_stats_hot(self, const int64_t[::1] keys, const int64_t[::1] inverse, admitted,
                           const int32_t[::1] hot_index):
        """position_stats and the positions whose key is hot (hot_index from
        hot_index_of of the unique keys): answered from the hot block (HOT-4)."""
        cdef const uint8_t[::1] a_view = admitted.view(np.uint8)
        cdef Py_ssize_t n = keys.shape[0], p, padding = 0, with_row = 0, hot = 0
        with nogil:
            for p in range(n):
                padding += keys[p] == PADDING_KEY
                with_row += a_view[inverse[p]]
                hot += hot_index[inverse[p]] != EMPTY
        return padding, with_row, hot

    def row_handles(self, const int64_t[::1] keys):
        """Each key's row, -1 where it holds none."""
        cdef Py_ssize_t n = keys.shape[0], p
        out = np.empty(n, dtype=np.int64)
        cdef int64_t[::1] o_view = out
        if n == 0:
            return out
        with nogil:
            self._find_many(&keys[0], n, &o_view[0])
            for p in range(n):
                if o_view[p] < 0:
                    o_view[p] = EMPTY
        return out

    # =========================================================== gradients
    def resolve_rows(self, const int64_t[::1] keys, mask):
        """(positions, rows) of the masked keys that hold a row now; resolved
        by key, so a key evicted since its lookup is dropped (OPT-2)."""
        cdef const uint8_t[::1] m_view = np.ascontiguousarray(mask, dtype=np.bool_).view(np.uint8)
        cdef Py_ssize_t n = keys.shape[0], i, k = 0, start = 0, stop
        positions = np.empty(n, dtype=np.int64)
        rows = np.empty(n, dtype=np.int64)
        cdef int64_t[::1] p_view = positions, r_view = rows
        with nogil:
            while start < n:  # in chunks, so the keys just found are still in L1
                stop = min(start + CHUNK, n)
                if self.hot_live:   # hot keys skip the main map
                    self._find_many_hot(&keys[start], stop - start, NULL, &r_view[start], NULL)
                else:
                    self._find_many(&keys[start], stop - start, &r_view[start])  # compacted below (k <= i)
                for i in range(start, stop):
                    if m_view[i] and r_view[i] >= 0:
                        p_view[k] = i
                        r_view[k] = r_view[i]
                        k += 1
                start = stop
        return positions[:k].copy(), rows[:k].copy()

    cdef float* _slot_data(self, Py_ssize_t slot) except NULL:
        if not 0 <= slot < self.n_slot_arrays:
            raise IndexError(f"optimizer slot {slot} does not exist")
        if self.slot_buffers[slot].data == NULL:  # no rows yet: a valid pointer for empty loops
            self._ensure_rows(1, 1)
        return <float*>self.slot_buffers[slot].data

    cdef float* _values(self) except NULL:
        if self.value_buffer.data == NULL:
            self._ensure_rows(1, 1)
        return <float*>self.value_buffer.data

    def sgd(self, const int64_t[::1] rows, const int64_t[::1] positions, const float[:, ::1] grads,
            float lr, bint decay, float weight_decay):
        """g = g + wd * w (when decay); w = w - lr * g."""
        cdef Py_ssize_t j, c, k = rows.shape[0]
        cdef int dim = self.dim
        cdef float* values = self._values()
        cdef float* w
        cdef const float* g
        cdef float gc
        with nogil:
            for j in range(k):
                if j + AHEAD < k:
                    fast_prefetch(values + rows[j + AHEAD] * dim)
                w = values + rows[j] * dim
                g = &grads[positions[j], 0]
                for c in range(dim):
                    gc = g[c]
                    if decay:
                        gc = gc + weight_decay * w[c]
                    w[c] = w[c] - lr * gc
            if k:
                self._hot_write_through(&rows[0], k)

    def adagrad(self, const int64_t[::1] rows, const int64_t[::1] positions, const float[:, ::1] grads,
                float lr, Py_ssize_t accumulator):
        """acc = acc + g*g; w = w - (lr*g) / sqrt(acc)."""
        cdef Py_ssize_t j, c, k = rows.shape[0]
        cdef int dim = self.dim
        cdef float* values = self._values()
        cdef float* acc_data = self._slot_data(accumulator)
        cdef float* w
        cdef float* acc
        cdef const float* g
        cdef float a, gc
        with nogil:
            for j in range(k):
                if j + AHEAD < k:
                    fast_prefetch(values + rows[j + AHEAD] * dim)
                    fast_prefetch(acc_data + rows[j + AHEAD] * dim)
                w = values + rows[j] * dim
                acc = acc_data + rows[j] * dim
                g = &grads[positions[j], 0]
                for c in range(dim):
                    gc = g[c]
                    a = acc[c] + gc * gc
                    acc[c] = a
                    w[c] = w[c] - (lr * gc) / sqrtf(a)
            if k:
                self._hot_write_through(&rows[0], k)

    def lazy_adam(self, const int64_t[::1] rows, const int64_t[::1] positions, const float[:, ::1] grads,
                  float beta1, float one_minus_beta1, float beta2, float one_minus_beta2,
                  float lr_t, float epsilon, Py_ssize_t momentum, Py_ssize_t velocity):
        """m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*(g*g); w = w - (lr_t*m) / (sqrt(v) + eps)."""
        cdef Py_ssize_t j, c, k = rows.shape[0]
        cdef int dim = self.dim
        cdef float* values = self._values()
        cdef float* m_data = self._slot_data(momentum)
        cdef float* v_data = self._slot_data(velocity)
        cdef float* w
        cdef float* m
        cdef float* v
        cdef const float* g
        cdef float gc, mc, vc
        with nogil:
            for j in range(k):
                if j + AHEAD < k:
                    fast_prefetch(values + rows[j + AHEAD] * dim)
                    fast_prefetch(m_data + rows[j + AHEAD] * dim)
                    fast_prefetch(v_data + rows[j + AHEAD] * dim)
                w = values + rows[j] * dim
                m = m_data + rows[j] * dim
                v = v_data + rows[j] * dim
                g = &grads[positions[j], 0]
                for c in range(dim):
                    gc = g[c]
                    mc = beta1 * m[c] + one_minus_beta1 * gc
                    vc = beta2 * v[c] + one_minus_beta2 * (gc * gc)
                    m[c] = mc
                    v[c] = vc
                    w[c] = w[c] - (lr_t * mc) / (sqrtf(vc) + epsilon)
            if k:
                self._hot_write_through(&rows[0], k)

    def ftrl_sqrt(self, const int64_t[::1] rows, const int64_t[::1] positions, const float[:, ::1] grads,
                  float lr, float l1, float l2, float l2_shrinkage, Py_ssize_t accum, Py_ssize_t linear):
        """TensorFlow's ApplyFtrlV2 with learning_rate_power = -0.5 (sqrt)."""
        cdef Py_ssize_t j, c, k = rows.shape[0]
        cdef int dim = self.dim
        cdef float* values = self._values()
        cdef float* acc_data = self._slot_data(accum)
        cdef float* lin_data = self._slot_data(linear)
        cdef float* w
        cdef float* acc
        cdef float* lin
        cdef const float* g
        cdef float acc_new
        with nogil:
            for j in range(k):
                if j + AHEAD < k:
                    fast_prefetch(values + rows[j + AHEAD] * dim)
                    fast_prefetch(acc_data + rows[j + AHEAD] * dim)
                    fast_prefetch(lin_data + rows[j + AHEAD] * dim)
                w = values + rows[j] * dim
                acc = acc_data + rows[j] * dim
                lin = lin_data + rows[j] * dim
                g = &grads[positions[j], 0]
                for c in range(dim):
                    acc_new = acc[c] + g[c] * g[c]
                    _ftrl_element(&w[c], &acc[c], &lin[c], g[c], acc_new,
                                  sqrtf(acc_new), sqrtf(acc[c]), lr, l1, l2, l2_shrinkage)
            if k:
                self._hot_write_through(&rows[0], k)

    def ftrl_accumulate(self, const int64_t[::1] rows, const int64_t[::1] positions,
                        const float[:, ::1] grads, Py_ssize_t accum):
        """(acc, acc + g*g) of each updated row, float32 [k, dim]: the inputs of
        numpy's power in the general FTRL update."""
        cdef Py_ssize_t j, c, k = rows.shape[0]
        cdef int dim = self.dim
        cdef float* acc_data = self._slot_data(accum)
        cdef const float* g
        cdef const float* acc
        old = np.empty((k, dim), dtype=np.float32)
        new = np.empty((k, dim), dtype=np.float32)
        cdef float[:, ::1] old_view = old, new_view = new
        with nogil:
            for j in range(k):
                acc = acc_data + rows[j] * dim
                g = &grads[positions[j], 0]
                for c in range(dim):
                    old_view[j, c] = acc[c]
                    new_view[j, c] = acc[c] + g[c] * g[c]
        return old, new

    def ftrl_power(self, const int64_t[::1] rows, const int64_t[::1] positions, const float[:, ::1] grads,
                   const float[:, ::1] acc_new, const float[:, ::1] power_new, const float[:, ::1] power_old,
                   float lr, float l1, float l2, float l2_shrinkage, Py_ssize_t accum, Py_ssize_t linear):
        """ApplyFtrlV2 for any learning_rate_power, given acc^-power after and
        before the step (computed by numpy, see the module doc)."""
        cdef Py_ssize_t j, c, k = rows.shape[0]
        cdef int dim = self.dim
        cdef float* values = self._values()
        cdef float* acc_data = self._slot_data(accum)
        cdef float* lin_data = self._slot_data(linear)
        cdef float* w
        cdef float* acc
        cdef float* lin
        with nogil:
            for j in range(k):
                w = values + rows[j] * dim
                acc = acc_data + rows[j] * dim
                lin = lin_data + rows[j] * dim
                for c in range(dim):
                    _ftrl_element(&w[c], &acc[c], &lin[c], grads[positions[j], c], acc_new[j, c],
                                  power_new[j, c], power_old[j, c], lr, l1, l2, l2_shrinkage)
            if k:
                self._hot_write_through(&rows[0], k)

    # ============================================================ eviction
    def expired_keys(self, int64_t cutoff):
        """Sorted keys with last_seen <= cutoff (= now - eviction_threshold,
        which cannot overflow: now >= -2**62 and threshold <= 2**62)."""
        cdef Py_ssize_t r, p, n = 0, k = 0
        with nogil:
            for r in range(self.next_row):
                if self.row_live[r] and self.row_entries[r].last_seen <= cutoff:
                    n += 1
            for p in range(self.n_pending):
                n += self.pending[p].last_seen <= cutoff
        out = np.empty(n, dtype=np.int64)
        cdef int64_t[::1] o_view = out
        with nogil:
            for r in range(self.next_row):
                if self.row_live[r] and self.row_entries[r].last_seen <= cutoff:
                    o_view[k] = self.row_entries[r].key
                    k += 1
            for p in range(self.n_pending):
                if self.pending[p].last_seen <= cutoff:
                    o_view[k] = self.pending[p].key
                    k += 1
        out.sort()
        return out

    def remove_keys(self, const int64_t[::1] keys):
        """Drop ``keys`` (distinct) in the given order; their rows go on the
        free stack in that order (EVI-3).  Returns (admitted removed, pending
        removed)."""
        cdef Py_ssize_t n = keys.shape[0], i, admitted = 0, pending = 0
        cdef int32_t tag
        self._reserve_free(self.n_free + min(n, self.n_admitted))
        with nogil:
            for i in range(n):
                tag = self._find(keys[i])
                if tag == EMPTY:
                    continue
                self._unlink(keys[i])
                if tag >= 0:
                    self._hot_leave(keys[i])   # a hot key that loses its row leaves the set (HOT-2)
                    self.row_live[tag] = 0
                    self.free_rows[self.n_free] = tag
                    self.n_free += 1
                    self.free_high = max(self.free_high, self.n_free)
                    self.n_admitted -= 1
                    admitted += 1
                else:
                    self._drop_pending(_pending_index(tag))
                    pending += 1
        return admitted, pending

    # ========================================================== tier moves
    def entries_of(self, const int64_t[::1] keys):
        """(counts, last_seen) of ``keys``, which must all hold a row: what a
        row carries when it moves to another storage tier."""
        cdef Py_ssize_t n = keys.shape[0], i
        tags = np.empty(n, dtype=np.int64)
        counts = np.empty(n, dtype=np.int64)
        last_seen = np.empty(n, dtype=np.int64)
        cdef int64_t[::1] t_view = tags, c_view = counts, s_view = last_seen
        cdef Entry* entry
        if n == 0:
            return counts, last_seen
        with nogil:
            self._find_many(&keys[0], n, &t_view[0])
        if np.any(tags < 0):
            raise KeyError(f"entries_of: key {int(np.asarray(keys)[np.flatnonzero(tags < 0)[0]])} holds no row")
        with nogil:
            for i in range(n):
                entry = &self.row_entries[t_view[i]]
                c_view[i] = entry.count
                s_view[i] = entry.last_seen
        return counts, last_seen

    def put_rows(self, const int64_t[::1] keys, const int64_t[::1] counts, const int64_t[::1] last_seen,
                 values, slot_arrays, Py_ssize_t capacity):
        """Insert ``keys`` (distinct, holding no row and not pending) as
        admitted keys with the given entries, values and slot values: a row
        coming back from another storage tier.  Rows are handed out as for
        new keys (EXP-4), in the given order."""
        cdef Py_ssize_t n = keys.shape[0], i, s
        cdef Py_ssize_t fresh = max(0, n - self.n_free)
        cdef int32_t row
        cdef const float[:, ::1] source
        cdef Entry* entry
        if n == 0:
            return
        for i in range(n):
            if self._find(keys[i]) != EMPTY:
                raise KeyError(f"put_rows: key {keys[i]} is already in the history")
        arrays = [np.ascontiguousarray(a, dtype=np.float32).reshape(n, self.dim)
                  for a in [values] + list(slot_arrays)]
        self._reserve_history(n, 0)
        self._ensure_rows(self.next_row + fresh, capacity)
        self._populate_rows(self.next_row, fresh)
        rows = np.empty(n, dtype=np.int64)
        for i in range(n):
            row = self._take_row()
            rows[i] = row
            entry = &self.row_entries[row]
            entry.key = keys[i]
            entry.count = counts[i]
            entry.last_seen = last_seen[i]
            self.row_live[row] = 1
            self.n_admitted += 1
            self._link(keys[i], row)
        for s, array in enumerate(arrays):
            source = array
            for i in range(n):
                memcpy(self._value_row(rows[i]) if s == 0 else self._slot_row(s - 1, rows[i]),
                       &source[i, 0], self.dim * sizeof(float))

    # ======================================================= export/import
    def export_entries(self, bint admitted):
        """(keys ascending, counts, last_seen, rows) of the admitted keys, or of
        the pending keys (rows -1) when ``admitted`` is False."""
        cdef Py_ssize_t r, n = 0, k = 0
        cdef Entry* entry
        with nogil:
            if admitted:
                for r in range(self.next_row):
                    n += self.row_live[r]
            else:
                n = self.n_pending
        keys = np.empty(n, dtype=np.int64)
        counts = np.empty(n, dtype=np.int64)
        last_seen = np.empty(n, dtype=np.int64)
        rows = np.empty(n, dtype=np.int64)
        cdef int64_t[::1] k_view = keys, c_view = counts, s_view = last_seen, r_view = rows
        with nogil:
            for r in range(self.next_row if admitted else self.n_pending):
                if admitted and not self.row_live[r]:
                    continue
                entry = &self.row_entries[r] if admitted else &self.pending[r]
                k_view[k] = entry.key
                c_view[k] = entry.count
                s_view[k] = entry.last_seen
                r_view[k] = r if admitted else EMPTY
                k += 1
        order = np.argsort(keys)  # keys are distinct: any sort gives the same order
        return keys[order], counts[order], last_seen[order], rows[order]

    def copy_rows(self, const int64_t[::1] rows, Py_ssize_t slot):
        """A new float32 [len(rows), dim] array of the given rows' values
        (``slot`` -1) or of optimizer slot ``slot``."""
        cdef Py_ssize_t n = rows.shape[0], j
        cdef int dim = self.dim
        cdef const float* source = self._values() if slot < 0 else self._slot_data(slot)
        out = np.empty((n, dim), dtype=np.float32)
        cdef float[:, ::1] o_view = out
        with nogil:
            for j in range(n):
                if j + AHEAD < n:
                    fast_prefetch(source + rows[j + AHEAD] * dim)
                memcpy(&o_view[j, 0], source + rows[j] * dim, dim * sizeof(float))
        return out

    cdef float* _array(self, Py_ssize_t s) except NULL:
        """Row storage ``s``: -1 the values, else optimizer slot s."""
        return self._values() if s < 0 else self._slot_data(s)

    def save_rows(self, const int64_t[::1] rows, float[:, :, ::1] out):
        """Copy the rows' values and every slot into ``out`` [1 + slots, >= len(rows), dim]
        (a buffer the caller reuses): what restore_rows puts back (OPT-3)."""
        cdef Py_ssize_t n = rows.shape[0], j, s
        cdef int dim = self.dim
        cdef const float* source
        if out.shape[0] != 1 + self.n_slot_arrays or out.shape[1] < n or out.shape[2] != dim:
            raise ValueError("save_rows: out has the wrong shape")
        for s in range(-1, self.n_slot_arrays):
            source = self._array(s)
            with nogil:
                for j in range(n):
                    memcpy(&out[s + 1, j, 0], source + rows[j] * dim, dim * sizeof(float))

    def restore_rows(self, const int64_t[::1] rows, const float[:, :, ::1] saved):
        """Put back what save_rows copied, values written through to the hot
        block: undoes an update that overflowed (OPT-3)."""
        cdef Py_ssize_t n = rows.shape[0], j, s
        cdef int dim = self.dim
        cdef float* target
        for s in range(-1, self.n_slot_arrays):
            target = self._array(s)
            with nogil:
                for j in range(n):
                    memcpy(target + rows[j] * dim, &saved[s + 1, j, 0], dim * sizeof(float))
        if n:
            self._hot_write_through(&rows[0], n)

    def first_nonfinite(self, const int64_t[::1] rows):
        """The first j whose row ``rows[j]`` holds NaN or Inf in its values or
        any optimizer slot, -1 if none (OPT-3).  An exponent of all ones is
        NaN or Inf: a bit test the compiler vectorises."""
        cdef Py_ssize_t n = rows.shape[0], j, s, c, found = -1
        cdef int dim = self.dim
        cdef const uint32_t* bits
        cdef uint32_t bad
        cdef size_t base
        for s in range(-1, self.n_slot_arrays):
            base = <size_t>self._array(s)
            with nogil:
                for j in range(n if found < 0 else found):
                    bits = <const uint32_t*>(<const float*>base + rows[j] * dim)
                    bad = 0
                    for c in range(dim):
                        bad |= (bits[c] & 0x7f800000u) == 0x7f800000u
                    if bad:
                        found = j
                        break
        return found

    def load_rows(self, Py_ssize_t capacity, values, slot_arrays):
        """Import: rows [0, n) take ``values`` and ``slot_arrays`` (float32
        [n, dim] each, in slot order) and count as handed out (CKPT-6); the
        keys come with load_entries."""
        cdef Py_ssize_t n = len(values), s
        cdef const float[:, ::1] source
        self._release_hot()   # an import replaces every row: no key stays hot
        self._ensure_rows(n, capacity)
        for s, array in enumerate([values] + list(slot_arrays)):
            source = np.ascontiguousarray(array, dtype=np.float32).reshape(n, self.dim)
            if n:
                memcpy(self._values() if s == 0 else self._slot_data(s - 1), &source[0, 0],
                       n * self.dim * sizeof(float))
        self.next_row = n

    def load_entries(self, const int64_t[::1] keys, const int64_t[::1] counts,
                     const int64_t[::1] last_seen, bint with_rows):
        """Import: insert or overwrite history keys, as the reference's
        dictionaries do.  With ``with_rows`` key i takes row i (a repeated key
        keeps its last row; the earlier one is orphaned, as in the reference);
        otherwise the key is pending unless it already holds a row."""
        cdef Py_ssize_t n = keys.shape[0], i
        cdef int32_t tag
        cdef Entry* entry
        self._release_hot()   # an import replaces every row: no key stays hot
        self._reserve_history(n, 0 if with_rows else n)
        with nogil:
            for i in range(n):
                tag = self._find(keys[i])
                if with_rows:
                    entry = &self.row_entries[i]
                    entry.key = keys[i]
                    self.row_live[i] = 1
                    if tag == EMPTY:
                        self._link(keys[i], <int32_t>i)
                        self.n_admitted += 1
                    else:  # repeated key (rows are loaded before pending keys)
                        self.row_live[tag] = 0
                        self.slots[self._slot_of(keys[i])] = <int32_t>i
                elif tag == EMPTY:
                    tag = self._add_pending(keys[i], 0, 0)
                    entry = self._entry(tag)
                else:
                    entry = self._entry(tag)
                entry.count = counts[i]
                entry.last_seen = last_seen[i]


cdef inline void _ftrl_element(float* w, float* acc, float* linear, float g, float acc_new,
                               float power_new, float power_old, float lr, float l1, float l2,
                               float l2_shrinkage) noexcept nogil:
    """One element of ApplyFtrlV2 in ref/optimizers.ftrl's order; ``power_*``
    is sqrt(acc) (power -0.5) or acc^-power, after and before the step."""
    cdef float two = 2.0
    cdef float g_shrunk = g
    cdef float sigma, quadratic, lin, sign_l1
    if l2_shrinkage > 0:
        g_shrunk = g + (two * l2_shrinkage) * w[0]
    sigma = (power_new - power_old) / lr
    quadratic = power_new / lr + two * l2
    lin = linear[0] + (g_shrunk - sigma * w[0])
    linear[0] = lin
    sign_l1 = l1 if lin > 0 else -l1
    w[0] = (sign_l1 - lin) / quadratic if fabsf(lin) > l1 else <float>0.0
    acc[0] = acc_new


cdef Py_ssize_t _dedup(const int64_t* keys, const int64_t* weights, Py_ssize_t n,
                       int32_t* table, uint64_t mask, int64_t* unique, int64_t* inverse,
                       int64_t* occurrences) noexcept nogil:
    """Distinct keys in first-occurrence order through a scratch hash table
    (slot -> index into ``unique``), no sorting.  Returns how many."""
    cdef Py_ssize_t p, n_unique = 0
    cdef uint64_t i
    cdef int32_t index
    cdef int64_t key
    memset(table, 0xFF, (mask + 1) * sizeof(int32_t))
    for p in range(min(n, AHEAD)):
        inverse[p] = <int64_t>_home(keys[p], mask)
    for p in range(n):
        # inverse[] holds the home slot AHEAD positions early, so the slot can
        # be prefetched; it is overwritten with the answer below
        if p + AHEAD < n:
            inverse[p + AHEAD] = <int64_t>_home(keys[p + AHEAD], mask)
            fast_prefetch(&table[inverse[p + AHEAD]])
        key = keys[p]
        i = <uint64_t>inverse[p]
        while True:
            index = table[i]
            if index == EMPTY:
                index = <int32_t>n_unique
                table[i] = index
                unique[index] = key
                occurrences[index] = 0
                n_unique += 1
                break
            if unique[index] == key:
                break
            i = (i + 1) & mask
        occurrences[index] = fast_saturating_add(occurrences[index], weights[p] if weights != NULL else 1)
        inverse[p] = index
    return n_unique


# ======================================================== initial values
def mix_bits(uint64_t base, const int64_t[::1] keys, const int64_t[::1] cols):
    """The integer kernel of mxrec_ref.initializers (INIT-2), without the GIL:
    mix64(mix64(base + key*K + col*phi)) mod 2**64 per element.  The rest of
    the initializer (scaling, Box-Muller) stays numpy code shared with the
    reference, so rows remain bit-identical."""
    cdef Py_ssize_t n = keys.shape[0], i
    if cols.shape[0] != n:
        raise ValueError("mix_bits: keys and cols differ in length")
    out = np.empty(n, dtype=np.uint64)
    cdef uint64_t[::1] bits = out
    cdef uint64_t key_stride = 0xD6E8FEB86659FD93ULL, golden = 0x9E3779B97F4A7C15ULL
    with nogil:
        for i in range(n):
            bits[i] = fast_mix64(fast_mix64(base + <uint64_t>keys[i] * key_stride + <uint64_t>cols[i] * golden))
    return out


def uniform_rows(uint64_t base, const int64_t[::1] keys, Py_ssize_t dim, double minval, double span, double scale):
    """Uniform initial rows in one pass: float32((minval + span * u) * scale)
    with u = (bits >> 11) * 2**-53 -- the operations, in the order, that
    initializers.initial_rows performs in numpy (no FMA: -ffp-contract=off),
    so the rows are bit-identical (tested)."""
    cdef Py_ssize_t n = keys.shape[0], i, c
    out = np.empty((n, dim), dtype=np.float32)
    cdef float[:, ::1] rows = out
    cdef uint64_t key_stride = 0xD6E8FEB86659FD93ULL, golden = 0x9E3779B97F4A7C15ULL
    cdef uint64_t counter
    cdef double u
    with nogil:
        for i in range(n):
            counter = base + <uint64_t>keys[i] * key_stride
            for c in range(dim):
                u = <double>(fast_mix64(fast_mix64(counter + <uint64_t>c * golden)) >> 11) * (1.0 / 9007199254740992.0)
                rows[i, c] = <float>((minval + span * u) * scale)
    return out


# ======================================================== SSD tier checksums
def crc32_records(const uint8_t[:, ::1] records, Py_ssize_t covered):
    """zlib.crc32 of the first ``covered`` bytes of every row of ``records``
    (the SSD tier's fixed-size records, mxrec_ref.tiers.disk), as uint32,
    without the GIL; bit-identical to zlib (tested)."""
    cdef Py_ssize_t n = records.shape[0], i
    if covered < 0 or covered > records.shape[1]:
        raise ValueError(f"crc32_records: covered {covered} is outside a row of {records.shape[1]} bytes")
    out = np.empty(n, dtype=np.uint32)
    if n == 0 or covered == 0:
        out[:] = 0  # zlib.crc32(b"")
        return out
    cdef uint32_t[::1] crcs = out
    fast_crc32_init()
    with nogil:
        for i in range(n):
            crcs[i] = fast_crc32(&records[i, 0], <size_t>covered)
    return out
