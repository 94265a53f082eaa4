# Initial values (spec/initializers.md): the counter-based generator's integer work in C.
# Twin of mxrec_ref/initializers.py and mxrec_ref/fast/initializers.py: mix_bits (INIT-2),
# uniform_rows (INIT-3), truncated_normal_rows (INIT-6).
# Included into _fast.pyx; the core's layout is mxrec_ref._fast.pxd.


# The hashing constants of _fast_helpers.h, for the test that holds them equal to
# mxrec_ref.initializers.HASH_CONSTANTS.
HASH_CONSTANTS = {"mix1": FAST_MIX1, "mix2": FAST_MIX2, "key_stride": FAST_KEY_STRIDE, "golden": FAST_GOLDEN}


def mix_bits(uint64_t base, const int64_t[::1] keys, const int64_t[::1] cols):
    """The integer kernel of mxrec_ref.initializers (INIT-2), without the GIL:
    mix64(mix64(base + key*K + col*phi)) mod 2**64 per element.  Uniform and
    truncated-normal rows are made whole in C below (uniform_rows,
    truncated_normal_rows); this kernel serves the reference-shaped path."""
    cdef Py_ssize_t n = keys.shape[0], i
    if cols.shape[0] != n:
        raise ValueError("mix_bits: keys and cols differ in length")
    out = np.empty(n, dtype=np.uint64)
    cdef uint64_t[::1] bits = out
    cdef uint64_t key_stride = FAST_KEY_STRIDE, golden = FAST_GOLDEN
    with nogil:
        for i in range(n):
            bits[i] = fast_mix64(fast_mix64(base + <uint64_t>keys[i] * key_stride + <uint64_t>cols[i] * golden))
    return out


def uniform_rows(uint64_t base, const int64_t[::1] keys, Py_ssize_t dim, double minval, double span, double scale):
    """Uniform initial rows in one pass: float32((minval + span * u) * scale)
    with u = (bits >> 11) * 2**-53 -- the operations, in the order, that
    initializers.initial_rows performs in numpy (no FMA: -ffp-contract=off),
    so the rows are bit-identical (tested)."""
    cdef Py_ssize_t n = keys.shape[0], i, c
    out = np.empty((n, dim), dtype=np.float32)
    cdef float[:, ::1] rows = out
    cdef uint64_t key_stride = FAST_KEY_STRIDE, golden = FAST_GOLDEN
    cdef uint64_t counter
    cdef double u
    with nogil:
        for i in range(n):
            counter = base + <uint64_t>keys[i] * key_stride
            for c in range(dim):
                u = <double>(fast_mix64(fast_mix64(counter + <uint64_t>c * golden)) >> 11) * (1.0 / 9007199254740992.0)
                rows[i, c] = <float>((minval + span * u) * scale)
    return out


# INIT-6's constants, digit for digit those of mxrec_ref/initializers.py (AS241's coefficients).
cdef double NORMAL_MASS_WITHIN_2 = 0.9544997361036416
cdef double LN2 = 0.6931471805599453
cdef double SQRT_HALF = 0.7071067811865476


cdef inline double fixed_log(double x) noexcept nogil:
    """initializers.fixed_log, same operations in the same order: frexp, then
    e*ln2 + 2s*P(s*s) with P's 12 coefficients 1/(2k+1), Horner from the highest."""
    cdef int e
    cdef double m = frexp(x, &e)
    cdef double s, s2, acc
    cdef int k
    if m < SQRT_HALF:
        m = m * 2.0
        e = e - 1
    s = (m - 1.0) / (m + 1.0)
    s2 = s * s
    acc = 1.0 / 23.0
    for k in range(10, -1, -1):
        acc = acc * s2 + 1.0 / (2 * k + 1)
    return <double>e * LN2 + (2.0 * s) * acc


cdef inline double truncated_normal_z(double u) noexcept nogil:
    """initializers.truncated_normal_z: AS241's quantile of the normal truncated to [-2, 2]."""
    cdef double q = (u - 0.5) * NORMAL_MASS_WITHIN_2
    cdef double r, num, den, z
    if fabs(q) <= 0.425:
        r = 0.180625 - q * q
        num = ((((((2.5090809287301226727e3 * r + 3.3430575583588128105e4) * r + 6.7265770927008700853e4) * r
                  + 4.5921953931549871457e4) * r + 1.3731693765509461125e4) * r + 1.9715909503065514427e3) * r
               + 1.3314166789178437745e2) * r + 3.3871328727963666080e0
        den = ((((((5.2264952788528545610e3 * r + 2.8729085735721942674e4) * r + 3.9307895800092710610e4) * r
                  + 2.1213794301586595867e4) * r + 5.3941960214247511077e3) * r + 6.8718700749205790830e2) * r
               + 4.2313330701600911252e1) * r + 1.0
        z = (q * num) / den
    else:
        r = sqrt(-fixed_log(0.5 - fabs(q))) - 1.6
        num = ((((((7.74545014278341407640e-4 * r + 2.27238449892691845833e-2) * r + 2.41780725177450611770e-1) * r
                  + 1.27045825245236838258e0) * r + 3.64784832476320460504e0) * r + 5.76949722146069140550e0) * r
               + 4.63033784615654529590e0) * r + 1.42343711074968357734e0
        den = ((((((1.05075007164441684324e-9 * r + 5.47593808499534494600e-4) * r + 1.51986665636164571966e-2) * r
                  + 1.48103976427480074590e-1) * r + 6.89767334985100004550e-1) * r + 1.67638483018380384940e0) * r
               + 2.05319162663775882187e0) * r + 1.0
        z = num / den
        if q < 0.0:
            z = -z
    if z < -2.0:
        z = -2.0
    if z > 2.0:
        z = 2.0
    return z


def truncated_normal_rows(uint64_t base, const int64_t[::1] keys, Py_ssize_t dim, double mean, double stddev,
                          double scale):
    """Truncated-normal initial rows in one pass without the GIL (INIT-3, INIT-6):
    float32((mean + stddev * z) * scale), z = truncated_normal_z(u) on each (key, column)'s
    uniform -- initializers.truncated_normal_rows' operations in its order (no FMA:
    -ffp-contract=off), so the rows are bit-identical (tested)."""
    cdef Py_ssize_t n = keys.shape[0], i, c
    out = np.empty((n, dim), dtype=np.float32)
    cdef float[:, ::1] rows = out
    cdef uint64_t key_stride = FAST_KEY_STRIDE, golden = FAST_GOLDEN
    cdef uint64_t counter
    cdef double u
    with nogil:
        for i in range(n):
            counter = base + <uint64_t>keys[i] * key_stride
            for c in range(dim):
                u = <double>(fast_mix64(fast_mix64(counter + <uint64_t>c * golden)) >> 11) * (1.0 / 9007199254740992.0)
                rows[i, c] = <float>((mean + stddev * truncated_normal_z(u)) * scale)
    return out
