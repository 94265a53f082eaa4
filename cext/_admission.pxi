# Admission (spec/admission.md): a training lookup planned, then committed.
# Twin of mxrec_ref/ref/admission.py and mxrec_ref/fast/admission.py: plan_train (ADM-1, ADM-2,
# ADM-3, ADM-6, ADM-7), commit_train (ADM-4, EXP-1, EXP-4, INIT-1, INIT-5, EVI-4).
# Included into _fast.pyx; the core's layout is mxrec_ref._fast.pxd.


cdef class TrainPlan:
    """What a training lookup will do, worked out by plan_train without changing anything, checked
    by the store, then applied by commit_train (CON-4).  It belongs to the core that made it and is
    applied at most once, before any other change of the core: the tags it holds name the core's
    entries as they were when it was made."""
    cdef FastCore core
    cdef readonly object unique        # int64 [n] the lookup's unique keys
    cdef readonly object tags          # int64 [n] each key's tagged index (EMPTY: new to the history)
    cdef readonly object new_counts    # int64 [n] each key's count after the lookup (0 for padding)
    cdef readonly object admit         # int64 [k] positions in ``unique`` of the keys to admit, in order
    cdef readonly Py_ssize_t n_new     # keys new to the history
    cdef readonly object hot_index     # int32 [n] each key's hot index, or None without a hot set
    cdef bint committed
    cdef int64_t entries_epoch, hot_epoch, coefficient, threshold   # what the plan read (plan_train_again)


def _py_plan_train(FastCore core not None, const int64_t[::1] unique, const int64_t[::1] occurrences,
                   int64_t coefficient, int64_t threshold, hot_index=None):
    """plan_train with the hot indexes given (from _py_hot_index_of, nothing changed since)
    instead of probed: for tests."""
    return _plan_train(core, unique, occurrences, coefficient, threshold,
                       _hot_pointer(core, hot_index, unique.shape[0]), NULL, hot_index, NULL)


def plan_train(FastCore core not None, const int64_t[::1] unique, const int64_t[::1] occurrences,
               int64_t coefficient, int64_t threshold):
    """The TrainPlan of a training lookup of ``unique`` (with ``occurrences`` accesses each),
    changing nothing.  The padding key is skipped (ADM-6); each key's count grows by coefficient x
    occurrences (ADM-1), saturating (ADM-7); a new or pending key whose count reaches the threshold
    is admitted (ADM-2); admitted keys keep counting (ADM-3).  Each key's hot index is probed chunk
    by chunk on the way (None without a hot set): hot keys skip the main map."""
    cdef Py_ssize_t n = unique.shape[0]
    cdef int32_t[::1] h_view
    if core.hot_live == 0 or n == 0:
        return _plan_train(core, unique, occurrences, coefficient, threshold, NULL, NULL, None, NULL)
    hot_index = np.empty(n, dtype=np.int32)
    h_view = hot_index
    return _plan_train(core, unique, occurrences, coefficient, threshold, NULL, &h_view[0], hot_index, NULL)


def plan_train_hinted(FastCore core not None, const int64_t[::1] unique, const int64_t[::1] occurrences,
                      int64_t coefficient, int64_t threshold, const int64_t[::1] hints, hot_hints=None,
                      int64_t hot_epoch=-1):
    """plan_train, given ``hints``: the tags an earlier probe of the same keys found (the key
    pipeline's prepare, PIPE-3).  A hint that is a live row still holding its key is that key's tag
    -- one key has one row -- so only the other keys are probed: the plan is plan_train's whatever
    the hints say (a hot key's hint is its row as well).  With a hot set each key's hot index is
    ``hot_hints`` (int32, that probe's) when the hot map has not changed since (``hot_epoch`` is the
    core's), else probed here (the hot map is small)."""
    cdef Py_ssize_t n = unique.shape[0]
    cdef int32_t[::1] h_view
    if n == 0 or hints.shape[0] != n:
        return plan_train(core, unique, occurrences, coefficient, threshold)
    if core.hot_live == 0:
        return _plan_train(core, unique, occurrences, coefficient, threshold, NULL, NULL, None, &hints[0])
    if hot_hints is not None and hot_epoch == core.hot_epoch and len(hot_hints) == n:
        return _plan_train(core, unique, occurrences, coefficient, threshold,
                           _hot_pointer(core, hot_hints, n), NULL, hot_hints, &hints[0])
    hot_index = np.empty(n, dtype=np.int32)
    h_view = hot_index
    return _plan_train(core, unique, occurrences, coefficient, threshold, NULL, &h_view[0], hot_index, &hints[0])


cdef TrainPlan _plan_train(FastCore core, const int64_t[::1] unique, const int64_t[::1] occurrences,
                           int64_t coefficient, int64_t threshold, const int32_t* hot_in, int32_t* hot_out,
                           hot_index, const int64_t* hints):
    """plan_train; hot keys are resolved through the hot block when
    ``hot_in`` (known hot indexes) or ``hot_out`` (probe, and write them
    there) is given; ``hot_index`` is the array behind either, or None.
    ``hints``: earlier tags, kept where still a live row of the key, probed
    otherwise (plan_train_hinted); the hot indexes then come from ``hot_in``
    or are probed into ``hot_out``, as without hints."""
    cdef Py_ssize_t n = unique.shape[0], start = 0, stop, u, n_admit = 0, n_new = 0
    cdef int64_t count, tag
    tags = np.empty(n, dtype=np.int64)
    new_counts = np.zeros(n, dtype=np.int64)
    admit = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] t_view = tags, c_view = new_counts, a_view = admit
    with nogil:
        while start < n:  # in chunks, so the entries just found are still in L1
            stop = min(start + CHUNK, n)
            if hints != NULL:
                if hot_out != NULL:    # the hot indexes (a hot key's hint is its row too: one key, one row)
                    _hot_find_many(core, &unique[start], stop - start, hot_out + start)
                for u in range(start, stop):
                    if u + AHEAD < stop and 0 <= hints[u + AHEAD] < core.next_row:
                        fast_prefetch(&core.row_entries[hints[u + AHEAD]])
                    tag = hints[u]
                    if not (0 <= tag < core.next_row and core.row_live[tag] and core.row_entries[tag].key == unique[u]):
                        tag = _find(core, unique[u])
                    t_view[u] = tag
            elif hot_in != NULL:
                _find_many_hot(core, &unique[start], stop - start, hot_in + start, &t_view[start], NULL, True)
            elif hot_out != NULL:
                _find_many_hot(core, &unique[start], stop - start, NULL, &t_view[start], hot_out + start, True)
            else:
                _find_many(core, &unique[start], stop - start, &t_view[start])
            for u in range(start, stop):
                if unique[u] == PADDING_KEY:
                    continue
                tag = t_view[u]
                count = fast_count_update(_entry(core, tag).count if tag != EMPTY else 0,
                                          coefficient, occurrences[u])
                c_view[u] = count
                if tag == EMPTY:
                    n_new += 1
                if tag < 0 and count >= threshold:   # new or pending, and due
                    a_view[n_admit] = u
                    n_admit += 1
            start = stop
    cdef TrainPlan plan = TrainPlan.__new__(TrainPlan)
    plan.core = core
    plan.unique = np.asarray(unique)
    plan.tags = tags
    plan.new_counts = new_counts
    plan.admit = admit[:n_admit].copy()
    plan.n_new = n_new
    plan.hot_index = hot_index
    plan.committed = False
    plan.entries_epoch, plan.hot_epoch = core.entries_epoch, core.hot_epoch
    plan.coefficient, plan.threshold = coefficient, threshold
    return plan


def plan_train_again(FastCore core not None, TrainPlan earlier not None, const int64_t[::1] unique,
                     const int64_t[::1] occurrences, int64_t coefficient, int64_t threshold):
    """The plan of a training lookup of the keys ``earlier`` planned (the key pipeline's prepare,
    PIPE-3; ``unique`` and ``occurrences`` are the ones it planned): ``earlier`` itself while nothing it
    read has changed -- the core's history (its entries epoch) and hot map (hot epoch), the
    coefficient and the threshold -- so the step reads no entry; else planned again with its tags and
    hot indexes as hints (plan_train_hinted)."""
    if (earlier.core is core and not earlier.committed and earlier.entries_epoch == core.entries_epoch
            and earlier.hot_epoch == core.hot_epoch and earlier.coefficient == coefficient
            and earlier.threshold == threshold and len(earlier.unique) == unique.shape[0]):
        return earlier
    return plan_train_hinted(core, unique, occurrences, coefficient, threshold, earlier.tags, earlier.hot_index,
                             earlier.hot_epoch)


def commit_train(FastCore core not None, TrainPlan plan not None, int64_t clock, init_rows, Py_ssize_t capacity,
                 Py_ssize_t total):
    """Apply ``plan`` (made by plan_train on this core, nothing changed since): count and
    time-stamp every key (the last-seen EVI-1 reads; a pending key is in the history without a
    row, ADM-4), add the new ones to the history, give each admitted key a row (EXP-1) in
    first-occurrence order (EXP-4) filled with ``init_rows`` (INIT-1) and the slots' initial
    values (INIT-5; nothing of a reused row's last key stays, EVI-4).  Every allocation happens
    before the first change.  Reads no row value: returns the lookup's (admitted, row handles),
    padded to ``total`` (EMPTY: no row, the padding too), as locate would after the commit;
    gather_rows reads the rows by those handles, and resolve_rows may reuse them."""
    if plan.core is not core or plan.committed:
        raise ValueError("commit_train: the plan belongs to another core or was committed already")
    core.entries_epoch += 1
    cdef const int64_t[::1] unique = plan.unique
    cdef const int64_t[::1] tags = plan.tags
    cdef const int64_t[::1] new_counts = plan.new_counts
    cdef const int64_t[::1] admit = plan.admit
    cdef Py_ssize_t n = unique.shape[0], n_admit = admit.shape[0]
    cdef Py_ssize_t fresh = max(0, n_admit - core.n_free)
    cdef const float[:, ::1] init
    cdef const float* init_data = NULL
    if n_admit:
        init = init_rows
        init_data = &init[0, 0]
    _reserve_history(core, plan.n_new, plan.n_new)
    ensure_rows(core, core.next_row + fresh, capacity)
    _populate_rows(core, core.next_row, fresh)
    total = max(total, n)
    admitted = np.zeros(total, dtype=np.uint8)
    handles = np.full(total, EMPTY, dtype=np.int64)
    cdef uint8_t[::1] a_view = admitted
    cdef int64_t[::1] h_view = handles
    plan.committed = True
    if n:
        with nogil:
            _commit(core, &unique[0], &tags[0], &new_counts[0], n, clock, &admit[0] if n_admit else NULL,
                    n_admit, init_data, &a_view[0], &h_view[0])
    return admitted.view(np.bool_), handles


cdef void _commit(FastCore core, const int64_t* unique, const int64_t* tags, const int64_t* new_counts,
                  Py_ssize_t n, int64_t clock, const int64_t* admit, Py_ssize_t n_admit,
                  const float* init, uint8_t* admitted, int64_t* handles) noexcept nogil:
    """One pass over the unique keys: count and time-stamp each, admit the
    next key due when it comes up (admit[] is in unique order, so rows go
    out in first-occurrence order, EXP-4), then note its row handle."""
    cdef Py_ssize_t u, j = 0
    cdef int dim = core.dim
    cdef int64_t key, tag
    cdef int32_t row
    cdef Entry* entry
    cdef bint pending_moved = False
    for u in range(n):
        if u + 2 * AHEAD < n and tags[u + 2 * AHEAD] != EMPTY:
            fast_prefetch(_entry(core, tags[u + 2 * AHEAD]))
        key = unique[u]
        tag = tags[u]
        if key != PADDING_KEY:
            if tag < EMPTY and pending_moved:
                # pending: an admission earlier in this pass may have moved it
                tag = _find(core, key)
            if j < n_admit and admit[j] == u:
                row = take_row(core)
                entry = &core.row_entries[row]
                entry.key = key
                core.row_live[row] = 1
                core.n_admitted += 1
                if tag == EMPTY:
                    _link(core, key, row)
                else:  # pending -> admitted: the slot now names the row
                    core.slots[_slot_of(core, key)] = row
                    _drop_pending(core, _pending_index(tag))
                    pending_moved = True
                fill_row(core, row, init + j * dim)
                j += 1
                tag = row
            elif tag == EMPTY:
                tag = _add_pending(core, key, 0, 0)
            entry = _entry(core, tag)
            entry.count = new_counts[u]
            entry.last_seen = clock
        if tag >= 0:
            admitted[u] = 1
            handles[u] = tag
