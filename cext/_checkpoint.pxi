# Checkpoints (spec/checkpoint.md): the core's entries and rows out, and back in.
# Twin of mxrec_ref/ref/checkpoint.py and mxrec_ref/fast/checkpoint.py: export_entries and
# copy_rows (CON-6), reserve_rows, load_rows and load_entries (CKPT-2, CKPT-6).
# Included into _fast.pyx; the core's layout is mxrec_ref._fast.pxd.


def export_entries(FastCore core not None, bint admitted):
    """(keys ascending, counts, last_seen, rows) of the admitted keys, or of
    the pending keys (rows -1) when ``admitted`` is False; streamed in row order
    without a sort when that is key order."""
    cdef Py_ssize_t r, n = 0, k = 0
    cdef Entry* entry
    with nogil:
        if admitted:
            for r in range(core.next_row):
                n += core.row_live[r]
        else:
            n = core.n_pending
    keys = np.empty(n, dtype=np.int64)
    counts = np.empty(n, dtype=np.int64)
    last_seen = np.empty(n, dtype=np.int64)
    rows = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] k_view = keys, c_view = counts, s_view = last_seen, r_view = rows
    with nogil:
        for r in range(core.next_row if admitted else core.n_pending):
            if admitted and not core.row_live[r]:
                continue
            entry = &core.row_entries[r] if admitted else &core.pending[r]
            k_view[k] = entry.key
            c_view[k] = entry.count
            s_view[k] = entry.last_seen
            r_view[k] = r if admitted else EMPTY
            k += 1
    cdef bint ascending = True
    with nogil:   # rows in key order already (after a load, CKPT-6, until new keys come): no sort
        for r in range(1, n):
            if k_view[r] <= k_view[r - 1]:
                ascending = False
                break
    if ascending:
        return keys, counts, last_seen, rows
    order = np.argsort(keys)  # keys are distinct: any sort gives the same order
    return keys[order], counts[order], last_seen[order], rows[order]


def copy_rows(FastCore core not None, const int64_t[::1] rows, Py_ssize_t slot):
    """A new float32 [len(rows), dim] array of the given rows' values
    (``slot`` -1) or of optimizer slot ``slot``."""
    cdef Py_ssize_t n = rows.shape[0], j
    cdef int dim = core.dim
    cdef const float* source = _values(core) if slot < 0 else _slot_data(core, slot)
    out = np.empty((n, dim), dtype=np.float32)
    cdef float[:, ::1] o_view = out
    with nogil:
        for j in range(n):
            if j + AHEAD < n:
                fast_prefetch(source + rows[j + AHEAD] * dim)
            memcpy(&o_view[j, 0], source + rows[j] * dim, dim * sizeof(float))
    return out


def reserve_rows(FastCore core not None, Py_ssize_t n, Py_ssize_t capacity):
    """Import, first step: no key stays hot, and rows [0, n) exist (allocation only), so
    that load_rows (the values) and load_entries (the keys) touch disjoint memory and may
    run side by side on two threads."""
    _release_hot(core)
    ensure_rows(core, n, capacity)


def load_rows(FastCore core not None, Py_ssize_t capacity, values, slot_arrays):
    """Import: rows [0, n) take ``values`` and ``slot_arrays`` (float32
    [n, dim] each, in slot order) and count as handed out (CKPT-6); the
    keys come with load_entries."""
    cdef Py_ssize_t n = len(values), s
    cdef size_t n_bytes = n * core.dim * sizeof(float)
    cdef const float[:, ::1] source
    cdef float* target
    _release_hot(core)   # an import replaces every row: no key stays hot
    core.entries_epoch += 1
    ensure_rows(core, n, capacity)
    for s, array in enumerate([values] + list(slot_arrays)):
        source = np.ascontiguousarray(array, dtype=np.float32).reshape(n, core.dim)
        if n:
            target = _values(core) if s == 0 else _slot_data(core, s - 1)
            with nogil:   # fault the fresh rows in with one call, not one page fault per page
                fast_buffer_populate(target, n_bytes)
                memcpy(target, &source[0, 0], n_bytes)
    core.next_row = n
    core.populated_to = max(core.populated_to, n)


def load_entries(FastCore core not None, const int64_t[::1] keys, const int64_t[::1] counts,
                 const int64_t[::1] last_seen, bint with_rows):
    """Import: insert or overwrite history keys, as the reference's
    dictionaries do.  With ``with_rows`` key i takes row i (a repeated key
    keeps its last row; the earlier one is orphaned, as in the reference);
    otherwise the key is pending unless it already holds a row."""
    cdef Py_ssize_t n = keys.shape[0], i
    cdef int32_t tag
    cdef Entry* entry
    _release_hot(core)   # an import replaces every row: no key stays hot
    core.entries_epoch += 1
    _reserve_history(core, n, 0 if with_rows else n)
    with nogil:
        if with_rows and n:   # fresh entries: faulted in with one call each (load_rows made room)
            fast_buffer_populate(core.row_entries, n * sizeof(Entry))
            fast_buffer_populate(core.row_live, n * sizeof(uint8_t))
        for i in range(n):
            # the slots of keys AHEAD on are fetched while this one probes: consecutive keys
            # hash to unrelated slots, so every probe of a large map would otherwise wait on memory
            if i + AHEAD < n:
                fast_prefetch(&core.slots[_home(keys[i + AHEAD], core.slot_mask)])
            tag = _find(core, keys[i])
            if with_rows:
                entry = &core.row_entries[i]
                entry.key = keys[i]
                core.row_live[i] = 1
                if tag == EMPTY:
                    _link(core, keys[i], <int32_t>i)
                    core.n_admitted += 1
                else:  # repeated key (rows are loaded before pending keys)
                    core.row_live[tag] = 0
                    core.slots[_slot_of(core, keys[i])] = <int32_t>i
            elif tag == EMPTY:
                tag = _add_pending(core, keys[i], 0, 0)
                entry = _entry(core, tag)
            else:
                entry = _entry(core, tag)
            entry.count = counts[i]
            entry.last_seen = last_seen[i]
