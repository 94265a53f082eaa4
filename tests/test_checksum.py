"""mxrec_ref.checksum: the checkpoint CRC-32 is zlib's function, whichever implementation computes it
(CKPT-8, CKPT-12: a checkpoint written with ISA-L loads where only zlib is installed, and back)."""
import builtins
import importlib
import zlib

import numpy as np
from hypothesis import given, strategies as st

from mxrec_ref import checksum


@given(st.binary(max_size=4096), st.binary(max_size=4096))
def test_crc32_is_zlibs_and_chains_piece_by_piece(first, second):
    whole = first + second
    assert checksum.crc32(whole) == zlib.crc32(whole)
    assert checksum.crc32(second, checksum.crc32(first)) == zlib.crc32(whole)


def test_crc32_of_array_pieces_as_the_checkpoint_takes_them():
    data = np.random.default_rng(0).integers(0, 256, 3 * (1 << 20) + 17, dtype=np.uint8)
    view, crc = memoryview(data), 0
    for start in range(0, len(view), 1 << 20):       # CHUNK_BYTES-sized pieces of a memoryview
        crc = checksum.crc32(view[start:start + (1 << 20)], crc)
    assert crc == zlib.crc32(data.tobytes())


def test_without_isal_zlib_computes_it(monkeypatch):
    real_import = builtins.__import__

    def no_isal(name, *args, **kwargs):
        if name.startswith("isal"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_isal)
    try:
        fallback = importlib.reload(checksum)
        assert fallback.IMPLEMENTATION == "zlib"
        assert fallback.crc32(b"mxrec-ref") == zlib.crc32(b"mxrec-ref")
    finally:
        monkeypatch.setattr(builtins, "__import__", real_import)
        importlib.reload(checksum)
