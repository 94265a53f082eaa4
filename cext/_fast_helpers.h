/* Small C helpers for cext/_fast.pyx: what Cython cannot express directly
 * (128-bit arithmetic, prefetch, mremap) or what reads better as plain C.
 * Everything here is safe to call without the GIL. */
#ifndef MXREC_FAST_HELPERS_H
#define MXREC_FAST_HELPERS_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* mremap; Python.h already defines it on Linux */
#endif
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

/* ------------------------------------------------------ hashing constants
 * The C side's only copy of the hashing constants: SplitMix64's finaliser
 * (fast_mix64, which also hashes keys into every map of the core) and the
 * initializer's counter strides (INIT-2).  mxrec_ref/initializers.py holds
 * the Python copy (HASH_CONSTANTS); the extension exports these as
 * mxrec_ref._fast.HASH_CONSTANTS and a test holds the two equal. */
#define FAST_MIX1 UINT64_C(0xBF58476D1CE4E5B9)
#define FAST_MIX2 UINT64_C(0x94D049BB133111EB)
#define FAST_KEY_STRIDE UINT64_C(0xD6E8FEB86659FD93) /* counter += key * this */
#define FAST_GOLDEN UINT64_C(0x9E3779B97F4A7C15)     /* counter += column * this (2^64 / phi) */

/* SplitMix64's finaliser: a bijective 64-bit mixer, so sequential or
 * strided keys spread over all slots of a power-of-two table. */
static inline uint64_t fast_mix64(uint64_t x) {
    x = (x ^ (x >> 30)) * FAST_MIX1;
    x = (x ^ (x >> 27)) * FAST_MIX2;
    return x ^ (x >> 31);
}

/* min(old + coefficient * occurrences, 2**63 - 1), computed exactly (the
 * reference uses Python integers): coefficient < 2**31 and occurrences
 * < 2**63, so the product fits 94 bits and the sum cannot overflow int128. */
static inline int64_t fast_count_update(int64_t old, int64_t coefficient, int64_t occurrences) {
    __int128 value = (__int128)old + (__int128)coefficient * (__int128)occurrences;
    if (value > (__int128)INT64_MAX) return INT64_MAX;
    if (value < (__int128)INT64_MIN) return INT64_MIN; /* unreachable: counts are >= 0 */
    return (int64_t)value;
}

/* a + b for non-negative weights, saturating at 2**63 - 1 (only reachable
 * with > 2**32 positions of weight 2**31 - 1 in one batch). */
static inline int64_t fast_saturating_add(int64_t a, int64_t b) {
    int64_t out;
    if (__builtin_add_overflow(a, b, &out)) return INT64_MAX;
    return out;
}

/* Ask for the cache line holding p (a hint: never faults). */
static inline void fast_prefetch(const void *p) { __builtin_prefetch(p, 0, 3); }

/* ---------------------------------------------------------------- buffers
 * Large arrays (hash slots, entries, row storage) live in page-aligned,
 * zero-filled buffers.  On Linux they are anonymous mappings grown with
 * mremap, which moves page tables instead of copying: growing a 1 GB row
 * store neither copies it nor touches its pages again.  Elsewhere (or with
 * -DFAST_NO_MMAP, e.g. under ASan) they fall back to aligned allocation plus
 * copy.  fast_buffer_bytes gives the size a request really holds (whole
 * pages for a mapping). */
#define FAST_PAGE ((size_t)4096)
#if defined(__linux__) && !defined(FAST_NO_MMAP) /* -DFAST_NO_MMAP: heap buffers, e.g. for ASan */
#define FAST_USE_MMAP 1
#endif

static inline size_t fast_buffer_bytes(size_t bytes) {
    if (bytes == 0) bytes = 1;
#if defined(FAST_USE_MMAP)
    return (bytes + FAST_PAGE - 1) & ~(FAST_PAGE - 1);
#else
    return bytes; /* exact, so a sanitizer sees every overrun */
#endif
}

/* Resize a buffer of old_bytes (0 with old == NULL) to new_bytes, keeping
 * the common prefix; new bytes read as zero.  NULL on failure (the old
 * buffer is then untouched). */
static inline void *fast_buffer_resize(void *old, size_t old_bytes, size_t new_bytes) {
    size_t old_size = old ? fast_buffer_bytes(old_bytes) : 0;
    size_t new_size = fast_buffer_bytes(new_bytes);
#if defined(FAST_USE_MMAP)
    void *p;
    if (old == NULL) {
        p = mmap(NULL, new_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    } else {
        if (new_size == old_size) return old;
        p = mremap(old, old_size, new_size, MREMAP_MAYMOVE);
    }
    return p == MAP_FAILED ? NULL : p;
#else
    void *p = NULL;
    if (old != NULL && new_size == old_size) return old;
    if (posix_memalign(&p, FAST_PAGE, new_size) != 0) return NULL;
    memset(p, 0, new_size);
    if (old != NULL) {
        memcpy(p, old, old_size < new_size ? old_size : new_size);
        free(old);
    }
    return p;
#endif
}

/* Fault in [p, p + bytes) of a buffer in one call, ahead of writing it:
 * cheaper than taking one page fault per page (MADV_POPULATE_WRITE, Linux
 * 5.14+; a no-op where unavailable). */
static inline void fast_buffer_populate(void *p, size_t bytes) {
#if defined(FAST_USE_MMAP) && defined(MADV_POPULATE_WRITE)
    uintptr_t start = (uintptr_t)p & ~(uintptr_t)(FAST_PAGE - 1);
    uintptr_t end = (uintptr_t)p + bytes;
    if (bytes > 0) madvise((void *)start, end - start, MADV_POPULATE_WRITE);
#else
    (void)p;
    (void)bytes;
#endif
}

static inline void fast_buffer_free(void *p, size_t bytes) {
    if (p == NULL) return;
#if defined(FAST_USE_MMAP)
    munmap(p, fast_buffer_bytes(bytes));
#else
    (void)bytes;
    free(p);
#endif
}

/* CRC-32 (zlib's: reflected polynomial 0xEDB88320, initial and final xor
 * 0xFFFFFFFF), slicing-by-8.  fast_crc32_init fills the tables once; call
 * it with the GIL held before the first fast_crc32. */
static uint32_t fast_crc32_table[8][256];
static int fast_crc32_ready = 0;

static inline void fast_crc32_init(void) {
    if (fast_crc32_ready) return;
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ UINT32_C(0xEDB88320) : c >> 1;
        fast_crc32_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            fast_crc32_table[t][i] = (fast_crc32_table[t - 1][i] >> 8) ^ fast_crc32_table[0][fast_crc32_table[t - 1][i] & 0xFF];
    fast_crc32_ready = 1;
}

static inline uint32_t fast_crc32(const uint8_t *p, size_t n) {
    uint32_t c = UINT32_C(0xFFFFFFFF);
    while (n >= 8) {
        uint32_t lo = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
        lo ^= c;
        c = fast_crc32_table[7][lo & 0xFF] ^ fast_crc32_table[6][(lo >> 8) & 0xFF]
          ^ fast_crc32_table[5][(lo >> 16) & 0xFF] ^ fast_crc32_table[4][lo >> 24]
          ^ fast_crc32_table[3][hi & 0xFF] ^ fast_crc32_table[2][(hi >> 8) & 0xFF]
          ^ fast_crc32_table[1][(hi >> 16) & 0xFF] ^ fast_crc32_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) c = fast_crc32_table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c ^ UINT32_C(0xFFFFFFFF);
}

#endif
