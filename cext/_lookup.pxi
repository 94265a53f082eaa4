# Lookup (spec/lookup.md): batch dedup, gathers and the per-position counts.
# Twin of mxrec_ref/ref/lookup.py and mxrec_ref/fast/lookup.py: dedup (LKP-2, LKP-6), gather
# (LKP-3, LKP-4, LKP-5, ADM-5), locate and gather_rows (the same lookup in two phases: the rows
# found, then read late by handle), position_stats (STAT-3, HOT-4), row_handles (EXP-5).
# Included into _fast.pyx; the core's layout is mxrec_ref._fast.pxd.


def dedup(FastCore core not None, const int64_t[::1] keys, weights):
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
    _reserve(&core.scratch_buffer, size * sizeof(int32_t))
    unique = np.empty(n, dtype=np.int64)
    inverse = np.empty(n, dtype=np.int64)
    occurrences = np.empty(n, dtype=np.int64)
    u_view, i_view, o_view = unique, inverse, occurrences
    if n:
        with nogil:
            n_unique = _dedup(&keys[0], weight_data, n, <int32_t*>core.scratch_buffer.data,
                              size - 1, &u_view[0], &i_view[0], &o_view[0])
    return unique[:n_unique].copy(), inverse, occurrences[:n_unique].copy()


def _py_lookup_eval(FastCore core not None, const int64_t[::1] unique, Py_ssize_t total, default_row, hot_index=None):
    """gather's (rows, admitted) with the hot indexes given (from _py_hot_index_of) instead of
    probed, checked against the hot set: for tests."""
    return _lookup_eval(core, unique, total, default_row, _hot_pointer(core, hot_index, unique.shape[0]), NULL)


def gather(FastCore core not None, const int64_t[::1] unique, Py_ssize_t total, default_row):
    """An evaluation lookup's (rows padded to ``total``, admitted, each key's hot index or None
    without a hot set); changes nothing (LKP-5).  A key holding a row gets its stored values
    (LKP-3), the others and the padding the default row (ADM-5, LKP-4); hot keys skip the main
    map and are answered from the hot block (HOT-3), their hot index probed chunk by chunk."""
    cdef Py_ssize_t n = unique.shape[0]
    cdef int32_t[::1] h_view
    if core.hot_live == 0 or n == 0:
        return _lookup_eval(core, unique, total, default_row, NULL, NULL) + (None,)
    hot_index = np.empty(n, dtype=np.int32)
    h_view = hot_index
    return _lookup_eval(core, unique, total, default_row, NULL, &h_view[0]) + (hot_index,)


def locate(FastCore core not None, const int64_t[::1] unique, Py_ssize_t total):
    """An evaluation lookup's keys resolved, no row read and nothing changed (LKP-5): (each key's
    row handle, EMPTY without a row and for the padding up to ``total``; admitted, likewise padded;
    each key's hot index or None without a hot set).  Hot keys are found through the hot map
    (HOT-3), the others through the main map, chunk by chunk; gather_rows reads the rows."""
    cdef Py_ssize_t n = unique.shape[0], start = 0, stop, u
    cdef int32_t* hot_out = NULL
    cdef int32_t[::1] h_view
    total = max(total, n)
    handles = np.full(total, EMPTY, dtype=np.int64)
    admitted = np.zeros(total, dtype=np.uint8)
    cdef int64_t[::1] t_view = handles
    cdef uint8_t[::1] a_view = admitted
    hot_index = None
    if core.hot_live != 0 and n != 0:
        hot_index = np.empty(n, dtype=np.int32)
        h_view = hot_index
        hot_out = &h_view[0]
    with nogil:
        while start < n:  # in chunks, as the training lookup's plan
            stop = min(start + CHUNK, n)
            if hot_out != NULL:
                _find_many_hot(core, &unique[start], stop - start, NULL, &t_view[start], hot_out + start)
            else:
                _find_many(core, &unique[start], stop - start, &t_view[start])
            start = stop
        for u in range(n):
            if t_view[u] >= 0:
                a_view[u] = 1
            else:  # pending keys' tags are below EMPTY: they hold no row
                t_view[u] = EMPTY
    return handles, admitted.view(np.bool_), hot_index


def gather_rows(FastCore core not None, const int64_t[::1] handles, Py_ssize_t total, default_row):
    """The rows of a resolved lookup, read now by the ``handles`` its resolve made (locate or
    commit_train), so they show every update since (LKP-3): row ``handles[u]`` where it is not
    EMPTY, the default row for EMPTY and for the padding up to ``total`` (ADM-5, LKP-4).  A hot
    key's row equals its block copy (HOT-3, write-through): it is read from the row.  Changes
    nothing; every handle must name a row holding a key (checked first), else ValueError.  One
    pass without the GIL."""
    cdef Py_ssize_t n = handles.shape[0], u, bad = -1
    cdef int64_t h
    cdef int dim = core.dim
    total = max(total, n)
    out, _, fill = _lookup_outputs(core, total, default_row)
    cdef float[:, ::1] out_view = out
    cdef const float[::1] fill_view = fill
    if total == 0:
        return out
    with nogil:
        for u in range(total):  # the check in the same pass: a bad handle leaves only ``out`` half written
            if u + AHEAD < n and 0 <= handles[u + AHEAD] < core.next_row:
                fast_prefetch(_value_row(core, handles[u + AHEAD]))
                fast_prefetch(&core.row_live[handles[u + AHEAD]])
            h = handles[u] if u < n else EMPTY
            if h == EMPTY:
                memcpy(&out_view[u, 0], &fill_view[0], dim * sizeof(float))
            elif 0 <= h < core.next_row and core.row_live[h]:
                memcpy(&out_view[u, 0], _value_row(core, h), dim * sizeof(float))
            else:
                bad = u
                break
    if bad >= 0:
        raise ValueError(f"gather_rows: handle {handles[bad]} at {bad} names no row holding a key")
    return out


cdef tuple _lookup_eval(FastCore core, const int64_t[::1] unique, Py_ssize_t total, default_row,
                        const int32_t* hot_in, int32_t* hot_out):
    cdef Py_ssize_t n = unique.shape[0], start = 0, stop
    cdef const int32_t* hot
    tags = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] t_view = tags
    out, admitted, fill = _lookup_outputs(core, total, default_row)
    cdef float[:, ::1] out_view = out
    cdef uint8_t[::1] a_view = admitted
    cdef const float[::1] fill_view = fill
    with nogil:
        while start < n:  # in chunks, so the keys just found are still in L1
            stop = min(start + CHUNK, n)
            if hot_in != NULL or hot_out != NULL:
                _find_many_hot(core, &unique[start], stop - start, hot_in + start if hot_in != NULL else NULL,
                               &t_view[start], hot_out + start if hot_out != NULL else NULL)
                hot = hot_in + start if hot_in != NULL else hot_out + start
                _gather_hot(core, &t_view[start], hot, stop - start, &fill_view[0],
                            &out_view[start, 0], &a_view[start])
            else:
                _find_many(core, &unique[start], stop - start, &t_view[start])
                _gather(core, &t_view[start], stop - start, stop - start, &fill_view[0],
                        &out_view[start, 0], &a_view[start])
            start = stop
        if total > n:  # padding past the unique keys
            _gather(core, NULL, 0, total - n, &fill_view[0], &out_view[n, 0], &a_view[n])
    return out, admitted.view(np.bool_)


cdef tuple _lookup_outputs(FastCore core, Py_ssize_t total, default_row):
    out = np.empty((total, core.dim), dtype=np.float32)
    admitted = np.zeros(total, dtype=np.uint8)
    fill = np.ascontiguousarray(default_row, dtype=np.float32)
    if fill.shape != (core.dim,):
        raise ValueError(f"default row must have {core.dim} values")
    return out, admitted, fill


cdef void _gather(FastCore core, const int64_t* tags, Py_ssize_t n, Py_ssize_t total, const float* fill,
                  float* out, uint8_t* admitted) noexcept nogil:
    """out[u] = the row of tags[u] and admitted[u] = 1 for keys holding a
    row; ``fill`` (the default row) elsewhere and for u in [n, total)."""
    cdef Py_ssize_t u
    cdef int dim = core.dim
    for u in range(total):
        if u + AHEAD < n and tags[u + AHEAD] >= 0:
            fast_prefetch(_value_row(core, tags[u + AHEAD]))
        if u < n and tags[u] >= 0:
            admitted[u] = 1
            memcpy(out + u * dim, _value_row(core, tags[u]), dim * sizeof(float))
        else:
            memcpy(out + u * dim, fill, dim * sizeof(float))


cdef void _gather_hot(FastCore core, const int64_t* tags, const int32_t* hot, Py_ssize_t n, const float* fill,
                      float* out, uint8_t* admitted) noexcept nogil:
    """_gather for n keys, hot ones (hot[u] != EMPTY, tags[u] their row)
    copied from the block."""
    cdef Py_ssize_t u
    cdef int dim = core.dim
    for u in range(n):
        if u + AHEAD < n:
            if hot[u + AHEAD] != EMPTY:
                fast_prefetch(core.hot_values + hot[u + AHEAD] * dim)
            elif tags[u + AHEAD] >= 0:
                fast_prefetch(_value_row(core, tags[u + AHEAD]))
        if hot[u] != EMPTY:
            admitted[u] = 1
            memcpy(out + u * dim, core.hot_values + hot[u] * dim, dim * sizeof(float))
        elif tags[u] >= 0:
            admitted[u] = 1
            memcpy(out + u * dim, _value_row(core, tags[u]), dim * sizeof(float))
        else:
            memcpy(out + u * dim, fill, dim * sizeof(float))


def position_stats(FastCore core not None, const int64_t[::1] keys, const int64_t[::1] inverse, admitted,
                   hot_index):
    """(padding positions, positions whose key holds a row, positions whose key is hot) of a
    lookup (STAT-3, HOT-4); ``hot_index``: each unique key's hot index from gather or plan_train,
    or None (no key is hot).  The core does not read its own state: counting is per position."""
    cdef const uint8_t[::1] a_view = admitted.view(np.uint8)
    cdef const int32_t[::1] h_view
    cdef Py_ssize_t n = keys.shape[0], p, padding = 0, with_row = 0, hot = 0
    if hot_index is None:
        with nogil:
            for p in range(n):
                padding += keys[p] == PADDING_KEY
                with_row += a_view[inverse[p]]
        return padding, with_row, 0
    h_view = hot_index
    with nogil:
        for p in range(n):
            padding += keys[p] == PADDING_KEY
            with_row += a_view[inverse[p]]
            hot += h_view[inverse[p]] != EMPTY
    return padding, with_row, hot


def row_handles(FastCore core not None, const int64_t[::1] keys):
    """Each key's row, -1 where it holds none."""
    cdef Py_ssize_t n = keys.shape[0], p
    out = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] o_view = out
    if n == 0:
        return out
    with nogil:
        _find_many(core, &keys[0], n, &o_view[0])
        for p in range(n):
            if o_view[p] < 0:
                o_view[p] = EMPTY
    return out


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
