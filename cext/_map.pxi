# The key history: the open-addressing hash map (slot -> tagged index) and the pending pool.
# Not a rule family: the structure every family finds keys in (see "Layout" in _fast.pyx).
# Included into _fast.pyx; the core's layout is mxrec_ref._fast.pxd.


cdef inline int32_t _find_from(FastCore core, int64_t key, uint64_t i) noexcept nogil:
    """Tagged index of ``key`` probing from slot ``i`` (its home), or
    EMPTY.  The map always has a free slot, so the probe ends."""
    cdef int32_t tag
    while True:
        tag = core.slots[i]
        if tag == EMPTY or _entry(core, tag).key == key:
            return tag
        i = (i + 1) & core.slot_mask


cdef inline int32_t _find(FastCore core, int64_t key) noexcept nogil:
    return _find_from(core, key, _home(key, core.slot_mask))


cdef void _find_many(FastCore core, const int64_t* keys, Py_ssize_t n, int64_t* out) noexcept nogil:
    """out[i] = tagged index of keys[i] or EMPTY.  A three-stage pipeline:
    key i + 2*AHEAD has its slot prefetched, key i + AHEAD its entry, key
    i is resolved (out[] holds the home slot in between)."""
    cdef Py_ssize_t i, j
    cdef int32_t tag
    for i in range(n + 2 * AHEAD):
        if i < n:
            out[i] = <int64_t>_home(keys[i], core.slot_mask)
            fast_prefetch(&core.slots[out[i]])
        j = i - AHEAD
        if 0 <= j < n:
            tag = core.slots[out[j]]
            if tag != EMPTY:
                fast_prefetch(_entry(core, tag))
        j = i - 2 * AHEAD
        if j >= 0:
            out[j] = _find_from(core, keys[j], <uint64_t>out[j])


cdef inline uint64_t _slot_of(FastCore core, int64_t key) noexcept nogil:
    """Slot holding ``key``, which must be in the map."""
    cdef uint64_t i = _home(key, core.slot_mask)
    while _entry(core, core.slots[i]).key != key:
        i = (i + 1) & core.slot_mask
    return i


cdef inline void _link(FastCore core, int64_t key, int32_t tag) noexcept nogil:
    """Map ``key`` (absent, its entry already written) to ``tag``."""
    cdef uint64_t i = _home(key, core.slot_mask)
    while core.slots[i] != EMPTY:
        i = (i + 1) & core.slot_mask
    core.slots[i] = tag


cdef void _unlink(FastCore core, int64_t key) noexcept nogil:
    """Remove ``key`` from the map by backward-shift deletion: later
    members of the probe run move up, so no tombstone is needed.  Entries
    must still be intact (homes are recomputed from their keys)."""
    cdef uint64_t mask = core.slot_mask
    cdef uint64_t hole = _slot_of(core, key)
    cdef uint64_t j = hole
    cdef uint64_t home
    cdef int32_t moved
    while True:
        j = (j + 1) & mask
        moved = core.slots[j]
        if moved == EMPTY:
            break
        home = _home(_entry(core, moved).key, mask)
        # ``moved`` may fill the hole only if its home is not in (hole, j]
        # cyclically; otherwise a probe from its home would stop at the hole.
        if ((j - home) & mask) >= ((j - hole) & mask):
            core.slots[hole] = moved
            hole = j
    core.slots[hole] = EMPTY


cdef void _drop_pending(FastCore core, Py_ssize_t p) noexcept nogil:
    """Free pending entry ``p`` (its key already unmapped or remapped):
    the last pending entry moves into the hole and its slot follows."""
    cdef Py_ssize_t last = core.n_pending - 1
    if p != last:
        core.pending[p] = core.pending[last]
        core.slots[_slot_of(core, core.pending[p].key)] = _pending_tag(p)
    core.n_pending -= 1


cdef int32_t _add_pending(FastCore core, int64_t key, int64_t count, int64_t last_seen) noexcept nogil:
    cdef Py_ssize_t p = core.n_pending
    core.n_pending += 1
    core.pending_high = max(core.pending_high, core.n_pending)
    core.pending[p].key = key
    core.pending[p].count = count
    core.pending[p].last_seen = last_seen
    _link(core, key, _pending_tag(p))
    return _pending_tag(p)


cdef _reserve_history(FastCore core, Py_ssize_t n_new, Py_ssize_t n_new_pending):
    """Room for ``n_new`` more history keys, ``n_new_pending`` of them
    possibly pending: a map at load <= 0.5 and the pending pool.
    Allocation only, nothing observable changes, so it runs before the
    last check of a call can fail."""
    cdef Py_ssize_t total = core.n_admitted + core.n_pending + n_new
    cdef Py_ssize_t size, capacity
    cdef Buffer fresh
    if total > INDEX_LIMIT or core.n_pending + n_new_pending > INDEX_LIMIT:
        raise MemoryError(f"mxrec_ref fast store: more than {INDEX_LIMIT} keys in one table's history")
    if core.n_pending + n_new_pending > core.pending_capacity:
        capacity = _grown(core.pending_capacity, core.n_pending + n_new_pending, MIN_ENTRIES)
        _reserve(&core.pending_buffer, capacity * sizeof(Entry))
        core.pending = <Entry*>core.pending_buffer.data
        core.pending_capacity = capacity
    size = _table_size(total)
    if size > <Py_ssize_t>(core.slot_mask + 1):
        fresh.data = NULL
        fresh.bytes = 0
        _reserve(&fresh, size * sizeof(int32_t))
        _release(&core.slot_buffer)
        core.slot_buffer = fresh
        core.slots = <int32_t*>fresh.data
        core.slot_mask = size - 1
        with nogil:
            _rehash(core)


cdef void _rehash(FastCore core) noexcept nogil:
    """Map every key again into the (new, empty) slot array.  Walks the
    entries in memory order -- live rows, then pending keys -- so only the
    slot writes are random."""
    cdef Py_ssize_t r, p
    fast_buffer_populate(core.slots, (core.slot_mask + 1) * sizeof(int32_t))
    memset(core.slots, 0xFF, (core.slot_mask + 1) * sizeof(int32_t))
    for r in range(core.next_row):
        if r + AHEAD < core.next_row:
            fast_prefetch(&core.slots[_home(core.row_entries[r + AHEAD].key, core.slot_mask)])
        if core.row_live[r]:
            _link(core, core.row_entries[r].key, <int32_t>r)
    for p in range(core.n_pending):
        _link(core, core.pending[p].key, _pending_tag(p))
