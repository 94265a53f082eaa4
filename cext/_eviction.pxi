# Eviction (spec/eviction.md): the expired keys and their removal.
# Twin of mxrec_ref/ref/eviction.py and mxrec_ref/fast/eviction.py: expired_keys (EVI-1, EVI-3),
# remove_keys (EVI-2, EVI-3, HOT-2).
# Included into _fast.pyx; the core's layout is mxrec_ref._fast.pxd.


def expired_keys(FastCore core not None, int64_t cutoff):
    """Sorted keys with last_seen <= cutoff (= now - eviction_threshold,
    which cannot overflow: now >= -2**62 and threshold <= 2**62)."""
    cdef Py_ssize_t r, p, n = 0, k = 0
    with nogil:
        for r in range(core.next_row):
            if core.row_live[r] and core.row_entries[r].last_seen <= cutoff:
                n += 1
        for p in range(core.n_pending):
            n += core.pending[p].last_seen <= cutoff
    out = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] o_view = out
    with nogil:
        for r in range(core.next_row):
            if core.row_live[r] and core.row_entries[r].last_seen <= cutoff:
                o_view[k] = core.row_entries[r].key
                k += 1
        for p in range(core.n_pending):
            if core.pending[p].last_seen <= cutoff:
                o_view[k] = core.pending[p].key
                k += 1
    out.sort()
    return out


def remove_keys(FastCore core not None, const int64_t[::1] keys):
    """Drop ``keys`` (distinct) in the given order; their rows go on the
    free stack in that order (EVI-3).  Returns (admitted removed, pending
    removed)."""
    cdef Py_ssize_t n = keys.shape[0], i, admitted = 0, pending = 0
    cdef int32_t tag
    _reserve_free(core, core.n_free + min(n, core.n_admitted))
    core.entries_epoch += 1
    with nogil:
        for i in range(n):
            tag = _find(core, keys[i])
            if tag == EMPTY:
                continue
            _unlink(core, keys[i])
            if tag >= 0:
                _hot_leave(core, keys[i])   # a hot key that loses its row leaves the set (HOT-2)
                core.row_live[tag] = 0
                core.free_rows[core.n_free] = tag
                core.n_free += 1
                core.free_high = max(core.free_high, core.n_free)
                core.n_admitted -= 1
                admitted += 1
            else:
                _drop_pending(core, _pending_index(tag))
                pending += 1
    return admitted, pending
