# cython: language_level=3
# distutils: extra_compile_args = -O3 -ffp-contract=off -fno-fast-math -fno-math-errno
# (this line replaces setup.py's extra_compile_args for this module, so it
# repeats them; -fno-math-errno is the addition, see "Float arithmetic")
"""The fast path's state and kernels: one ``FastCore`` per store.

``mxrec_ref.fast.FastStore`` holds the rules that need Python (errors,
capacity, the clock, statistics, the initializer); this module holds the data
and every per-key / per-element loop, each run without the GIL.

Files
-----
One extension, assembled from one file per spec family, named as the
reference's modules (``mxrec_ref/ref/F.py`` <-> ``cext/_F.pxi``, with the same
function names for the same rule):

    mxrec_ref._fast.pxd   the layout: structs, FastCore's fields, the hashing
                          constants and the ``cdef inline`` accessors (a dotted
                          name, so Cython finds it for the module mxrec_ref._fast)
    _fast.pyx             this file: buffers, FastCore's life cycle, the includes
    _map.pxi              the key history's hash map and pending pool
    _expansion.pxi        rows: growth, placement (EXP-4), a new row's fill
    _lookup.pxi           dedup, gather, position_stats, row_handles
    _admission.pxi        TrainPlan, plan_train, commit_train
    _hot.pxi              the hot map and block (spec/hot.md)
    _optimizers.pxi       resolve_rows, the update kernels, the overflow check
    _eviction.pxi         expired_keys, remove_keys
    _tiers.pxi            rows to and from another tier, SSD record checksums
    _checkpoint.pxi       export and import of entries and rows
    _initializers.pxi     mix_bits, uniform_rows

The kernels are module functions taking the core (``dedup(core, keys, ...)``),
not methods: Cython cannot spread one class over several files.  Functions
named ``_py_*`` exist for tests only.  One extension rather than one per
family: a cross-module ``cimport`` would put every call between families
behind a function pointer, and the families call each other's inline helpers
in their innermost loops.

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

Lookups probe every unique key's hot index on the way (gather,
plan_train): hot keys skip the main map (their row is hot_row[h]) and
are copied from hot_values; FastStore counts the positions of hot keys
(position_stats, HOT-4).  Every optimizer kernel ends by copying each
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
# The C types, libc functions and helpers come with the layout, mxrec_ref._fast.pxd.
import numpy as np


cdef int64_t PADDING_KEY = -1
# Rows and pending indexes are tagged into int32 slots; this is the most
# either may reach.  2**31 keys would need > 200 GB anyway.
cdef int64_t INDEX_LIMIT = 2**31 - 3


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


cdef class FastCore:
    """Key history, row placement and row storage of one table (see module doc);
    its fields are declared in _fast.pxd, its kernels are the functions of the cext/_*.pxi files."""

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
        self.set_slot_initial_values(slot_init_values)
        self.clear()

    def set_slot_initial_values(self, slot_init_values):
        """The slots' initial values of rows created from now on (one float or None per slot, as for
        the constructor): a store's ``set_optimizer`` with other hyper-parameters (INIT-5)."""
        cdef Py_ssize_t i
        if len(slot_init_values) != self.n_slot_arrays:
            raise ValueError(f"set_slot_initial_values: {len(slot_init_values)} values for {self.n_slot_arrays} slots")
        for i, value in enumerate(slot_init_values):
            self.slot_has_init[i] = value is not None
            self.slot_init[i] = <float>float(np.float32(0.0 if value is None else value))

    def __dealloc__(self):
        _release_all(self)
        free(self.slot_buffers)
        free(self.slot_init)
        free(self.slot_has_init)

    def clear(self):
        """Forget everything and release the memory (import starts here)."""
        _release_all(self)
        _reserve(&self.slot_buffer, MIN_SLOTS * sizeof(int32_t))
        self.slots = <int32_t*>self.slot_buffer.data
        memset(self.slots, 0xFF, MIN_SLOTS * sizeof(int32_t))  # all EMPTY (-1)
        self.slot_mask = MIN_SLOTS - 1
        self.n_pending = self.pending_capacity = self.pending_high = 0
        self.n_free = self.free_high = self.next_row = self.n_admitted = 0
        self.row_capacity = self.populated_to = 0
        self.entries_epoch += 1

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

    @property
    def hot_epoch(self):
        """Changes whenever the hot map does (set_hot, a hot key losing its row, clear): hot indexes
        probed while it had one value are valid while it keeps it (the key pipeline's hints)."""
        return self.hot_epoch

    @property
    def hot_size(self):
        """Keys in the hot set now (HOT-4)."""
        return self.hot_live


cdef void _release_all(FastCore core) noexcept:
    cdef Py_ssize_t s
    _release(&core.slot_buffer)
    _release(&core.pending_buffer)
    _release(&core.free_buffer)
    _release(&core.scratch_buffer)
    _release(&core.row_entry_buffer)
    _release(&core.live_buffer)
    _release(&core.value_buffer)
    _release_hot(core)
    if core.slot_buffers != NULL:
        for s in range(core.n_slot_arrays):
            _release(&core.slot_buffers[s])
    core.slots = NULL
    core.pending = NULL
    core.free_rows = NULL
    core.row_entries = NULL
    core.row_live = NULL


# The kernels, one file per spec family (see "Files" above).
include "_map.pxi"
include "_expansion.pxi"
include "_lookup.pxi"
include "_admission.pxi"
include "_hot.pxi"
include "_optimizers.pxi"
include "_eviction.pxi"
include "_tiers.pxi"
include "_checkpoint.pxi"
include "_initializers.pxi"
