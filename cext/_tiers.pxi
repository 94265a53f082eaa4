# Tier moves (spec/tiers.md, CON-10): rows leaving for and coming back from another tier, and
# the SSD tier's record checksums.
# Twin of mxrec_ref/ref/tiers.py and mxrec_ref/fast/tiers.py: put_rows (EXP-4), entries_of.
# Included into _fast.pyx; the core's layout is mxrec_ref._fast.pxd.


def entries_of(FastCore core not None, const int64_t[::1] keys):
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
        _find_many(core, &keys[0], n, &t_view[0])
    if np.any(tags < 0):
        raise KeyError(f"entries_of: key {int(np.asarray(keys)[np.flatnonzero(tags < 0)[0]])} holds no row")
    with nogil:
        for i in range(n):
            entry = &core.row_entries[t_view[i]]
            c_view[i] = entry.count
            s_view[i] = entry.last_seen
    return counts, last_seen


def put_rows(FastCore core not None, const int64_t[::1] keys, const int64_t[::1] counts, const int64_t[::1] last_seen,
             values, slot_arrays, Py_ssize_t capacity):
    """Insert ``keys`` (distinct, holding no row and not pending) as
    admitted keys with the given entries, values and slot values: a row
    coming back from another storage tier.  Rows are handed out as for
    new keys (EXP-4), in the given order."""
    cdef Py_ssize_t n = keys.shape[0], i, s
    cdef Py_ssize_t fresh = max(0, n - core.n_free)
    cdef int32_t row
    cdef const float[:, ::1] source
    cdef Entry* entry
    if n == 0:
        return
    for i in range(n):
        if _find(core, keys[i]) != EMPTY:
            raise KeyError(f"put_rows: key {keys[i]} is already in the history")
    arrays = [np.ascontiguousarray(a, dtype=np.float32).reshape(n, core.dim)
              for a in [values] + list(slot_arrays)]
    _reserve_history(core, n, 0)
    ensure_rows(core, core.next_row + fresh, capacity)
    _populate_rows(core, core.next_row, fresh)
    rows = np.empty(n, dtype=np.int64)
    for i in range(n):
        row = take_row(core)
        rows[i] = row
        entry = &core.row_entries[row]
        entry.key = keys[i]
        entry.count = counts[i]
        entry.last_seen = last_seen[i]
        core.row_live[row] = 1
        core.n_admitted += 1
        _link(core, keys[i], row)
    for s, array in enumerate(arrays):
        source = array
        for i in range(n):
            memcpy(_value_row(core, rows[i]) if s == 0 else _slot_row(core, s - 1, rows[i]),
                   &source[i, 0], core.dim * sizeof(float))


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
