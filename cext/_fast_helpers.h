/* Small C helpers for cext/_fast.pyx: the parts that Cython cannot express
 * directly (128-bit arithmetic) or that read better as plain C.  Everything
 * here is pure, inline and safe to call without the GIL. */
#ifndef MXREC_FAST_HELPERS_H
#define MXREC_FAST_HELPERS_H

#include <stdint.h>

/* SplitMix64's finaliser: a bijective 64-bit mixer, so sequential or
 * strided keys spread over all slots of a power-of-two table. */
static inline uint64_t fast_mix64(uint64_t x) {
    x = (x ^ (x >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    x = (x ^ (x >> 27)) * UINT64_C(0x94D049BB133111EB);
    return x ^ (x >> 31);
}

/* min(old + coefficient * occurrences, 2**63 - 1), computed exactly (the
 * reference uses Python integers): coefficient < 2**31 and occurrences
 * < 2**63, so the product fits 94 bits and the sum cannot overflow int128. */
static inline int64_t fast_count_update(int64_t old, int64_t coefficient, int64_t occurrences) {
    __int128 value = (__int128)old + (__int128)coefficient * (__int128)occurrences;
    if (value > (__int128)INT64_MAX) return INT64_MAX;
    if (value < (__int128)INT64_MIN) return INT64_MIN;  /* unreachable: counts are >= 0 */
    return (int64_t)value;
}

/* a + b for non-negative weights, saturating at 2**63 - 1 (only reachable
 * with > 2**32 positions of weight 2**31 - 1 in one batch). */
static inline int64_t fast_saturating_add(int64_t a, int64_t b) {
    int64_t out;
    if (__builtin_add_overflow(a, b, &out)) return INT64_MAX;
    return out;
}

#endif
