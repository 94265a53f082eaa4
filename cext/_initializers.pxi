# Initial values (spec/initializers.md): the counter-based generator's integer work in C.
# Twin of mxrec_ref/initializers.py and mxrec_ref/fast/initializers.py: mix_bits (INIT-2),
# uniform_rows (INIT-3).
# Included into _fast.pyx; the core's layout is mxrec_ref._fast.pxd.


# The hashing constants of _fast_helpers.h, for the test that holds them equal to
# mxrec_ref.initializers.HASH_CONSTANTS.
HASH_CONSTANTS = {"mix1": FAST_MIX1, "mix2": FAST_MIX2, "key_stride": FAST_KEY_STRIDE, "golden": FAST_GOLDEN}


def mix_bits(uint64_t base, const int64_t[::1] keys, const int64_t[::1] cols):
    """The integer kernel of mxrec_ref.initializers (INIT-2), without the GIL:
    mix64(mix64(base + key*K + col*phi)) mod 2**64 per element.  The rest of
    the initializer (scaling, Box-Muller) stays numpy code shared with the
    reference, so rows remain bit-identical."""
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
