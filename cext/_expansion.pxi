# Rows (spec/expansion.md): physical growth, placement and the fill of a new row.
# Twin of mxrec_ref/ref/expansion.py: take_row (EXP-4), ensure_rows, fill_row (INIT-1, INIT-5,
# EVI-4).  Each admitted key holds one row (EXP-1); capacity and its growth (EXP-2, EXP-3) are
# written once in mxrec_ref/contract.py.
# Included into _fast.pyx; the core's layout is mxrec_ref._fast.pxd.


cdef _reserve_free(FastCore core, Py_ssize_t total):
    cdef Py_ssize_t have = core.free_buffer.bytes // sizeof(int32_t)
    if total > have or core.free_rows == NULL:
        _reserve(&core.free_buffer, _grown(have, total, MIN_ENTRIES) * sizeof(int32_t))
        core.free_rows = <int32_t*>core.free_buffer.data


cdef ensure_rows(FastCore core, Py_ssize_t n_rows, Py_ssize_t capacity):
    """Rows [0, n_rows) exist (zero until written).  Grown by 1.5, capped
    by the table capacity, so a table declared with 10^9 rows costs
    nothing until keys arrive."""
    cdef Py_ssize_t new, s
    if n_rows <= core.row_capacity:
        return
    if n_rows > INDEX_LIMIT:
        raise MemoryError(f"mxrec_ref fast store: more than {INDEX_LIMIT} rows in one table")
    new = min(_grown(core.row_capacity, n_rows, MIN_ROWS), max(capacity, n_rows))
    _reserve(&core.row_entry_buffer, new * sizeof(Entry))
    _reserve(&core.live_buffer, new * sizeof(uint8_t))
    _reserve(&core.value_buffer, new * core.dim * sizeof(float))
    for s in range(core.n_slot_arrays):
        _reserve(&core.slot_buffers[s], new * core.dim * sizeof(float))
    core.row_entries = <Entry*>core.row_entry_buffer.data
    core.row_live = <uint8_t*>core.live_buffer.data
    core.row_capacity = new


cdef void _populate_rows(FastCore core, Py_ssize_t first, Py_ssize_t n) noexcept:
    """Fault in the never-used rows [first, first + n) about to be written, those not faulted in
    already (prefault_rows may have done it ahead)."""
    cdef Py_ssize_t s, stop = first + n
    first = max(first, core.populated_to)
    if stop <= first:
        return
    n = stop - first
    with nogil:
        fast_buffer_populate(&core.row_entries[first], n * sizeof(Entry))
        fast_buffer_populate(&core.row_live[first], n * sizeof(uint8_t))
        fast_buffer_populate(_value_row(core, first), n * core.dim * sizeof(float))
        for s in range(core.n_slot_arrays):
            fast_buffer_populate(_slot_row(core, s, first), n * core.dim * sizeof(float))
    core.populated_to = stop


def prefault_rows(FastCore core not None, Py_ssize_t n_rows):
    """Fault in the pages of the next ``n_rows`` rows a lookup would take (after the free ones),
    within the rows already reserved: memory only -- memory_bytes counts rows handed out, and
    nothing else a store shows changes -- so the key pipeline's prepare does it ahead (PIPE-1) and
    the lookup that takes them pays no page faults."""
    cdef Py_ssize_t fresh = max(0, n_rows - core.n_free)
    _populate_rows(core, core.next_row, min(fresh, core.row_capacity - core.next_row))


cdef int32_t take_row(FastCore core) noexcept nogil:
    """The next row to hand out (EXP-4): the most recently freed, else
    the next never-used one (whose slots read zero: fresh pages)."""
    cdef int32_t row
    if core.n_free > 0:
        core.n_free -= 1
        return core.free_rows[core.n_free]
    row = <int32_t>core.next_row
    core.next_row += 1
    return row


cdef void fill_row(FastCore core, int32_t row, const float* init) noexcept nogil:
    """A new row's values and the optimizer slots' initial values."""
    cdef Py_ssize_t s, c
    cdef float* slot_row
    memcpy(_value_row(core, row), init, core.dim * sizeof(float))
    for s in range(core.n_slot_arrays):
        if core.slot_has_init[s]:
            slot_row = _slot_row(core, s, row)
            for c in range(core.dim):
                slot_row[c] = core.slot_init[s]
