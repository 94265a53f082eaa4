"""The on-disk table format, shared by every backend (spec/checkpoint.md).

mxRec's sparse layout (reference section 3), one folder per table::

    <dir>/<table>/key/slice.data              int64 [n] ascending keys
    <dir>/<table>/key/slice.attribute         int64 [n, 8]
    <dir>/<table>/embedding/slice.data        float32 [n, dim], row i belongs to key i
    <dir>/<table>/embedding/slice.attribute   int64 [n, dim, 4]
    <dir>/<table>/<Kind>_<slot>/slice.*       optimizer slots, same shape as embedding
    <dir>/<table>/feat_info/slice.data        int64 [n + m, 3]: (key, count, last_seen),
                                              the n admitted keys then the m pending ones
    <dir>/<table>/meta.json                   table name, dim, key dtype, optimizer,
                                              clock, format version

Files are raw little-endian.  A table is written into a temporary sibling
folder, its ``manifest.json`` (every file's size and CRC-32) last, and moved
into place with one rename, so a reader sees the old complete table or the
new complete table (CKPT-4); ``read_table`` verifies the manifest (CKPT-8).
"""
from __future__ import annotations

import json
import os
import zlib
import shutil
from pathlib import Path

import numpy as np

from .config import TableConfig
from .errors import CheckpointError
from .optimizers import SparseOptimizer
from .store import TableState

FORMAT_VERSION = 1
_INT64 = np.dtype("<i8")
_FLOAT32 = np.dtype("<f4")


def write_table(directory, config: TableConfig, optimizer: SparseOptimizer, state: TableState, *,
                previous=None, removed: np.ndarray | None = None) -> str:
    """Write ``state`` as a full table, or -- with ``previous`` (the checkpoint
    folder it builds on) -- as a delta: ``state`` then holds only the changed
    keys and ``removed`` the keys gone since ``previous`` (CKPT-9)."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    final = root / config.name
    temporary = root / f".{config.name}.writing-{os.getpid()}"
    if temporary.exists():
        shutil.rmtree(temporary)
    temporary.mkdir()
    n, dim = len(state.keys), config.dim
    _write_slice(temporary / "key", state.keys.astype(_INT64, copy=False), [n, 8])
    _write_slice(temporary / "embedding", state.values.astype(_FLOAT32, copy=False), [n, dim, 4])
    for slot in optimizer.slot_names:
        _write_slice(temporary / optimizer.checkpoint_slot_name(slot),
                     state.slots[slot].astype(_FLOAT32, copy=False), [n, dim, 4])
    feat = np.concatenate([
        np.stack([state.keys, state.counts, state.last_seen], axis=1).reshape(-1, 3),
        np.stack([state.pending_keys, state.pending_counts, state.pending_last_seen], axis=1).reshape(-1, 3),
    ]).astype(_INT64)
    _write_slice(temporary / "feat_info", feat, [len(feat), 3, 8])
    if previous is not None:
        removed = np.zeros(0, np.int64) if removed is None else removed
        _write_slice(temporary / "removed", removed.astype(_INT64, copy=False), [len(removed), 8])
    meta = {
        "format_version": FORMAT_VERSION,
        "table": config.name,
        "dim": dim,
        "key_dtype": config.key_dtype,
        "optimizer": optimizer.describe(),
        "n_keys": n,
        "n_pending": len(state.pending_keys),
        "clock": state.clock,
        "clock_source": state.clock_source,
        "kind": "full" if previous is None else "delta",
        # the base, relative to this checkpoint folder, so a tree of checkpoints can move
        "previous": None if previous is None else os.path.relpath(Path(previous).resolve(), root.resolve()),
    }
    if previous is not None:
        meta["n_removed"] = len(removed)
    (temporary / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True))
    _write_manifest(temporary)
    _replace(temporary, final)
    return str(final)


def read_table(directory, config: TableConfig, optimizer: SparseOptimizer, *, source_table: str | None = None,
               slots_required: bool = True, _depth: int = 0) -> TableState:
    """Read and fully validate a table; raises CheckpointError naming the
    table, the file and the problem (CKPT-5).  ``source_table`` reads a table
    saved under another name (warm start with renaming).  With
    ``slots_required=False`` a checkpoint of another optimizer kind is
    accepted and its slots come back at the optimizer's initial values (WS-4)."""
    root = Path(directory)
    table = config.name
    saved_name = source_table or table
    folder = root / saved_name
    if not (folder / "meta.json").is_file():
        raise CheckpointError(f"table {table!r}: directory: no table {saved_name!r} in checkpoint {str(root)!r} "
                              f"(tables present: {list_tables(root)})")
    _verify_manifest(folder, table)
    meta = _read_meta(folder, table)
    if meta["dim"] != config.dim:
        raise CheckpointError(f"table {table!r}: dim: the checkpoint has dim {meta['dim']}, "
                              f"the table has dim {config.dim}")
    saved_kind = meta["optimizer"].get("kind")
    same_slots = saved_kind == optimizer.kind
    if not same_slots and slots_required:
        raise CheckpointError(f"table {table!r}: optimizer: the checkpoint was trained with {saved_kind!r}, "
                              f"the store uses {optimizer.kind!r}; their slots differ")
    n, m, dim = meta["n_keys"], meta["n_pending"], config.dim
    keys = _read_slice(folder / "key", _INT64, [n, 8], table)
    values = _read_slice(folder / "embedding", _FLOAT32, [n, dim, 4], table).reshape(n, dim)
    if same_slots:
        slots = {slot: _read_slice(folder / optimizer.checkpoint_slot_name(slot), _FLOAT32, [n, dim, 4], table)
                 .reshape(n, dim) for slot in optimizer.slot_names}
    else:
        slots = {slot: np.full((n, dim), value, dtype=np.float32)
                 for slot, value in optimizer.slot_initial_values().items()}
    feat = _read_slice(folder / "feat_info", _INT64, [n + m, 3, 8], table).reshape(n + m, 3)
    if not np.array_equal(feat[:n, 0], keys):
        _corrupt(table, folder / "feat_info", "its first keys differ from key/slice.data")
    pending = feat[n:, 0]
    for name, array in (("key", keys), ("feat_info", pending)):
        if array.size > 1 and not np.all(array[1:] > array[:-1]):
            _corrupt(table, folder / name, "keys are not strictly ascending")
    if pending.size and keys.size:   # both ascending (checked above): a binary search finds common keys
        at = np.minimum(np.searchsorted(keys, pending), keys.size - 1)
        both = keys[at] == pending
    else:
        both = np.zeros(0, dtype=bool)
    if both.any():
        _corrupt(table, folder / "feat_info", "a key is both admitted and pending")
    all_keys = feat[:, 0]
    if (all_keys == -1).any():
        _corrupt(table, folder / "feat_info", "holds the padding key -1, which never has a row (ADM-6)")
    if all_keys.size and (all_keys.min() < config.key_min or all_keys.max() > config.key_max):
        bad = int(all_keys.min() if all_keys.min() < config.key_min else all_keys.max())
        raise CheckpointError(f"table {table!r}: key_dtype: checkpoint key {bad} does not fit the table's "
                              f"key_dtype {config.key_dtype}")
    if (feat[:, 1] < 0).any():
        _corrupt(table, folder / "feat_info", "a count is negative")
    clock, source = meta["clock"], meta["clock_source"]
    if source not in (None, "step", "timestamp") or (clock is None) != (source is None):
        _corrupt(table, folder / "meta.json", f"clock {clock!r} / clock_source {source!r} are inconsistent")
    state = TableState(
        keys=keys, values=values, slots=slots,
        counts=feat[:n, 1].copy(), last_seen=feat[:n, 2].copy(),
        pending_keys=pending.copy(), pending_counts=feat[n:, 1].copy(), pending_last_seen=feat[n:, 2].copy(),
        clock=None if clock is None else int(clock), clock_source=source,
    )
    if meta.get("kind", "full") == "full":
        return state
    if _depth >= MAX_DELTA_CHAIN:
        _corrupt(table, folder / "meta.json", f"more than {MAX_DELTA_CHAIN} deltas in a chain (a cycle?)")
    removed = _read_slice(folder / "removed", _INT64, [int(meta.get("n_removed", 0)), 8], table)
    base_root = (root / meta["previous"]).resolve()
    base = read_table(base_root, config, optimizer, source_table=saved_name, slots_required=slots_required,
                      _depth=_depth + 1)
    return apply_delta(base, state, removed)


MAX_DELTA_CHAIN = 10_000


def delta_between(previous: TableState, current: TableState) -> tuple[TableState, np.ndarray]:
    """The keys of ``current`` that differ from ``previous`` (new, or any of
    row, slots, count, last-seen changed), and the keys ``previous`` had that
    ``current`` has not (CKPT-9)."""
    def changed(keys, columns, old_keys, old_columns):
        at = np.minimum(np.searchsorted(old_keys, keys), max(len(old_keys) - 1, 0))
        if len(old_keys) == 0:
            return np.ones(len(keys), dtype=bool)
        same = old_keys[at] == keys
        for new, old in zip(columns, old_columns):
            new_bits = new.view(np.uint32) if new.dtype == np.float32 else new
            old_bits = old.view(np.uint32) if old.dtype == np.float32 else old
            equal = new_bits == old_bits[at]
            same &= equal.all(axis=1) if equal.ndim == 2 else equal
        return ~same

    slot_names = sorted(current.slots)
    admitted = changed(current.keys, [current.values, *(current.slots[s] for s in slot_names), current.counts,
                                      current.last_seen],
                       previous.keys, [previous.values, *(previous.slots[s] for s in slot_names), previous.counts,
                                       previous.last_seen])
    pending = changed(current.pending_keys, [current.pending_counts, current.pending_last_seen],
                      previous.pending_keys, [previous.pending_counts, previous.pending_last_seen])
    now = np.union1d(current.keys, current.pending_keys)
    before = np.union1d(previous.keys, previous.pending_keys)
    removed = np.setdiff1d(before, now)
    delta = TableState(
        keys=current.keys[admitted], values=current.values[admitted],
        slots={s: current.slots[s][admitted] for s in current.slots}, counts=current.counts[admitted],
        last_seen=current.last_seen[admitted], pending_keys=current.pending_keys[pending],
        pending_counts=current.pending_counts[pending], pending_last_seen=current.pending_last_seen[pending],
        clock=current.clock, clock_source=current.clock_source)
    return delta, removed


def apply_delta(base: TableState, delta: TableState, removed: np.ndarray) -> TableState:
    """Base + delta: delta keys replace whatever the base had for them (admitted
    or pending), removed keys disappear."""
    gone = np.union1d(np.union1d(removed, delta.keys), delta.pending_keys)
    keep = ~np.isin(base.keys, gone)
    keep_pending = ~np.isin(base.pending_keys, gone)

    def merged(old, new, mask, order):
        return np.concatenate([old[mask], new])[order]

    order = np.argsort(np.concatenate([base.keys[keep], delta.keys]), kind="stable")
    pending_order = np.argsort(np.concatenate([base.pending_keys[keep_pending], delta.pending_keys]), kind="stable")
    return TableState(
        keys=merged(base.keys, delta.keys, keep, order),
        values=merged(base.values, delta.values, keep, order),
        slots={s: merged(base.slots[s], delta.slots[s], keep, order) for s in base.slots},
        counts=merged(base.counts, delta.counts, keep, order),
        last_seen=merged(base.last_seen, delta.last_seen, keep, order),
        pending_keys=merged(base.pending_keys, delta.pending_keys, keep_pending, pending_order),
        pending_counts=merged(base.pending_counts, delta.pending_counts, keep_pending, pending_order),
        pending_last_seen=merged(base.pending_last_seen, delta.pending_last_seen, keep_pending, pending_order),
        clock=delta.clock, clock_source=delta.clock_source)


def list_tables(directory) -> list[str]:
    root = Path(directory)
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "meta.json").is_file() and not p.name.startswith("."))


# --------------------------------------------------------------- manifest
MANIFEST = "manifest.json"


def _file_digest(path: Path) -> str:
    """CRC-32 of the file: catches flipped bytes and truncation at memory
    speed (a cryptographic hash would triple the time of a save)."""
    crc = 0
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            crc = zlib.crc32(block, crc)
    return f"{crc:08x}"


def _write_manifest(folder: Path) -> None:
    """Every file of the table with its size and CRC-32, written last (CKPT-8)."""
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    entries = {str(p.relative_to(folder)): {"bytes": p.stat().st_size, "crc32": _file_digest(p)} for p in files}
    path = folder / MANIFEST
    with open(path, "w") as f:
        json.dump({"format_version": FORMAT_VERSION, "files": entries}, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())


def _verify_manifest(folder: Path, table: str) -> None:
    path = folder / MANIFEST
    if not path.is_file():
        _corrupt(table, path, "manifest is missing: the table was not written completely")
    try:
        entries = json.loads(path.read_text())["files"]
    except (OSError, ValueError, KeyError) as exc:
        _corrupt(table, path, f"unreadable manifest ({exc})")
    for name, entry in sorted(entries.items()):
        file = folder / name
        if not file.is_file():
            _corrupt(table, file, "file listed in the manifest is missing")
        if file.stat().st_size != entry["bytes"]:
            _corrupt(table, file, f"holds {file.stat().st_size} bytes, the manifest says {entry['bytes']}")
        if _file_digest(file) != entry.get("crc32"):
            _corrupt(table, file, "checksum differs from the manifest: the file is corrupted")


# ------------------------------------------------------------------ files
def _write_slice(folder: Path, data: np.ndarray, attribute: list[int]) -> None:
    folder.mkdir()
    with open(folder / "slice.data", "wb") as f:
        f.write(np.ascontiguousarray(data).data)
        f.flush()
        os.fsync(f.fileno())
    np.asarray(attribute, dtype=_INT64).tofile(folder / "slice.attribute")


def _read_slice(folder: Path, dtype: np.dtype, attribute: list[int], table: str) -> np.ndarray:
    data_path, attr_path = folder / "slice.data", folder / "slice.attribute"
    for path in (data_path, attr_path):
        if not path.is_file():
            _corrupt(table, path, "file is missing")
    saved_attribute = np.fromfile(attr_path, dtype=_INT64).tolist()
    if saved_attribute != attribute:
        _corrupt(table, attr_path, f"attribute {saved_attribute} does not match the expected {attribute}")
    expected_bytes = int(np.prod(attribute[:-1])) * dtype.itemsize
    if data_path.stat().st_size != expected_bytes:
        _corrupt(table, data_path, f"holds {data_path.stat().st_size} bytes, expected {expected_bytes}")
    return np.fromfile(data_path, dtype=dtype).astype(dtype.newbyteorder("="), copy=False)


def _read_meta(folder: Path, table: str) -> dict:
    path = folder / "meta.json"
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        _corrupt(table, path, f"unreadable ({exc})")
    required = ("format_version", "table", "dim", "key_dtype", "optimizer", "n_keys", "n_pending",
                "clock", "clock_source")
    missing = [k for k in required if k not in meta]
    if missing:
        _corrupt(table, path, f"fields missing: {missing}")
    if meta["format_version"] != FORMAT_VERSION:
        _corrupt(table, path, f"format version {meta['format_version']} is not {FORMAT_VERSION}")
    for name in ("dim", "n_keys", "n_pending"):
        if not isinstance(meta[name], int) or meta[name] < 0:
            _corrupt(table, path, f"{name} must be a non-negative integer")
    return meta


def _corrupt(table: str, path: Path, problem: str):
    raise CheckpointError(f"table {table!r}: checkpoint: {str(path)!r}: {problem}")


def _replace(temporary: Path, final: Path) -> None:
    """Swap the finished folder into place: rename the old one aside, rename
    the new one in, delete the old one."""
    old = final.with_name(f".{final.name}.old-{os.getpid()}")
    if final.exists():
        if old.exists():
            shutil.rmtree(old)
        os.rename(final, old)
    os.rename(temporary, final)
    _fsync_directory(final.parent)
    if old.exists():
        shutil.rmtree(old)


def _fsync_directory(folder: Path) -> None:
    """Make the rename itself durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
