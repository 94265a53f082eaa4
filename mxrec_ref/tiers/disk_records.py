"""The SSD tier's record format (spec/tiers.md, TIER-9) and the checks every read makes (TIER-6).

Record format, little-endian, one fixed-size record per row (so a file is an
array of records and an offset is a multiple of the record size)::

    offset       size   field
    0            4      magic        u32  0x4453584D (b"MXSD")
    4            8      key          i64
    12           8      count        i64
    20           8      last_seen    i64
    28           4      payload_len  u32  P = 4 * (1 + n_slots) * dim
    32           P      payload      f32  values[dim], then slot 0[dim], slot 1[dim], ...
    32 + P       4      crc          u32  zlib.crc32 of bytes [0, 32 + P)

The checksum is the one kernel of this module that has a fast twin
(mxrec_ref/fast/disk.py, ``crc32s``): a ``RecordFormat`` is given the one of
its store's backend, so the reference's records are packed by zlib alone.
"""
from __future__ import annotations

import errno
import zlib

import numpy as np

from ..errors import DiskCorruptionError

MAGIC = int.from_bytes(b"MXSD", "little")
HEADER_BYTES = 32
# Why a record fails its check, as the fast path's read loop reports it too (cext/_tiers.pxi, RecordMap).
BAD_CRC, BAD_FORMAT, BAD_KEY = 1, 2, 3


def record_dtype(dim: int, n_slots: int) -> np.dtype:
    """The packed numpy layout of one record (see the module docstring)."""
    return np.dtype([("magic", "<u4"), ("key", "<i8"), ("count", "<i8"), ("last_seen", "<i8"),
                     ("payload_len", "<u4"), ("payload", "<f4", ((1 + n_slots) * dim,)), ("crc", "<u4")])


def crc32s(records: np.ndarray) -> np.ndarray:
    """CRC-32 of every record's header and payload (all but the crc field) with zlib, one call per
    record over slices of one buffer, without copies: the reference's checksum."""
    size = records.dtype.itemsize
    data = memoryview(np.ascontiguousarray(records).view(np.uint8))
    return np.fromiter((zlib.crc32(data[start:start + size - 4]) for start in range(0, len(data), size)),
                       dtype=np.uint32, count=len(records))


def fault_reason(why: int, record, key) -> str:
    """What is wrong with a record: ``why`` BAD_CRC, BAD_FORMAT or BAD_KEY."""
    return ("fails its checksum" if why == BAD_CRC else "is not a record of this table's format"
            if why == BAD_FORMAT else f"holds key {int(record['key'])}, expected {int(key)}")


def corruption(table: str, path: str, offset: int, reason: str) -> DiskCorruptionError:
    """TIER-6's error: the table, the file and the byte offset of the record."""
    return DiskCorruptionError(errno.EIO, f"table {table!r}: SSD record in {path!r} at byte offset {offset} {reason}")


class RecordFormat:
    """One table's records: their layout, packing a batch of rows into records, unpacking them,
    and checking records read back.  ``crc32s``: the backend's checksum kernel."""

    def __init__(self, table: str, dim: int, n_slots: int, crc32s=crc32s):
        self.table, self.dim, self.n_slots = table, dim, n_slots
        self.dtype = record_dtype(dim, n_slots)
        self.size = self.dtype.itemsize
        self.payload_bytes = self.dtype["payload"].itemsize
        self.crc32s = crc32s

    def pack(self, keys, values, slots, counts, last_seen) -> np.ndarray:
        """The batch as records, checksums included, built column by column."""
        keys = np.asarray(keys, dtype=np.int64).ravel()
        n, dim = len(keys), self.dim
        values = np.asarray(values, dtype=np.float32)
        slots = np.asarray(slots, dtype=np.float32)
        counts = np.asarray(counts, dtype=np.int64).ravel()
        last_seen = np.asarray(last_seen, dtype=np.int64).ravel()
        if slots.size == 0 and self.n_slots == 0:
            slots = slots.reshape(0, n, dim)
        for name, array, shape in (("values", values, (n, dim)), ("slots", slots, (self.n_slots, n, dim)),
                                   ("counts", counts, (n,)), ("last_seen", last_seen, (n,))):
            if array.shape != shape:
                raise ValueError(f"table {self.table!r}: disk write: {name} must have shape {shape}, "
                                 f"got {array.shape}")
        records = np.empty(n, self.dtype)
        records["magic"], records["key"], records["count"], records["last_seen"] = MAGIC, keys, counts, last_seen
        records["payload_len"] = 4 * (1 + self.n_slots) * dim
        records["payload"][:, :dim] = values
        for slot in range(self.n_slots):
            records["payload"][:, dim * (1 + slot):dim * (2 + slot)] = slots[slot]
        records["crc"] = self.crc32s(records)
        return records

    def unpack(self, raw: np.ndarray, take: np.ndarray):
        """(values, slots, counts, last_seen) of records ``raw[take]`` (raw:
        records as bytes [n, record size]): whole records gathered as bytes
        first (contiguous rows, several times faster than gathering strided
        columns), then each output copied out of them."""
        records = np.take(raw, take, axis=0).view(self.dtype).reshape(-1)
        dim, payload = self.dim, records["payload"]
        slots = np.empty((self.n_slots, len(take), dim), dtype=np.float32)
        for slot in range(self.n_slots):
            slots[slot] = payload[:, dim * (1 + slot):dim * (2 + slot)]
        return (payload[:, :dim].astype(np.float32), slots, records["count"].astype(np.int64),
                records["last_seen"].astype(np.int64))

    def check(self, path: str, offsets, keys, records) -> None:
        """DiskCorruptionError for the first record (in read order) that fails its checksum, is not
        of this format, or holds another key than expected; its first fault, in that order."""
        crc_bad = self.crc32s(records) != records["crc"]
        form_bad = (records["magic"] != MAGIC) | (records["payload_len"] != self.payload_bytes)
        key_bad = records["key"] != keys
        bad = crc_bad | form_bad | key_bad
        if bad.any():
            i = int(np.argmax(bad))
            why = BAD_CRC if crc_bad[i] else BAD_FORMAT if form_bad[i] else BAD_KEY
            raise corruption(self.table, path, int(offsets[i]), fault_reason(why, records[i], keys[i]))
