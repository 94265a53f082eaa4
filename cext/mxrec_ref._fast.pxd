"""The fast core's layout (see cext/_fast.pyx): the C helpers and hashing constants, the structs,
``FastCore``'s fields, and the ``cdef inline`` accessors every family file (cext/_*.pxi) reads
them through.

Named ``mxrec_ref._fast.pxd`` (a dotted name) because Cython looks for the declarations of the
module mxrec_ref._fast under that name beside the .pyx; setup.py regenerates the C when it changes.
"""
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memset
from libc.math cimport fabs, fabsf, frexp, isfinite, sqrt, sqrtf

cdef extern from "_fast_helpers.h" nogil:
    uint64_t FAST_MIX1, FAST_MIX2, FAST_KEY_STRIDE, FAST_GOLDEN   # the hashing constants
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
    cdef Py_ssize_t populated_to        # rows [0, populated_to) have their pages faulted in (a hint only)
    cdef Py_ssize_t n_admitted
    cdef int64_t entries_epoch          # changes with every call that changes the history (keys, counts,
                                        # last-seen, rows held): a plan made under one value holds while it does
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
    cdef int64_t hot_epoch              # changes whenever the hot map does: hot indexes probed under one stay valid
    cdef Buffer hot_key_buffer
    cdef int64_t* hot_keys_of           # [K] the key of hot index h (kept after it leaves the set)
    cdef Buffer hot_row_buffer
    cdef int32_t* hot_row               # [K] the key's row in the main table, EMPTY once it left the set
    cdef Buffer hot_value_buffer
    cdef float* hot_values              # [K, dim] copies of the hot rows' values (written through)


cdef inline float* _value_row(FastCore core, Py_ssize_t row) noexcept nogil:
    return <float*>core.value_buffer.data + row * core.dim


cdef inline float* _slot_row(FastCore core, Py_ssize_t slot, Py_ssize_t row) noexcept nogil:
    return <float*>core.slot_buffers[slot].data + row * core.dim


cdef inline Entry* _entry(FastCore core, int64_t tag) noexcept nogil:
    """The entry a (non-free) slot value points to."""
    if tag >= 0:
        return &core.row_entries[tag]
    return &core.pending[_pending_index(tag)]
