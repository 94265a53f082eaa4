"""Checkpoints of a table sharded over ranks, without O(table) memory on any rank (spec/sharding.md).

Save (SHARD-10): every rank saves at the same call.  Rank 0 checks the target and opens the save's
temporary folder (``.<table>.writing-<pid>-<n>``, CKPT-4), whose path every rank receives; each rank
writes its own keys -- or, for an incremental save, what changed in them (CKPT-9) -- into
``<temporary>/slices/rank<r>/`` with the one-process writer (same files, CRC-32 taken as the bytes are
written, manifest last; not fsynced, as nothing reads them after a crash); after a barrier rank 0
merges the slices in key order, a chunk at a time, into the one-process layout (CKPT-1) in the same
temporary folder, deletes the slices, writes ``meta.json`` and ``manifest.json``, fsyncs them all and
switches the folder in atomically (CKPT-4).  The files are
byte for byte those one process would write for the whole table.  Until the switch the old table is
untouched, so a rank killed at any point leaves the previous checkpoint loadable (SHARD-10).

Load (SHARD-11): every rank streams the merged files in chunks, checksumming each piece as it
arrives, and keeps only the rows of the keys it owns (``key mod M == rank``, any ``M``): peak memory is
its own rows plus a chunk.  A sum over ranks then checks that every key of every file read was kept by
exactly one rank.  Warm start and delta chains use the same filter.

This module holds only the collective steps -- who writes, the agreements, slicing by owner -- and
drives the format package's public API for everything on disk (``mxrec_ref/checkpoint/``: the folder
protocol, ``TableWriter``, ``TableReader``, ``read_owned``, CKPT-5's checks).
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
from pathlib import Path
from typing import Callable

import numpy as np

from .. import checkpoint as ckpt
from ..contract import WarmStartPlan
from ..errors import CheckpointError, MxrecError, UsageError
from ..state import TableState, merge_warm_start

SLICES = "slices"                    # <temporary>/slices/rank<r>/: each rank's part of a save
read_owned = ckpt.read_owned         # a rank's keys of a checkpoint, streamed (SHARD-11)
logger = logging.getLogger("mxrec_ref.distributed")


# =============================================================================== save
def save(store, directory, incremental: bool) -> str:
    """SHARD-10 on one rank of ``store`` (a ShardedStore; its lock held).  Every rank returns the
    table's path under rank 0's ``directory``, or raises: the failing rank its own error, the others
    a UsageError naming it (SHARD-8)."""
    name, rank, comm = store.name, store.rank, store.comm
    mine = store.local.export()                     # this rank's keys only: O(owned rows)
    previous = store.last_checkpoint               # (folder, this rank's slice of it) or None
    delta = bool(incremental) and previous is not None
    if comm.size == 1:                              # nothing to merge: the one-process writer
        path = _attempt(store, "save", lambda: ckpt.save_state(directory, store.config, store.optimizer, mine,
                                                                base=previous if delta else None))
        store.last_checkpoint = (os.path.dirname(path), mine)
        return path
    with contextlib.ExitStack() as stack:
        # 1. rank 0 checks the target and opens the temporary folder; every rank learns its path
        def open_folder():
            root = Path(os.path.abspath(ckpt.checked_directory(directory, name)))
            if delta:
                ckpt.check_delta_target(root, previous[0], name)
            with ckpt.io_errors(name, root):
                target = ckpt.prepare_save(root, name)       # a symlinked table folder: its target (CKPT-14)
                temporary = stack.enter_context(ckpt.temporary_folder(target.parent, target.name))
                (temporary / SLICES).mkdir()
            ckpt.fault_point("begin")
            return str(root), str(temporary)
        root, temporary = _attempt(store, "save", open_folder, only_rank0=True)
        root, temporary = Path(root), Path(temporary)

        # 2. every rank writes its slice -- a table folder of its own keys; the agreement after it is the barrier
        def write_slice():
            state, removed = ckpt.delta_between(previous[1], mine) if delta else (mine, None)
            folder = temporary / SLICES / f"rank{rank}"
            meta = ckpt.table_meta(store.config, store.optimizer, len(state.keys), len(state.pending_keys),
                                   state.clock, state.clock_source, root=folder,
                                   previous=previous[0] if delta else None,
                                   n_removed=None if removed is None else len(removed))
            with ckpt.io_errors(name, folder):
                folder.mkdir()
                # not fsynced: rank 0 reads them back before the merged files are made durable, and
                # after a crash nothing reads them (the old table is still in place)
                ckpt.write_state_files(folder, store.optimizer, state, meta, removed, durable=False)
        _attempt(store, "save", write_slice)

        # 3. rank 0 merges the slices in key order and switches the table in (CKPT-4)
        def merge_and_switch():
            with ckpt.io_errors(name, root):
                merge_slices(temporary, [temporary / SLICES / f"rank{r}" for r in range(comm.size)],
                             store.config, store.optimizer, root=root, previous=previous[0] if delta else None)
                ckpt.switch(temporary, ckpt.table_target(root, name))
            return str(root / name)
        path, error = None, None
        if rank == 0:
            try:
                path = merge_and_switch()
            except MxrecError as failed:
                error = failed
    # rank 0 has removed the temporary folder (the old version, after a switch): "remove old"
    path = store.agree(error, "save", path=path)[0]["path"]
    store.last_checkpoint = (os.path.dirname(path), mine)
    logger.info("table %r: rank %d of %d saved its %d keys to %s (%s)", name, rank, comm.size, len(mine.keys), path,
                "incremental" if delta else "full")
    return path


def _attempt(store, what: str, work, only_rank0: bool = False):
    """``work()`` on this rank (or rank 0 only), then an agreement: every rank raises if any failed
    (SHARD-8), and every rank gets rank 0's result."""
    result, error = None, None
    if store.rank == 0 or not only_rank0:
        try:
            result = work()
        except MxrecError as failed:
            error = failed
    headers = store.agree(error, what, result=result if store.rank == 0 else None)
    return headers[0]["result"]


def merge_slices(folder: Path, slices: list[Path], config, optimizer, *, root: Path, previous=None) -> None:
    """Write into ``folder`` the table the ``slices`` (table folders written by this save's ranks,
    disjoint keys) hold together, in the one-process layout (CKPT-1), streaming: each slice is read
    once, in order, its CRC-32 checked as it is read, and at most a chunk of rows per slice is in
    memory (``ckpt.TableReader`` in, ``ckpt.TableWriter`` out)."""
    table = config.name
    with contextlib.ExitStack() as stack:
        readers = [stack.enter_context(ckpt.TableReader.at_path(path, config, optimizer)) for path in slices]
        clocks = [r.clock for r in readers if r.clock is not None]
        sources = [r.clock_source for r in readers if r.clock_source is not None]
        removed_total = sum(r.n_removed or 0 for r in readers) if previous is not None else None
        meta = ckpt.table_meta(config, optimizer, sum(r.n_keys for r in readers), sum(r.n_pending for r in readers),
                               max(clocks) if clocks else None, sources[0] if sources else None,
                               root=root, previous=previous, n_removed=removed_total)
        writer = stack.enter_context(ckpt.TableWriter(folder, optimizer, meta))
        slot_names = list(optimizer.slot_names)
        chunk = readers[0].chunk_rows()      # about CHUNK_BYTES of admitted rows per slice

        def admitted(reader):
            def read(rows):
                keys, values, slots, counts, last_seen = reader.admitted(rows)
                return [keys, values, *(slots[slot] for slot in slot_names), counts, last_seen]
            return reader.n_keys, read

        def write_admitted(columns):
            writer.admitted(columns[0], columns[1], dict(zip(slot_names, columns[2:-2])), columns[-2], columns[-1])
        _merge_in_key_order([admitted(r) for r in readers], write_admitted, table, chunk)
        _merge_in_key_order([(r.n_pending, lambda rows, r=r: [r.pending(rows)]) for r in readers],
                            lambda columns: writer.pending(*columns[0].T), table, chunk)
        if previous is not None:
            _merge_in_key_order([(r.n_removed or 0, lambda rows, r=r: [r.removed(rows)]) for r in readers],
                                lambda columns: writer.removed(columns[0]), table, chunk)
        for reader in readers:
            reader.finish()              # every byte read, CRC-32 as the slice's manifest says
            reader.close()
        shutil.rmtree(folder / SLICES)      # the table folder holds the merged files only
        writer.finish()


def _merge_in_key_order(sources: list[tuple[int, Callable]], write: Callable, table: str, chunk: int) -> None:
    """K-way merge of sorted, disjoint sources (their row count and ``read(rows)``, which returns
    parallel columns, the first keyed) into ``write(columns)``, a chunk at a time.  Each round every
    source holds at least a chunk of rows (or its rest); the smallest of their last keys bounds the
    round: every row up to it, from every source, is written in key order, and no row left behind is
    smaller."""
    buffered: list[list | None] = [None] * len(sources)
    remaining = [rows for rows, _ in sources]
    last = None
    while True:
        for s, (_, read) in enumerate(sources):
            if (buffered[s] is None or len(buffered[s][0]) < chunk) and remaining[s]:
                take = min(chunk, remaining[s])
                fresh = read(take)
                buffered[s] = fresh if buffered[s] is None else [np.concatenate([have, new])
                                                                  for have, new in zip(buffered[s], fresh)]
                remaining[s] -= take
        live = [s for s in range(len(sources)) if buffered[s] is not None and len(buffered[s][0])]
        if not live:
            return
        bound = min(_keys(buffered[s][0])[-1] for s in live)
        pieces = []
        for s in live:
            cut = int(np.searchsorted(_keys(buffered[s][0]), bound, side="right"))
            pieces.append([column[:cut] for column in buffered[s]])
            buffered[s] = [column[cut:] for column in buffered[s]]
        keys = np.concatenate([_keys(piece[0]) for piece in pieces])
        order = np.argsort(keys, kind="stable")
        keys = keys[order]
        if (keys.size > 1 and not np.all(keys[1:] > keys[:-1])) or (last is not None and keys[0] <= last):
            raise CheckpointError(f"table {table!r}: checkpoint: the ranks' slices are not disjoint and sorted "
                                  f"(key {int(keys[0])}); every key must have one owner (SHARD-2)")
        last = keys[-1]
        write([np.concatenate([piece[column] for piece in pieces])[order] for column in range(len(pieces[0]))])


def _keys(column: np.ndarray) -> np.ndarray:
    return column if column.ndim == 1 else column[:, 0]


# ================================================================== collective reads
def load(store, directory) -> None:
    """SHARD-11 on one rank (lock held): read this rank's keys, check that the ranks loaded every key
    exactly once, then replace this rank's store."""
    folder = _shared_folder(store, directory, "load")
    state, _ = _read_collectively(store, folder, "load", check=lambda state: store.local.check_fits(len(state.keys)))
    store.local.import_state(state)      # the tiers import the same way (CON-10)
    store.last_checkpoint = (folder, state)
    store.share_stats(None, "load")
    logger.info("table %r: rank %d of %d loaded its %d keys from %s", store.name, store.rank, store.rank_size,
                len(state.keys), folder)


@dataclasses.dataclass(frozen=True, eq=False)
class ShardedWarmStartPlan(WarmStartPlan):
    """A warm-start plan of one rank: ``loaded`` holds this rank's keys, ``n_loaded`` the table's."""

    n_loaded: int = 0


def plan_warm_start(store, directory, source_table, now, after) -> ShardedWarmStartPlan:
    """WS-7 on one rank: this rank's keys of the checkpoint (SHARD-11's filter), read and checked."""
    folder = _shared_folder(store, directory, "warm_start")
    checked = {}

    def check(loaded: TableState) -> None:
        checked["now"] = store.check_time("now", now, required=False)
        if after is not None:
            store.check_plan(after)
        if store.local.key_limit() is not None:     # each owner holds the configured capacity (SHARD-6)
            before = after.keys_after if after is not None else store.local.export().keys
            checked["keys_after"] = np.union1d(before, loaded.keys)
            store.local.check_fits(len(checked["keys_after"]))

    loaded, n_loaded = _read_collectively(store, folder, "warm_start", check, source_table=source_table,
                                          slots_required=False)
    return ShardedWarmStartPlan(store_id=id(store), table=store.name, directory=folder, loaded=loaded,
                                now=checked["now"], keys_after=checked.get("keys_after"), n_loaded=n_loaded)


def apply_warm_start(store, plan) -> int:
    """WS-3 on one rank's keys (lock held); collective."""
    error, merged = None, None
    try:
        store.check_plan(plan)
        merged = merge_warm_start(store.local.export(), plan.loaded, store.config.admit_threshold, plan.now)
        store.local.check_fits(len(merged.keys))
    except MxrecError as failed:
        error = failed
    store.agree(error, "warm_start")
    store.local.import_state(merged)
    store.share_stats(None, "warm_start")
    return plan.n_loaded


def _shared_folder(store, directory, what: str) -> str:
    """Rank 0's ``directory``, absolute, on every rank (SHARD-14: one checkpoint, wherever each rank runs)."""
    return _attempt(store, what, lambda: os.path.abspath(ckpt.checked_directory(directory, store.name)),
                    only_rank0=True)


def _read_collectively(store, folder: str, what: str, check, **options) -> tuple[TableState, int]:
    """Every rank reads its keys of ``folder`` and runs ``check`` on them; every rank raises if one
    failed (SHARD-8), reads again if the ranks read different versions (a save replaced the table
    between their reads, CKPT-11), and checks that every key of every version read was kept by
    exactly one rank.  Returns this rank's state and the number of admitted keys over ranks."""
    keep = store.owns
    for _ in range(ckpt.READ_ATTEMPTS):
        error, state, tallies = None, None, None
        try:
            state, tallies = read_owned(folder, store.config, store.optimizer, keep, **options)
            check(state)
        except MxrecError as failed:
            error = failed
        headers = store.agree(error, what, tallies=tallies, n_keys=None if state is None else len(state.keys))
        versions = {tuple(t.identity for t in h["tallies"]) for h in headers}
        if len(versions) == 1:
            break
    else:
        raise CheckpointError(f"table {store.name!r}: checkpoint: {folder!r} was replaced {ckpt.READ_ATTEMPTS} times "
                              f"while the ranks read it; stop the process saving it, or load another checkpoint")
    for v, tally in enumerate(headers[0]["tallies"]):
        kept = [sum(h["tallies"][v].kept[i] for h in headers) for i in range(3)]
        if kept != list(tally.totals):
            raise UsageError(
                f"table {store.name!r}: {what}: the {store.rank_size} ranks loaded {kept[0]} of {tally.totals[0]} "
                f"admitted keys, {kept[1]} of {tally.totals[1]} pending keys and {kept[2]} of {tally.totals[2]} "
                f"removed keys of {tally.folder!r}; every key must be loaded by exactly one rank (SHARD-11)")
    return state, sum(h["n_keys"] for h in headers)
