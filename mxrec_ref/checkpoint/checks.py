"""CKPT-5's checks of a version, written once: every reader applies them, a whole table or a chunk at a time.

A check never changes a store: the readers raise before anything is installed.  ``KeyChecks`` sees a
table's keys in chunks (one chunk for a one-process read, many for a streamed one) and reports the
problem first in a fixed order of checks -- not the first chunk's -- so every reader names the same
problem for the same files.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from ..config import TableConfig
from ..errors import CheckpointError
from ..optimizers import SparseOptimizer
from .format import FORMAT_VERSION, INT64, META, META_FIELDS, MANIFEST, Slice


def corrupt(table: str, path: Path, problem: str):
    """Raise the CheckpointError of a damaged file (CKPT-5, CKPT-8)."""
    raise CheckpointError(f"table {table!r}: checkpoint: {str(path)!r}: {problem}")


def manifest_entries(raw, folder: Path, table: str) -> dict:
    """The ``files`` of a ``manifest.json`` (its bytes), each entry checked to be a file inside the folder."""
    try:
        entries = json.loads(bytes(raw))["files"]
        if not isinstance(entries, dict):
            raise ValueError("'files' is not a mapping")
    except (ValueError, KeyError, TypeError) as exc:
        corrupt(table, folder / MANIFEST, f"unreadable manifest ({exc})")
    for name in sorted(entries):
        entry = entries[name]
        if not isinstance(entry, dict) or os.path.isabs(name) or ".." in Path(name).parts:
            corrupt(table, folder / MANIFEST, f"malformed entry {name!r}")
    return entries


def check_digest(path: Path, size: int, crc: int, entry: dict, table: str) -> None:
    """A file's size and CRC-32 as its manifest entry says (CKPT-8)."""
    if size != entry.get("bytes"):
        corrupt(table, path, f"holds {size} bytes, the manifest says {entry.get('bytes')}")
    if f"{crc:08x}" != entry.get("crc32"):
        corrupt(table, path, "checksum differs from the manifest: the file is corrupted")


def read_meta(data, folder: Path, table: str) -> dict:
    """``meta.json``'s bytes (None: not in the manifest), parsed and checked field by field."""
    path = folder / META
    if data is None:
        corrupt(table, path, "file is missing")
    try:
        meta = json.loads(bytes(data))
        if not isinstance(meta, dict):
            raise ValueError("not a JSON object")
    except ValueError as exc:
        corrupt(table, path, f"unreadable ({exc})")
    missing = [k for k in META_FIELDS if k not in meta]
    if missing:
        corrupt(table, path, f"fields missing: {missing}")
    if meta["format_version"] != FORMAT_VERSION:
        corrupt(table, path, f"format version {meta['format_version']} is not {FORMAT_VERSION}")
    for name in ("dim", "n_keys", "n_pending"):
        if not isinstance(meta[name], int) or meta[name] < 0:
            corrupt(table, path, f"{name} must be a non-negative integer")
    if not isinstance(meta["optimizer"], dict):
        corrupt(table, path, "optimizer must be an object")
    return meta


def check_meta(meta: dict, config: TableConfig, optimizer: SparseOptimizer, slots_required: bool) -> bool:
    """The checkpoint's dim is the table's, and its optimizer's slots are the store's where they are
    required.  Returns whether the slots are the store's (else only rows are taken)."""
    table = config.name
    if meta["dim"] != config.dim:
        raise CheckpointError(f"table {table!r}: dim: the checkpoint has dim {meta['dim']}, "
                              f"the table has dim {config.dim}")
    saved_kind = meta["optimizer"].get("kind")
    same_slots = saved_kind == optimizer.kind
    if not same_slots and slots_required:
        raise CheckpointError(f"table {table!r}: optimizer: the checkpoint was trained with {saved_kind!r}, "
                              f"the store uses {optimizer.kind!r}; their slots differ")
    return same_slots


def check_clock(meta: dict, folder: Path, table: str) -> None:
    clock, source = meta["clock"], meta["clock_source"]
    if source not in (None, "step", "timestamp") or (clock is None) != (source is None):
        corrupt(table, folder / META, f"clock {clock!r} / clock_source {source!r} are inconsistent")


def delta_removed(meta: dict, folder: Path, table: str) -> int | None:
    """How many removed keys a delta's meta.json announces (CKPT-9); None for a full table."""
    if meta.get("kind", "full") == "full":
        return None
    previous = meta.get("previous")
    if meta.get("kind") != "delta" or not isinstance(previous, str) or not previous:
        corrupt(table, folder / META, f"kind {meta.get('kind')!r} / previous {previous!r} do not describe a delta")
    n_removed = meta.get("n_removed", 0)
    if not isinstance(n_removed, int) or n_removed < 0:
        corrupt(table, folder / META, "n_removed must be a non-negative integer")
    return n_removed


def check_attribute(raw, folder: Path, spec: Slice, table: str) -> None:
    """A ``slice.attribute`` (its bytes) says the shape the layout expects."""
    saved = np.frombuffer(raw, dtype=INT64, count=len(raw) // 8).tolist()
    if saved != spec.attribute:
        corrupt(table, folder / spec.attribute_file, f"attribute {saved} does not match the expected {spec.attribute}")


def check_data_size(size: int, folder: Path, spec: Slice, table: str) -> None:
    expected = spec.rows * spec.row_bytes
    if size != expected:
        corrupt(table, folder / spec.data_file, f"holds {size} bytes, expected {expected}")


class KeyChecks:
    """CKPT-5's checks of a version's keys, fed a chunk at a time: ``admitted`` with the key file's keys
    and the matching feat_info rows, then ``pending`` with feat_info's pending rows, then ``both`` with
    the (kept) admitted and pending keys.  ``raise_first`` reports the first problem in ``ORDER``."""

    ORDER = ("feat keys", "ascending key", "ascending feat_info", "both", "padding", "key range", "count")

    def __init__(self, config: TableConfig, folder: Path):
        self.config, self.folder = config, folder
        self.problems: dict[str, CheckpointError] = {}
        self.last = {"key": None, "feat_info": None}
        self.lowest = self.highest = None

    def admitted(self, keys: np.ndarray, feat: np.ndarray) -> None:
        if not np.array_equal(feat[:, 0], keys):
            self._note("feat keys", "feat_info", "its first keys differ from key/slice.data")
        self._keys("key", keys, feat[:, 1])

    def pending(self, feat: np.ndarray) -> None:
        self._keys("feat_info", feat[:, 0], feat[:, 1])

    def both(self, keys: np.ndarray, pending: np.ndarray) -> None:
        """No key both admitted and pending; both ascending (checked first): a binary search finds them."""
        if pending.size and keys.size:
            at = np.minimum(np.searchsorted(keys, pending), keys.size - 1)
            if (keys[at] == pending).any():
                self._note("both", "feat_info", "a key is both admitted and pending")

    def raise_first(self) -> None:
        if self.lowest is not None and "key range" not in self.problems:
            bad = None
            if self.lowest < self.config.key_min:
                bad = self.lowest
            elif self.highest > self.config.key_max:
                bad = self.highest
            if bad is not None:
                self.problems["key range"] = CheckpointError(
                    f"table {self.config.name!r}: key_dtype: checkpoint key {bad} does not fit the table's "
                    f"key_dtype {self.config.key_dtype}")
        for kind in self.ORDER:
            if kind in self.problems:
                raise self.problems[kind]

    def _note(self, kind: str, name: str, problem: str) -> None:
        if kind not in self.problems:
            self.problems[kind] = CheckpointError(f"table {self.config.name!r}: checkpoint: "
                                                  f"{str(self.folder / name)!r}: {problem}")

    def _keys(self, name: str, keys: np.ndarray, counts: np.ndarray) -> None:
        if keys.size:
            last = self.last[name]
            ascending = bool(np.all(keys[1:] > keys[:-1])) and (last is None or keys[0] > last)
            if not ascending:
                self._note(f"ascending {name}", name, "keys are not strictly ascending")
            self.last[name] = keys[-1]
            # ascending (else that problem outranks these): the ends bound the keys and a binary
            # search finds -1, instead of more passes over a million keys
            at = int(np.searchsorted(keys, -1))
            if at < keys.size and int(keys[at]) == -1:
                self._note("padding", "feat_info", "holds the padding key -1, which never has a row (ADM-6)")
            low, high = int(keys[0]), int(keys[-1])
            self.lowest = low if self.lowest is None else min(self.lowest, low)
            self.highest = high if self.highest is None else max(self.highest, high)
        if (counts < 0).any():
            self._note("count", "feat_info", "a count is negative")
