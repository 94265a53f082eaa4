# Tier moves (spec/tiers.md, CON-10): rows leaving for and coming back from another tier, and
# the SSD tier's batch kernels (glue: mxrec_ref/fast/disk.py, FastDiskKernels): mapped record reads with
# their checks, record checksums, the index's search and merge -- twins of mxrec_ref/tiers/disk_reads.py,
# disk_records.py and disk_index.py.
# Twin of mxrec_ref/ref/tiers.py and mxrec_ref/fast/tiers.py: put_rows (EXP-4), entries_at (entries_of).
# Included into _fast.pyx; the core's layout is mxrec_ref._fast.pxd.

from posix.mman cimport mmap as _c_mmap, munmap as _c_munmap, PROT_READ, MAP_SHARED, MAP_FAILED
from posix.stat cimport fstat as _c_fstat, struct_stat
from libc.errno cimport errno as _c_errno
from os import strerror as _strerror


cdef class RecordMap:
    """One SSD file mapped read-only (``mmap``, shared, so the tier's own ``pwrite``s show at once)
    over its whole capacity, ``length`` bytes, so that appends never remap it: a step's records are
    copied out of the page cache without a system call each.  Only bytes below the
    file's size (``fstat``, once a read) are touched: a record past it reads as cut short, not as
    SIGBUS -- unless another process truncates the file during the read itself."""

    cdef const uint8_t* base
    cdef readonly Py_ssize_t length
    cdef readonly int fd

    def __cinit__(self, int fd, Py_ssize_t length):
        self.base = NULL
        if length <= 0:
            raise ValueError(f"RecordMap: length must be > 0, got {length}")
        cdef void* mapped = _c_mmap(NULL, <size_t>length, PROT_READ, MAP_SHARED, fd, 0)
        if mapped == MAP_FAILED:
            raise OSError(_c_errno, f"{_strerror(_c_errno)} (mapping {length} bytes)")
        self.base, self.length, self.fd = <const uint8_t*>mapped, length, fd

    def __dealloc__(self):
        if self.base != NULL:
            _c_munmap(<void*>self.base, <size_t>self.length)
            self.base = NULL

    def read(self, const int64_t[::1] offsets, Py_ssize_t record_bytes, uint8_t[:, ::1] out,
             const int64_t[::1] keys, uint32_t magic, uint32_t payload_len):
        """Copy the records at ``offsets`` into the rows of ``out`` and check each as
        mxrec_ref.tiers.disk_records' ``RecordFormat.check`` does: its CRC-32 (the last 4 bytes, over the rest),
        its magic and payload length, and that it holds ``keys[i]``; without the GIL.  Returns
        (bytes copied, the index of the first record the file cuts short or -1, the index of
        the first bad record before it or -1, why: 1 the checksum, 2 the format, 3 the key);
        a failing ``fstat`` raises OSError."""
        cdef Py_ssize_t n = offsets.shape[0], k, cut = -1, bad = -1
        cdef int reason = 0, failed = 0
        cdef int64_t size
        cdef struct_stat st
        if out.shape[0] < n or (n and out.shape[1] != record_bytes) or keys.shape[0] != n or record_bytes < 36:
            raise ValueError(f"RecordMap.read: out must be [{n}, {record_bytes}] bytes, with {n} keys")
        fast_crc32_init()
        with nogil:
            failed = _c_fstat(self.fd, &st)
            if not failed:
                size = min(<int64_t>st.st_size, <int64_t>self.length)
                for k in range(n):
                    if offsets[k] < 0 or offsets[k] + record_bytes > size:
                        cut = k
                        break
                    memcpy(&out[k, 0], self.base + offsets[k], record_bytes)
                for k in range(n if cut < 0 else cut):
                    reason = _record_fault(&out[k, 0], record_bytes, keys[k], magic, payload_len)
                    if reason:
                        bad = k
                        break
        if failed:
            raise OSError(_c_errno, _strerror(_c_errno))
        return (n if cut < 0 else cut) * record_bytes, cut, bad, reason


cdef inline int _record_fault(const uint8_t* record, Py_ssize_t record_bytes, int64_t key, uint32_t magic,
                              uint32_t payload_len) noexcept nogil:
    """0 for a sound record (little-endian fields, mxrec_ref.tiers.disk's layout), else why not:
    1 its checksum fails, 2 its magic or payload length is wrong, 3 it holds another key --
    the checksum first, as the Python check reports it."""
    cdef uint32_t word, crc
    cdef int64_t held
    memcpy(&crc, record + record_bytes - 4, 4)
    if fast_crc32(record, <size_t>(record_bytes - 4)) != crc:
        return 1
    memcpy(&word, record, 4)
    if word != magic:
        return 2
    memcpy(&word, record + 28, 4)
    if word != payload_len:
        return 2
    memcpy(&held, record + 4, 8)
    return 3 if held != key else 0


def entries_at(FastCore core not None, const int64_t[::1] rows):
    """(counts, last_seen) of the keys at ``rows`` (their row handles, each holding a row): what
    a row carries when it moves to another storage tier, found without a second hash probe."""
    cdef Py_ssize_t n = rows.shape[0], i
    counts = np.empty(n, dtype=np.int64)
    last_seen = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] c_view = counts, s_view = last_seen
    cdef Entry* entry
    for i in range(n):
        if rows[i] < 0 or rows[i] >= core.next_row or not core.row_live[rows[i]]:
            raise KeyError(f"entries_at: row {rows[i]} holds no key")
    with nogil:
        for i in range(n):
            entry = &core.row_entries[rows[i]]
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
    core.entries_epoch += 1
    _reserve_history(core, n, 0)
    ensure_rows(core, core.next_row + fresh, capacity)
    _populate_rows(core, core.next_row, fresh)
    rows = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] r_view = rows
    for i in range(n):
        row = take_row(core)
        r_view[i] = row
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
            memcpy(_value_row(core, r_view[i]) if s == 0 else _slot_row(core, s - 1, r_view[i]),
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


cdef class DeviceLRU:
    """The fast path's device tier (TIER-4, TIER-12): tick buckets over the
    store's rows (a key keeps its row while it is in memory, EXP-4).  Per row
    of the store's row range, ``node[row] = (tick of its last use or -1 off
    the device, key)``: 16 bytes.  Every training lookup is one tick; its rows
    are appended to a queue of (row, tick) entries, so the queue holds the
    ticks in order; an entry is live while its row's tick is still the
    entry's (a later touch or a removal makes it stale, never live again).
    Rows leave from the old end: an oldest group (one tick's live entries)
    that must go whole goes as it stands (which rows leave is TIER-4's rule,
    their order is not), one that goes only in part gives its smallest keys
    (an ``argpartition``, O(group)) -- "oldest tick first, smaller key first
    within a tick", the reference's choice.  The queue is compacted in place
    (live entries kept in order) once stale entries outnumber live ones, so it
    holds at most ~3 entries of 16 bytes per device row.  A touch costs one
    random access per key; the loops run without the GIL."""

    cdef public object node, queue
    cdef public Py_ssize_t n, device_rows, q_head, q_tail
    cdef int64_t tick

    def __init__(self, Py_ssize_t device_rows):
        self.device_rows = device_rows
        self.node = np.zeros((0, 2), dtype=np.int64)
        self.queue = np.zeros((1024, 2), dtype=np.int64)
        self.n = self.q_head = self.q_tail = 0
        self.tick = 0

    def _grow(self, Py_ssize_t rows):
        """Room for row indexes below ``rows``."""
        cdef Py_ssize_t have = self.node.shape[0]
        if rows <= have:
            return
        extra = np.zeros((max(rows, 2 * have, 1024) - have, 2), dtype=np.int64)
        extra[:, 0] = -1
        self.node = np.concatenate([self.node, extra])

    def _room(self, Py_ssize_t entries):
        """Room for ``entries`` more queue entries: stale ones dropped first when they outnumber
        the live ones (or the queue is full), then the queue grown if still needed."""
        cdef Py_ssize_t used = self.q_tail - self.q_head
        if used > 2 * self.n + 1024 or self.q_tail + entries > self.queue.shape[0]:
            self._compact()
        if self.q_tail + entries > self.queue.shape[0]:
            grown = np.zeros((max(2 * self.queue.shape[0], self.q_tail + entries), 2), dtype=np.int64)
            grown[:self.q_tail] = self.queue[:self.q_tail]
            self.queue = grown

    def _compact(self):
        """Keep the live queue entries, in order, at the front."""
        cdef int64_t[:, ::1] q = self.queue
        cdef int64_t[:, ::1] nd = self.node
        cdef Py_ssize_t i, out = 0
        cdef int64_t r
        with nogil:
            for i in range(self.q_head, self.q_tail):
                r = q[i, 0]
                if nd[r, 0] == q[i, 1]:
                    q[out, 0] = r
                    q[out, 1] = q[i, 1]
                    out += 1
        self.q_head, self.q_tail = 0, out

    def contains(self, const int64_t[::1] rows, const int64_t[::1] keys):
        """Per key (with its row in memory, -1: none): on the device."""
        cdef Py_ssize_t n = rows.shape[0], i, cap = self.node.shape[0]
        out = np.zeros(n, dtype=np.bool_)
        if n == 0 or cap == 0:
            return out
        cdef uint8_t[::1] o = out.view(np.uint8)
        cdef int64_t[:, ::1] nd = self.node
        cdef int64_t r
        with nogil:
            for i in range(n):
                r = rows[i]
                o[i] = 0 <= r < cap and nd[r, 0] >= 0 and nd[r, 1] == keys[i]
        return out

    def touch(self, const int64_t[::1] keys, const int64_t[::1] rows):
        """Make ``keys`` (distinct, each with its row ``rows[i]`` >= 0) device
        rows used now, as one tick; then take the least recently used rows off
        the device until it holds ``device_rows``.  Returns (the keys sent back;
        whether each of ``keys`` was on the device)."""
        cdef Py_ssize_t n = keys.shape[0], i, j = 0, size = 0, live = 0
        cdef int64_t top = -1, r, t
        for i in range(n):
            if rows[i] < 0:
                raise ValueError(f"DeviceLRU.touch: key {keys[i]} has no row")
            top = max(top, rows[i])
        self._grow(top + 1)
        self._room(n)
        was = np.zeros(n, dtype=np.bool_)
        cdef uint8_t[::1] w = was.view(np.uint8)
        cdef int64_t[:, ::1] nd = self.node
        cdef int64_t[:, ::1] q = self.queue
        self.tick += 1
        t = self.tick
        with nogil:
            for i in range(n):
                if i + AHEAD < n:      # the rows are scattered over the row range: fetch ahead
                    fast_prefetch(&nd[rows[i + AHEAD], 0])
                r = rows[i]
                if nd[r, 0] >= 0:
                    w[i] = nd[r, 1] == keys[i]
                else:
                    self.n += 1
                nd[r, 0] = t
                nd[r, 1] = keys[i]
                q[self.q_tail + i, 0] = r
                q[self.q_tail + i, 1] = t
            self.q_tail += n
        cdef Py_ssize_t excess = max(0, self.n - self.device_rows)
        victims = np.empty(excess, dtype=np.int64)
        cdef int64_t[::1] v = victims
        with nogil:
            while j < excess and self.q_head < self.q_tail:
                # The oldest group: its extent in the queue and its live entries.
                t = q[self.q_head, 1]
                size = live = 0
                while self.q_head + size < self.q_tail and q[self.q_head + size, 1] == t:
                    if self.q_head + size + AHEAD < self.q_tail:
                        fast_prefetch(&nd[q[self.q_head + size + AHEAD, 0], 0])
                    live += nd[q[self.q_head + size, 0], 0] == t
                    size += 1
                if live > excess - j:
                    break
                for i in range(self.q_head, self.q_head + size):   # the whole group goes
                    r = q[i, 0]
                    if nd[r, 0] == t:
                        v[j] = nd[r, 1]
                        nd[r, 0] = -1
                        j += 1
                self.n -= live
                self.q_head += size
        if j < excess:                      # part of it: the smallest keys of the group
            if size == 0:
                raise AssertionError("DeviceLRU: the queue lost device rows")   # an invariant, not input
            entries = self.queue[self.q_head:self.q_head + size]
            group = entries[self.node[entries[:, 0], 0] == entries[:, 1], 0]
            take = group[np.argpartition(self.node[group, 1], excess - j - 1)[:excess - j]]
            self.node[take, 0] = -1
            self.n -= len(take)
            victims[j:] = self.node[take, 1]
        return victims, was

    def remove_rows(self, rows):
        """Take ``rows`` (on the device) off it; their queue entries go stale."""
        rows = np.asarray(rows, dtype=np.int64)
        rows = rows[self.node[rows, 0] >= 0]
        self.node[rows, 0] = -1
        self.n -= len(rows)

    def clear(self):
        self.node[:, 0] = -1
        self.n = self.q_head = self.q_tail = 0


cdef inline bint _entry_less(const int64_t* a, const int64_t* b) noexcept nogil:
    """(count, last seen, key) in lexicographic order (TIER-5)."""
    if a[0] != b[0]:
        return a[0] < b[0]
    if a[1] != b[1]:
        return a[1] < b[1]
    return a[2] < b[2]


# HostHeap is 4-ary: half the levels of a binary heap, and a node's four children (96 bytes) lie side
# by side, so a pop's walk down a heap too large for the cache misses about half as often.
cdef enum:
    HEAP_ARITY = 4


cdef void _sift_down(int64_t* h, Py_ssize_t n, Py_ssize_t i) noexcept nogil:
    cdef Py_ssize_t child, first, last, c
    cdef int64_t tmp[3]
    memcpy(tmp, h + 3 * i, 3 * sizeof(int64_t))
    while True:
        first = HEAP_ARITY * i + 1
        if first >= n:
            break
        last = min(first + HEAP_ARITY, n)
        child = first
        for c in range(first + 1, last):
            if _entry_less(h + 3 * c, h + 3 * child):
                child = c
        if not _entry_less(h + 3 * child, tmp):
            break
        memcpy(h + 3 * i, h + 3 * child, 3 * sizeof(int64_t))
        i = child
    memcpy(h + 3 * i, tmp, 3 * sizeof(int64_t))


cdef void _sift_up(int64_t* h, Py_ssize_t i) noexcept nogil:
    cdef Py_ssize_t parent
    cdef int64_t tmp[3]
    memcpy(tmp, h + 3 * i, 3 * sizeof(int64_t))
    while i > 0:
        parent = (i - 1) // HEAP_ARITY
        if not _entry_less(tmp, h + 3 * parent):
            break
        memcpy(h + 3 * i, h + 3 * parent, 3 * sizeof(int64_t))
        i = parent
    memcpy(h + 3 * i, tmp, 3 * sizeof(int64_t))


cdef class HostHeap:
    """The fast path's heap of TIER-5's order (TIER-12): a 4-ary min-heap of
    (count, last seen, key) int64 triples, 24 bytes an entry, compared as
    tuples -- the same order as the reference's ``heapq`` of the same
    triples, so both pop the same entries in the same order.  Lazy deletion
    is the caller's (mxrec_ref.tiers.placement.HostOrder)."""

    cdef public object entries
    cdef public Py_ssize_t n

    def __init__(self):
        self.entries = np.zeros((1024, 3), dtype=np.int64)
        self.n = 0

    def __len__(self):
        return self.n

    def push(self, keys, counts, last_seen):
        cdef const int64_t[::1] k = np.ascontiguousarray(keys, dtype=np.int64)
        cdef const int64_t[::1] c = np.ascontiguousarray(counts, dtype=np.int64)
        cdef const int64_t[::1] s = np.ascontiguousarray(last_seen, dtype=np.int64)
        cdef Py_ssize_t m = k.shape[0], i, start = self.n
        if m == 0:
            return
        if self.n + m > self.entries.shape[0]:
            grown = np.zeros((max(2 * self.entries.shape[0], self.n + m), 3), dtype=np.int64)
            grown[:self.n] = self.entries[:self.n]
            self.entries = grown
        cdef int64_t[:, ::1] e = self.entries
        cdef int64_t* h = &e[0, 0]
        with nogil:
            for i in range(m):
                h[3 * (start + i)] = c[i]
                h[3 * (start + i) + 1] = s[i]
                h[3 * (start + i) + 2] = k[i]
            self.n = start + m
            if m > start:          # heapify is O(n): cheaper than m sift-ups here
                i = (self.n - 2) // HEAP_ARITY + 1 if self.n > 1 else 0
                while i > 0:
                    i -= 1
                    _sift_down(h, self.n, i)
            else:
                for i in range(start, start + m):
                    _sift_up(h, i)

    def pop(self, Py_ssize_t want):
        """(counts, last_seen, keys) of the ``want`` smallest entries (fewer if the heap runs
        out), smallest first."""
        cdef Py_ssize_t m = max(0, min(want, self.n)), i
        out = np.empty((m, 3), dtype=np.int64)
        cdef int64_t[:, ::1] o = out
        cdef int64_t[:, ::1] e = self.entries
        cdef int64_t* h = &e[0, 0]
        with nogil:
            for i in range(m):
                memcpy(&o[i, 0], h, 3 * sizeof(int64_t))
                self.n -= 1
                if self.n > 0:
                    memcpy(h, h + 3 * self.n, 3 * sizeof(int64_t))
                    _sift_down(h, self.n, 0)
        return out[:, 0].copy(), out[:, 1].copy(), out[:, 2].copy()

    def clear(self):
        self.n = 0


cdef inline Py_ssize_t _lower_bound(const int64_t* keys, Py_ssize_t n, int64_t key) noexcept nogil:
    cdef Py_ssize_t low = 0, half
    while n > 0:
        half = n >> 1
        if keys[low + half] < key:
            low += half + 1
            n -= half + 1
        else:
            n = half
    return low


def index_search(const int64_t[::1] main_keys, const int64_t[::1] main_words, const int64_t[::1] delta_keys,
                 const int64_t[::1] delta_words, const int64_t[::1] queries):
    """The SSD tier's index search (the twin of mxrec_ref.tiers.disk_index's ``DiskIndex`` search): per query, its location
    word (-1 where absent), the level that holds its slot (0 none, 1 main, 2 delta: a key is in one
    level at most; a tombstone's slot counts as held, word -1) and its position there -- both
    levels searched in one pass without the GIL."""
    cdef Py_ssize_t n = queries.shape[0], nm = main_keys.shape[0], nd = delta_keys.shape[0], i, p
    words = np.empty(n, dtype=np.int64)
    level = np.zeros(n, dtype=np.uint8)
    pos = np.zeros(n, dtype=np.intp)
    if n == 0:
        return words, level, pos
    cdef int64_t[::1] w = words
    cdef uint8_t[::1] lv = level
    cdef Py_ssize_t[::1] ps = pos
    cdef const int64_t* mk = &main_keys[0] if nm else NULL
    cdef const int64_t* dk = &delta_keys[0] if nd else NULL
    with nogil:
        for i in range(n):
            w[i] = -1
            if nd:
                p = _lower_bound(dk, nd, queries[i])
                if p < nd and dk[p] == queries[i]:
                    w[i], lv[i], ps[i] = delta_words[p], 2, p
                    continue
            if nm:
                p = _lower_bound(mk, nm, queries[i])
                if p < nm and mk[p] == queries[i]:
                    w[i], lv[i], ps[i] = main_words[p], 1, p
    return words, level, pos


def index_merge(const int64_t[::1] keys_a, const int64_t[::1] words_a, const int64_t[::1] keys_b,
                const int64_t[::1] words_b):
    """Two sorted, key-disjoint levels of the SSD tier's index as one, tombstones (word < 0)
    dropped: one pass without the GIL (the twin of mxrec_ref.tiers.disk_index's ``DiskIndex`` merge)."""
    cdef Py_ssize_t na = keys_a.shape[0], nb = keys_b.shape[0], i = 0, j = 0, o = 0
    keys = np.empty(na + nb, dtype=np.int64)
    words = np.empty(na + nb, dtype=np.int64)
    cdef int64_t[::1] k = keys, w = words
    with nogil:
        while i < na or j < nb:
            if j >= nb or (i < na and keys_a[i] < keys_b[j]):
                if words_a[i] >= 0:
                    k[o], w[o] = keys_a[i], words_a[i]
                    o += 1
                i += 1
            else:
                if words_b[j] >= 0:
                    k[o], w[o] = keys_b[j], words_b[j]
                    o += 1
                j += 1
    return keys[:o].copy() if o < na + nb else keys, words[:o].copy() if o < na + nb else words
