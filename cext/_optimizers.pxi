# Optimizers (spec/optimizers.md): row resolution, the update kernels and the overflow check.
# Twin of mxrec_ref/ref/optimizers.py and mxrec_ref/fast/optimizers.py: resolve_rows (OPT-2),
# sgd (OPT-4), adagrad, lazy_adam (OPT-5), ftrl_* (OPT-6), each checking its update first (OPT-3); float32 in the
# reference's order (OPT-7).
# Included into _fast.pyx; the core's layout is mxrec_ref._fast.pxd.


def resolve_rows(FastCore core not None, const int64_t[::1] keys, mask, handles=None):
    """(positions, rows) of the masked keys that hold a row now; resolved
    by key, so a key evicted since its lookup is dropped (OPT-2).  With
    ``handles`` (the rows commit_train gave the same keys), a handle is kept
    when its row is live and still holds its key -- then it is the key's row,
    one key having one row -- and only the other keys are probed (OPT-9)."""
    cdef const uint8_t[::1] m_view = np.ascontiguousarray(mask, dtype=np.bool_).view(np.uint8)
    cdef Py_ssize_t n = keys.shape[0], i, k = 0, start = 0, stop
    cdef const int64_t[::1] h_view
    cdef int64_t h, tag
    positions = np.empty(n, dtype=np.int64)
    rows = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] p_view = positions, r_view = rows
    if handles is not None:
        h_view = handles
        if h_view.shape[0] != n or m_view.shape[0] != n:
            raise ValueError("resolve_rows: keys, mask and handles differ in length")
        with nogil:
            for i in range(n):
                if not m_view[i]:
                    continue
                h = h_view[i]
                if not (0 <= h < core.next_row and core.row_live[h] and core.row_entries[h].key == keys[i]):
                    tag = _find(core, keys[i])   # stale: the row moved or went since the lookup
                    h = tag if tag >= 0 else EMPTY
                if h >= 0:
                    p_view[k] = i
                    r_view[k] = h
                    k += 1
        return positions[:k].copy(), rows[:k].copy()
    with nogil:
        while start < n:  # in chunks, so the keys just found are still in L1
            stop = min(start + CHUNK, n)
            if core.hot_live:   # hot keys skip the main map
                _find_many_hot(core, &keys[start], stop - start, NULL, &r_view[start], NULL)
            else:
                _find_many(core, &keys[start], stop - start, &r_view[start])  # compacted below (k <= i)
            for i in range(start, stop):
                if m_view[i] and r_view[i] >= 0:
                    p_view[k] = i
                    r_view[k] = r_view[i]
                    k += 1
            start = stop
    return positions[:k].copy(), rows[:k].copy()


cdef float* _slot_data(FastCore core, Py_ssize_t slot) except NULL:
    if not 0 <= slot < core.n_slot_arrays:
        raise IndexError(f"optimizer slot {slot} does not exist")
    if core.slot_buffers[slot].data == NULL:  # no rows yet: a valid pointer for empty loops
        ensure_rows(core, 1, 1)
    return <float*>core.slot_buffers[slot].data


cdef float* _values(FastCore core) except NULL:
    if core.value_buffer.data == NULL:
        ensure_rows(core, 1, 1)
    return <float*>core.value_buffer.data


cdef inline bint _nonfinite(float x) noexcept nogil:
    """NaN or Inf: x - x is 0 for every finite x and NaN otherwise (no fast-math: setup.py)."""
    return not (x - x == 0)


# Each update kernel runs in one of two modes over the same float32 operations (OPT-3, OPT-7):
# write=False writes nothing and returns the first j whose update would leave NaN or Inf in row
# rows[j]'s values or a slot (-1: none) -- fast/optimizers.first_nonfinite; write=True updates the rows
# and writes them through to the hot block (returns -1) -- apply_update, run only when the check found
# nothing.  The rows of one apply are distinct (one key, one row), so a row's update reads nothing
# another row's update writes and the check sees exactly what the update stores: no copy of the rows
# is kept to put back after an overflow.

def sgd(FastCore core not None, const int64_t[::1] rows, const int64_t[::1] positions, const float[:, ::1] grads,
        float lr, bint decay, float weight_decay, bint write):
    """g = g + wd * w (when decay); w = w - lr * g."""
    cdef Py_ssize_t k = rows.shape[0], bad
    cdef float* values = _values(core)
    with nogil:
        bad = _sgd(core, rows, positions, grads, lr, decay, weight_decay, values, write)
        if write and k:
            write_through(core, &rows[0], k)
    return bad


cdef Py_ssize_t _sgd(FastCore core, const int64_t[::1] rows, const int64_t[::1] positions, const float[:, ::1] grads,
                     float lr, bint decay, float weight_decay, float* values, bint write) noexcept nogil:
    cdef Py_ssize_t j, c, k = rows.shape[0]
    cdef int dim = core.dim
    cdef float* w
    cdef const float* g
    cdef float gc
    cdef bint bad
    for j in range(k):
        if j + AHEAD < k:
            fast_prefetch(values + rows[j + AHEAD] * dim)
        w = values + rows[j] * dim
        g = &grads[positions[j], 0]
        if write:
            for c in range(dim):
                gc = g[c]
                if decay:
                    gc = gc + weight_decay * w[c]
                w[c] = w[c] - lr * gc
            continue
        bad = False
        for c in range(dim):
            gc = g[c]
            if decay:
                gc = gc + weight_decay * w[c]
            bad |= _nonfinite(w[c] - lr * gc)
        if bad:
            return j
    return -1


def adagrad(FastCore core not None, const int64_t[::1] rows, const int64_t[::1] positions, const float[:, ::1] grads,
            float lr, Py_ssize_t accumulator, bint write):
    """acc = acc + g*g; w = w - (lr*g) / sqrt(acc)."""
    cdef Py_ssize_t k = rows.shape[0], bad
    cdef float* values = _values(core)
    cdef float* acc_data = _slot_data(core, accumulator)
    with nogil:
        bad = _adagrad(core, rows, positions, grads, lr, values, acc_data, write)
        if write and k:
            write_through(core, &rows[0], k)
    return bad


cdef Py_ssize_t _adagrad(FastCore core, const int64_t[::1] rows, const int64_t[::1] positions,
                         const float[:, ::1] grads, float lr, float* values, float* acc_data,
                         bint write) noexcept nogil:
    cdef Py_ssize_t j, c, k = rows.shape[0]
    cdef int dim = core.dim
    cdef float* w
    cdef float* acc
    cdef const float* g
    cdef float a, gc
    cdef bint bad
    for j in range(k):
        if j + AHEAD < k:
            fast_prefetch(values + rows[j + AHEAD] * dim)
            fast_prefetch(acc_data + rows[j + AHEAD] * dim)
        w = values + rows[j] * dim
        acc = acc_data + rows[j] * dim
        g = &grads[positions[j], 0]
        if write:
            for c in range(dim):
                gc = g[c]
                a = acc[c] + gc * gc
                acc[c] = a
                w[c] = w[c] - (lr * gc) / sqrtf(a)
            continue
        bad = False
        for c in range(dim):
            gc = g[c]
            a = acc[c] + gc * gc
            bad |= _nonfinite(a) | _nonfinite(w[c] - (lr * gc) / sqrtf(a))
        if bad:
            return j
    return -1


def lazy_adam(FastCore core not None, const int64_t[::1] rows, const int64_t[::1] positions, const float[:, ::1] grads,
              float beta1, float one_minus_beta1, float beta2, float one_minus_beta2,
              float lr_t, float epsilon, Py_ssize_t momentum, Py_ssize_t velocity, bint write):
    """m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*(g*g); w = w - (lr_t*m) / (sqrt(v) + eps)."""
    cdef Py_ssize_t k = rows.shape[0], bad
    cdef float* values = _values(core)
    cdef float* m_data = _slot_data(core, momentum)
    cdef float* v_data = _slot_data(core, velocity)
    cdef float[4] scalars = [beta1, one_minus_beta1, beta2, one_minus_beta2]
    with nogil:
        bad = _lazy_adam(core, rows, positions, grads, scalars, lr_t, epsilon, values, m_data, v_data, write)
        if write and k:
            write_through(core, &rows[0], k)
    return bad


cdef Py_ssize_t _lazy_adam(FastCore core, const int64_t[::1] rows, const int64_t[::1] positions,
                           const float[:, ::1] grads, const float* betas, float lr_t, float epsilon, float* values,
                           float* m_data, float* v_data, bint write) noexcept nogil:
    """``betas``: beta1, 1 - beta1, beta2, 1 - beta2."""
    cdef Py_ssize_t j, c, k = rows.shape[0]
    cdef int dim = core.dim
    cdef float beta1 = betas[0], one_minus_beta1 = betas[1], beta2 = betas[2], one_minus_beta2 = betas[3]
    cdef float* w
    cdef float* m
    cdef float* v
    cdef const float* g
    cdef float gc, mc, vc
    cdef bint bad
    for j in range(k):
        if j + AHEAD < k:
            fast_prefetch(values + rows[j + AHEAD] * dim)
            fast_prefetch(m_data + rows[j + AHEAD] * dim)
            fast_prefetch(v_data + rows[j + AHEAD] * dim)
        w = values + rows[j] * dim
        m = m_data + rows[j] * dim
        v = v_data + rows[j] * dim
        g = &grads[positions[j], 0]
        if write:
            for c in range(dim):
                gc = g[c]
                mc = beta1 * m[c] + one_minus_beta1 * gc
                vc = beta2 * v[c] + one_minus_beta2 * (gc * gc)
                m[c] = mc
                v[c] = vc
                w[c] = w[c] - (lr_t * mc) / (sqrtf(vc) + epsilon)
            continue
        bad = False
        for c in range(dim):
            gc = g[c]
            mc = beta1 * m[c] + one_minus_beta1 * gc
            vc = beta2 * v[c] + one_minus_beta2 * (gc * gc)
            bad |= _nonfinite(mc) | _nonfinite(vc) | _nonfinite(w[c] - (lr_t * mc) / (sqrtf(vc) + epsilon))
        if bad:
            return j
    return -1


cdef inline bint _ftrl_step(float* w, float* acc, float* lin, float g, float acc_new, float power_new,
                            float power_old, const float* scalars, bint write) noexcept nogil:
    """One element of ApplyFtrlV2 (_ftrl_element), written in place when ``write``, else worked out on
    copies; returns whether the element's new value, accumulator or linear term is NaN or Inf
    (``scalars``: lr, l1, l2, l2_shrinkage)."""
    cdef float wl, al, ll
    if write:
        _ftrl_element(w, acc, lin, g, acc_new, power_new, power_old, scalars[0], scalars[1], scalars[2], scalars[3])
        return False
    wl, al, ll = w[0], acc[0], lin[0]
    _ftrl_element(&wl, &al, &ll, g, acc_new, power_new, power_old, scalars[0], scalars[1], scalars[2], scalars[3])
    return _nonfinite(wl) or _nonfinite(al) or _nonfinite(ll)


def ftrl_sqrt(FastCore core not None, const int64_t[::1] rows, const int64_t[::1] positions, const float[:, ::1] grads,
              float lr, float l1, float l2, float l2_shrinkage, Py_ssize_t accum, Py_ssize_t linear, bint write):
    """TensorFlow's ApplyFtrlV2 with learning_rate_power = -0.5 (sqrt)."""
    cdef Py_ssize_t k = rows.shape[0], bad
    cdef float* values = _values(core)
    cdef float* acc_data = _slot_data(core, accum)
    cdef float* lin_data = _slot_data(core, linear)
    cdef float[4] scalars = [lr, l1, l2, l2_shrinkage]
    with nogil:
        bad = _ftrl_sqrt(core, rows, positions, grads, scalars, values, acc_data, lin_data, write)
        if write and k:
            write_through(core, &rows[0], k)
    return bad


cdef Py_ssize_t _ftrl_sqrt(FastCore core, const int64_t[::1] rows, const int64_t[::1] positions,
                           const float[:, ::1] grads, const float* scalars, float* values, float* acc_data,
                           float* lin_data, bint write) noexcept nogil:
    cdef Py_ssize_t j, c, k = rows.shape[0]
    cdef int dim = core.dim
    cdef float* w
    cdef float* acc
    cdef float* lin
    cdef const float* g
    cdef float acc_new
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
            if _ftrl_step(&w[c], &acc[c], &lin[c], g[c], acc_new, sqrtf(acc_new), sqrtf(acc[c]), scalars, write):
                return j
    return -1


def ftrl_accumulate(FastCore core not None, const int64_t[::1] rows, const int64_t[::1] positions,
                    const float[:, ::1] grads, Py_ssize_t accum):
    """(acc, acc + g*g) of each updated row, float32 [k, dim]: the inputs of
    numpy's power in the general FTRL update."""
    cdef Py_ssize_t j, c, k = rows.shape[0]
    cdef int dim = core.dim
    cdef float* acc_data = _slot_data(core, accum)
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


def ftrl_power(FastCore core not None, const int64_t[::1] rows, const int64_t[::1] positions, const float[:, ::1] grads,
               const float[:, ::1] acc_new, const float[:, ::1] power_new, const float[:, ::1] power_old,
               float lr, float l1, float l2, float l2_shrinkage, Py_ssize_t accum, Py_ssize_t linear, bint write):
    """ApplyFtrlV2 for any learning_rate_power, given acc^-power after and
    before the step (computed by numpy, see the module doc)."""
    cdef Py_ssize_t k = rows.shape[0], bad
    cdef float* values = _values(core)
    cdef float* acc_data = _slot_data(core, accum)
    cdef float* lin_data = _slot_data(core, linear)
    cdef float[4] scalars = [lr, l1, l2, l2_shrinkage]
    with nogil:
        bad = _ftrl_power(core, rows, positions, grads, acc_new, power_new, power_old, scalars, values, acc_data,
                          lin_data, write)
        if write and k:
            write_through(core, &rows[0], k)
    return bad


cdef Py_ssize_t _ftrl_power(FastCore core, const int64_t[::1] rows, const int64_t[::1] positions,
                            const float[:, ::1] grads, const float[:, ::1] acc_new, const float[:, ::1] power_new,
                            const float[:, ::1] power_old, const float* scalars, float* values, float* acc_data,
                            float* lin_data, bint write) noexcept nogil:
    cdef Py_ssize_t j, c, k = rows.shape[0]
    cdef int dim = core.dim
    cdef float* w
    cdef float* acc
    cdef float* lin
    for j in range(k):
        w = values + rows[j] * dim
        acc = acc_data + rows[j] * dim
        lin = lin_data + rows[j] * dim
        for c in range(dim):
            if _ftrl_step(&w[c], &acc[c], &lin[c], grads[positions[j], c], acc_new[j, c], power_new[j, c],
                          power_old[j, c], scalars, write):
                return j
    return -1


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
