"""Sparse tables in TF checkpoints (reference section 3).

``init()`` patches ``tf.compat.v1.train.Saver`` (the class every Scaffold and
MonitoredTrainingSession uses) so that ``save(sess, "<dir>/model",
global_step=N)`` also writes every ``is_save`` table to
``<dir>/sparse-model-N/<table>/`` and ``restore`` reads them back;
``max_to_keep`` prunes sparse folders with their dense checkpoints.
``terminate_config_initializer()`` removes the patch.
"""
from __future__ import annotations

import os
import re
import shutil

from tensorflow.python.training import saver as tf_saver

from .config_initializer import ConfigInitializer

_ORIGINAL = {}


def sparse_dir(checkpoint_path: str) -> str:
    head, tail = os.path.split(checkpoint_path)
    return os.path.join(head, f"sparse-{tail}")


def save_tables(checkpoint_path: str) -> str:
    target = sparse_dir(checkpoint_path)
    for table in ConfigInitializer.get_instance().tables.values():
        if table.is_save:
            table.store.save(target)
    return target


def restore_tables(checkpoint_path: str) -> None:
    source = sparse_dir(checkpoint_path)
    tables = [t for t in ConfigInitializer.get_instance().tables.values() if t.is_save]
    if tables and not os.path.isdir(source):
        raise FileNotFoundError(f"restore: no sparse checkpoint {source!r} next to {checkpoint_path!r}")
    for table in tables:
        table.store.load(source)


def _prune(saver, checkpoint_path: str) -> None:
    """Delete sparse folders whose dense checkpoint the Saver has pruned."""
    head, tail = os.path.split(checkpoint_path)
    prefix = re.sub(r"-\d+$", "", tail)
    keep = {os.path.basename(p) for p in saver.last_checkpoints}
    pattern = re.compile(rf"^sparse-{re.escape(prefix)}-\d+$")
    for entry in os.listdir(head or "."):
        if pattern.match(entry) and entry[len("sparse-"):] not in keep:
            shutil.rmtree(os.path.join(head, entry), ignore_errors=True)


def _save(self, sess, save_path, global_step=None, *args, **kwargs):
    path = _ORIGINAL["save"](self, sess, save_path, global_step, *args, **kwargs)
    from . import config_initializer

    if path and config_initializer.is_initialized():
        save_tables(path)
        _prune(self, path)
    return path


def _restore(self, sess, save_path):
    result = _ORIGINAL["restore"](self, sess, save_path)
    from . import config_initializer

    if config_initializer.is_initialized():
        restore_tables(save_path)
    return result


def install() -> None:
    if _ORIGINAL:
        return
    _ORIGINAL["save"] = tf_saver.Saver.save
    _ORIGINAL["restore"] = tf_saver.Saver.restore
    tf_saver.Saver.save = _save
    tf_saver.Saver.restore = _restore


def uninstall() -> None:
    if not _ORIGINAL:
        return
    tf_saver.Saver.save = _ORIGINAL.pop("save")
    tf_saver.Saver.restore = _ORIGINAL.pop("restore")
