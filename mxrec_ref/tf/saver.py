"""Sparse tables in TF checkpoints (reference section 3).

``init()`` patches ``tf.compat.v1.train.Saver`` (the class every Scaffold and
MonitoredTrainingSession uses; the patch is in ``patches.py``) so that
``save(sess, "<dir>/model", global_step=N)`` also writes every ``is_save``
table to ``<dir>/sparse-model-N/<table>/`` and ``restore`` reads them back;
``max_to_keep`` prunes sparse folders with their dense checkpoints.
``terminate_config_initializer()`` removes the patch.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import tensorflow as tf

from ..checkpoint import TABLE_THREADS, delta_bases, fault_point, saved_optimizer, write_file_atomically
from . import config_initializer
from .config_initializer import ConfigInitializer
from .distributed import rank_id, rank_size, shared_path, world_barrier


def sparse_dir(checkpoint_path: str) -> str:
    head, tail = os.path.split(checkpoint_path)
    return os.path.join(head, f"sparse-{tail}")


TRAIN_STEPS_FILE = "mxrec_train_steps.json"   # {table: training lookups run}, beside the table folders


def save_tables(checkpoint_path: str, incremental: bool = False) -> str:
    target = sparse_dir(checkpoint_path)
    saved = [t for t in ConfigInitializer.get_instance().tables.values() if t.is_save]
    # the tables are written side by side (their I/O releases the GIL, CKPT-12); the hook
    # names them in table order, each once it is in place, whatever order they finish in.  A
    # sharded table's save is collective (SHARD-8): on several ranks they go one after another,
    # in table order, so every rank makes the same calls in the same order.
    threads = max(1, min(TABLE_THREADS, len(saved))) if rank_size() == 1 else 1
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="mxrec-saver") as pool:
        writes = [pool.submit(table.store.save, target, incremental=incremental) for table in saved]
        try:
            for table, write in zip(saved, writes):
                write.result()
                fault_point(f"saver: table {table.table_name!r} written")
        except BaseException:
            for write in writes:
                write.cancel()
            raise
    if saved and rank_id() == 0:
        # the step a graph without a global step gives its lookups (TF-5): restored with the tables
        write_file_atomically(os.path.join(target, TRAIN_STEPS_FILE),      # the folder protocol (CKPT-4)
                              json.dumps({t.table_name: t.train_lookups_run for t in saved}).encode())
    return target


def restore_tables(checkpoint_path: str) -> None:
    source = sparse_dir(checkpoint_path)
    tables = [t for t in ConfigInitializer.get_instance().tables.values() if t.is_save]
    if tables and not os.path.isdir(source):
        raise FileNotFoundError(f"restore: no sparse checkpoint {source!r} next to {checkpoint_path!r}")
    if ConfigInitializer.get_instance().optimizer_instance is None:     # an evaluate/predict process (TF-21)
        for table in tables:
            if table.opened_store is None:
                table.open_store(saved_optimizer(source, table.table_name))
    steps_file = os.path.join(source, TRAIN_STEPS_FILE)
    steps = {}
    if os.path.isfile(steps_file):
        with open(steps_file) as handle:      # closed at once: restore runs in long-lived training processes
            steps = json.load(handle)
    for table in tables:
        table.store.load(source)
        table.continue_clock(steps.get(table.table_name))


def _prune(checkpoint_path: str) -> None:
    """Delete sparse folders whose dense checkpoint is gone: pruned by
    ``max_to_keep``, or never finished (a save that crashed before its dense part)."""
    head, tail = os.path.split(checkpoint_path)
    head = head or "."
    prefix = re.sub(r"-\d+$", "", tail)
    pattern = re.compile(rf"^sparse-{re.escape(prefix)}-\d+$")
    folders = [e for e in os.listdir(head) if pattern.match(e)]
    kept = {e for e in folders if os.path.exists(os.path.join(head, e[len("sparse-"):] + ".index"))}
    needed = set(kept)
    for entry in kept:                 # the bases kept deltas build on (CKPT-9)
        needed |= {os.path.basename(base) for base in delta_bases(os.path.join(head, entry))}
    for entry in folders:
        if entry not in needed:
            shutil.rmtree(os.path.join(head, entry), ignore_errors=True)


def save(dense_save, saver, sess, save_path, global_step=None, *args, save_delta=False,
         is_incremental_checkpoint=False, **kwargs):
    """``Saver.save`` with the tables (``dense_save`` is TF's own).  Tables
    first, then the dense checkpoint: TF writes its ``checkpoint`` state file
    last, so a checkpoint is listed only once its tables are complete; a crash
    in between leaves an unlisted sparse folder (TF-6, CKPT-8).  On several ranks every rank saves
    under rank 0's ``save_path`` (SHARD-14): a script that names a folder per process still writes one
    checkpoint, and gets its path back."""
    save_path = shared_path(save_path)
    if config_initializer.is_initialized():
        save_tables(_checkpoint_path(sess, save_path, global_step),
                    incremental=bool(save_delta or is_incremental_checkpoint))
    if rank_id() == 0:        # SHARD-10: the dense checkpoint from rank 0 only (every rank holds the same)
        path = dense_save(saver, sess, save_path, global_step, *args, **kwargs)
        fault_point("saver: dense checkpoint written")
        if path and config_initializer.is_initialized():
            _prune(path)
    else:
        path = _checkpoint_path(sess, save_path, global_step)
    if rank_size() > 1:
        world_barrier()       # no rank reads the checkpoint before rank 0 has listed it
    return path


def _checkpoint_path(sess, save_path: str, global_step) -> str:
    """The prefix TF's Saver.save will write (its own naming rule)."""
    if global_step is None:
        return save_path
    if not isinstance(global_step, (int, np.integer)):
        global_step = tf.compat.v1.train.global_step(sess, global_step)
    return f"{save_path}-{int(global_step)}"


def restore(dense_restore, saver, sess, save_path):
    """``Saver.restore`` with the tables (``dense_restore`` is TF's own); on several ranks from rank 0's
    ``save_path``, where ``save`` wrote (SHARD-14)."""
    save_path = shared_path(save_path)
    result = dense_restore(saver, sess, save_path)
    if config_initializer.is_initialized():
        restore_tables(save_path)
    return result
