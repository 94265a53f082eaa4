"""What a table folder holds (CKPT-1): file names, dtypes, attributes, ``meta.json`` and ``manifest.json``.

Every writer and reader of the package takes the layout from here, so one table has one spelling.
"""
from __future__ import annotations

import dataclasses
import json
import os

import numpy as np

from ..config import TableConfig
from ..optimizers import SparseOptimizer

FORMAT_VERSION = 1
INT64 = np.dtype("<i8")
FLOAT32 = np.dtype("<f4")
META = "meta.json"
MANIFEST = "manifest.json"
MAX_DELTA_CHAIN = 10_000
READ_ATTEMPTS = 100      # versions a load may see replaced under it before it gives up (CKPT-11)

# Files are written and read in pieces of this many bytes, each checksummed while it is in
# the cache (CKPT-12); the data files of a table are written by up to IO_THREADS threads,
# as crc32 (mxrec_ref/checksum.py), os.write, os.readv and os.fsync release the GIL.
CHUNK_BYTES = 1 << 22
IO_THREADS = 4
TABLE_THREADS = 4        # tables the TF Saver writes side by side (mxrec_ref/tf/saver.py)

# the fields every meta.json holds (CKPT-1)
META_FIELDS = ("format_version", "table", "dim", "key_dtype", "optimizer", "n_keys", "n_pending",
               "clock", "clock_source")


@dataclasses.dataclass(frozen=True)
class Slice:
    """One ``<name>/slice.data`` + ``<name>/slice.attribute`` pair: ``rows`` rows of ``row_shape``."""

    name: str
    dtype: np.dtype
    row_shape: tuple
    rows: int
    attribute: list

    @property
    def data_file(self) -> str:
        return f"{self.name}/slice.data"

    @property
    def attribute_file(self) -> str:
        return f"{self.name}/slice.attribute"

    @property
    def row_bytes(self) -> int:
        return self.dtype.itemsize * int(np.prod(self.row_shape, dtype=np.int64))


def table_slices(optimizer: SparseOptimizer, n_keys: int, n_pending: int, dim: int, *,
                 n_removed: int | None = None, with_slots: bool = True) -> list[Slice]:
    """A table's slices in the order they are written (and the fault hook names them, CKPT-8): keys,
    embedding, the optimizer's slots, feat_info (admitted keys then pending), and a delta's removed keys."""
    n, m = int(n_keys), int(n_pending)
    slices = [Slice("key", INT64, (), n, [n, 8]), Slice("embedding", FLOAT32, (dim,), n, [n, dim, 4])]
    if with_slots:
        slices += [Slice(optimizer.checkpoint_slot_name(slot), FLOAT32, (dim,), n, [n, dim, 4])
                   for slot in optimizer.slot_names]
    slices.append(Slice("feat_info", INT64, (3,), n + m, [n + m, 3, 8]))
    if n_removed is not None:
        slices.append(Slice("removed", INT64, (), int(n_removed), [int(n_removed), 8]))
    return slices


def table_meta(config: TableConfig, optimizer: SparseOptimizer, n_keys: int, n_pending: int, clock, clock_source,
               *, root=None, previous=None, n_removed: int | None = None) -> dict:
    """``meta.json`` of a table of ``n_keys`` admitted and ``n_pending`` pending keys (CKPT-1); a
    delta (``previous``: the folder it builds on) also records its base and ``n_removed`` (CKPT-9)."""
    meta = {
        "format_version": FORMAT_VERSION,
        "table": config.name,
        "dim": config.dim,
        "key_dtype": config.key_dtype,
        "optimizer": optimizer.describe(),
        "n_keys": int(n_keys),
        "n_pending": int(n_pending),
        "clock": clock,
        "clock_source": clock_source,
        "kind": "full" if previous is None else "delta",
        "previous": None,
    }
    if previous is not None:
        # the base, relative to this checkpoint folder, so a tree of checkpoints can move;
        # both absolute here, so the current directory does not matter (CKPT-9)
        meta["previous"] = os.path.relpath(os.path.realpath(previous), os.path.realpath(root))
        meta["n_removed"] = int(n_removed)
    return meta


def meta_bytes(meta: dict) -> bytes:
    """``meta.json``'s bytes (one spelling, so every writer of a table writes the same file)."""
    return json.dumps(meta, indent=1, sort_keys=True).encode()


def manifest_bytes(digests: dict[str, tuple[int, int]]) -> bytes:
    """``manifest.json``: every file of the folder with its size and CRC-32 (CKPT-8)."""
    entries = {name: {"bytes": size, "crc32": f"{crc:08x}"} for name, (size, crc) in sorted(digests.items())}
    return json.dumps({"format_version": FORMAT_VERSION, "files": entries}, indent=1, sort_keys=True).encode()


def is_delta(meta: dict) -> bool:
    return meta.get("kind", "full") != "full"
