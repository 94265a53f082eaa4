"""Reading a whole table into memory (CKPT-5, CKPT-8, CKPT-11, CKPT-12): every file of one version
read on a few threads, each checksummed as it arrives, then decoded and checked (``checks``).  A
delta is read with its chain, base first (CKPT-9)."""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from ..config import TableConfig
from ..errors import CheckpointError
from ..optimizers import SparseOptimizer
from ..state import TableState
from .checks import (KeyChecks, check_attribute, check_clock, check_data_size, check_digest, check_meta, corrupt,
                     delta_removed, manifest_entries, read_meta)
from .files import read_at
from .folder import Vanished, checked_directory, read_one_version
from .format import IO_THREADS, MANIFEST, MAX_DELTA_CHAIN, META, Slice, is_delta, table_slices


def read_table(directory, config: TableConfig, optimizer: SparseOptimizer, *, source_table: str | None = None,
               slots_required: bool = True) -> TableState:
    """Read and fully validate a table; raises CheckpointError naming the
    table, the file and the problem (CKPT-5).  ``source_table`` reads a table
    saved under another name (warm start with renaming).  With
    ``slots_required=False`` a checkpoint of another optimizer kind is
    accepted and its slots come back at the optimizer's initial values (WS-4).
    A delta is read with its chain, base first (CKPT-9); a chain that loops
    raises CheckpointError."""
    def read(root):
        return read_version(root, source_table or config.name, config, optimizer, slots_required)
    state, _ = read_chain(directory, config.name, read)
    return state


def read_chain(directory, table: str, read_one):
    """A table's state through its delta chain (CKPT-9): ``read_one(root)`` returns (meta, state,
    removed, extra) of one version; the chain is followed to its full base, then each delta applied
    over it.  Returns the state and every version's ``extra``, newest first."""
    root = Path(checked_directory(directory, table))
    deltas, seen, extras = [], [], []
    while True:
        real = os.path.realpath(root)
        if real in seen:
            raise CheckpointError(f"table {table!r}: checkpoint: the delta chain loops back to {str(root)!r} "
                                  f"(chain: {seen})")
        seen.append(real)
        meta, state, removed, extra = read_one(root)
        extras.append(extra)
        if not is_delta(meta):
            break
        if len(seen) > MAX_DELTA_CHAIN:
            raise CheckpointError(f"table {table!r}: checkpoint: more than {MAX_DELTA_CHAIN} deltas in a chain")
        deltas.append((state, removed))
        root = root / meta["previous"]
    for delta, removed in reversed(deltas):
        state = state.with_delta(delta, removed)
    return state, extras


def read_version(root: Path, saved_name: str, config: TableConfig, optimizer: SparseOptimizer,
                 slots_required: bool):
    """(meta, state, removed keys or None, None) of one complete version of ``root/saved_name`` (CKPT-11)."""
    def read(fd, folder):
        return (*_decode(read_verified_files(fd, folder, config.name), folder, config, optimizer,
                         slots_required), None)
    return read_one_version(root, saved_name, config.name, read)


def read_verified_files(fd: int, folder: Path, table: str) -> dict[str, np.ndarray]:
    """Every file the manifest lists, read through ``fd``, sizes and CRC-32s checked (CKPT-8)."""
    try:
        manifest, _ = read_at(fd, MANIFEST)
    except FileNotFoundError:
        raise Vanished(MANIFEST, "manifest is missing: the table was not written completely") from None
    except OSError as error:
        corrupt(table, folder / MANIFEST, f"cannot be read ({error.strerror or error})")
    entries = manifest_entries(manifest, folder, table)
    names = sorted(entries)
    files = {}
    with ThreadPoolExecutor(max_workers=max(1, min(IO_THREADS, len(names))),
                            thread_name_prefix="mxrec-ckpt-read") as pool:
        futures = [pool.submit(read_at, fd, name) for name in names]
        try:
            for name, future in zip(names, futures):     # the first problem in name order is reported
                try:
                    data, crc = future.result()
                except (FileNotFoundError, NotADirectoryError):
                    raise Vanished(name, "file listed in the manifest is missing") from None
                except OSError as error:
                    corrupt(table, folder / name, f"cannot be read ({error.strerror or error})")
                check_digest(folder / name, len(data), crc, entries[name], table)
                files[name] = data
        except BaseException:
            for future in futures:
                future.cancel()
            raise
    return files


def _read_slice(files: dict, folder: Path, spec: Slice, table: str) -> np.ndarray:
    for part in (spec.data_file, spec.attribute_file):
        if part not in files:
            corrupt(table, folder / part, "file is missing")
    check_attribute(files[spec.attribute_file], folder, spec, table)
    data = files[spec.data_file]
    check_data_size(len(data), folder, spec, table)
    return np.frombuffer(data, dtype=spec.dtype).astype(spec.dtype.newbyteorder("="), copy=False).reshape(
        (spec.rows,) + spec.row_shape)


def _decode(files: dict[str, np.ndarray], folder: Path, config: TableConfig, optimizer: SparseOptimizer,
            slots_required: bool):
    """(meta, state, removed or None) from a version's verified files, fully validated (CKPT-5)."""
    table = config.name
    meta = read_meta(files.get(META), folder, table)
    same_slots = check_meta(meta, config, optimizer, slots_required)
    n, m, dim = meta["n_keys"], meta["n_pending"], config.dim
    layout = {spec.name: spec for spec in table_slices(optimizer, n, m, dim)}
    keys = _read_slice(files, folder, layout["key"], table)
    values = _read_slice(files, folder, layout["embedding"], table)
    if same_slots:
        slots = {slot: _read_slice(files, folder, layout[optimizer.checkpoint_slot_name(slot)], table)
                 for slot in optimizer.slot_names}
    else:
        slots = {slot: np.full((n, dim), value, dtype=np.float32)
                 for slot, value in optimizer.slot_initial_values().items()}
    feat = _read_slice(files, folder, layout["feat_info"], table)
    pending = feat[n:, 0]
    checks = KeyChecks(config, folder)
    checks.admitted(keys, feat[:n])
    checks.pending(feat[n:])
    checks.both(keys, pending)
    checks.raise_first()
    check_clock(meta, folder, table)
    clock, source = meta["clock"], meta["clock_source"]
    state = TableState(
        keys=keys, values=values, slots=slots,
        counts=feat[:n, 1].copy(), last_seen=feat[:n, 2].copy(),
        pending_keys=pending.copy(), pending_counts=feat[n:, 1].copy(), pending_last_seen=feat[n:, 2].copy(),
        clock=None if clock is None else int(clock), clock_source=source,
    )
    n_removed = delta_removed(meta, folder, table)
    removed = None
    if n_removed is not None:
        removed = _read_slice(files, folder, table_slices(optimizer, n, m, dim, n_removed=n_removed)[-1], table)
    return meta, state, removed
