"""Every attribute of TensorFlow (and ``sys.excepthook``) that the TF layer
replaces, in one place: ``install()`` (called by ``init``) and ``uninstall()``
(called by ``terminate_config_initializer``).  The behaviour behind each patch
lives in the module named beside it; this module only wires it in.

- ``tf.compat.v1.train.Saver.save`` / ``restore``: also save and restore the
  sparse tables (``saver.py``, TF-6).
- ``DatasetV1._make_one_shot_iterator`` / ``_make_initializable_iterator``:
  record which dataset each TF1 iterator reads, for the graph rewrite
  (``graph_modifier.py``, GRAPH-1).
- ``BaseSession.__init__`` and ``sys.excepthook``: track live sessions and end
  the script promptly on an uncaught error (``fatal.py``, TF-13).  These two
  stay after ``uninstall()``, as they always have: an error raised after the
  configuration is gone must still not hang the interpreter's shutdown.
"""
from __future__ import annotations

import sys

from tensorflow.python.client import session as tf_session
from tensorflow.python.data.ops import dataset_ops
from tensorflow.python.training import saver as tf_saver

from . import fatal, graph_modifier, saver

_ORIGINAL: dict = {}          # (owner, attribute) -> the original, for the patches uninstall() removes
_PERMANENT: dict = {}         # the same, for the error handling that stays installed


def _save(self, sess, save_path, global_step=None, *args, **kwargs):
    return saver.save(_ORIGINAL[(tf_saver.Saver, "save")], self, sess, save_path, global_step, *args, **kwargs)


def _restore(self, sess, save_path):
    return saver.restore(_ORIGINAL[(tf_saver.Saver, "restore")], self, sess, save_path)


def _recording(attribute: str, kind: str):
    def make_iterator(self, *args, **kwargs):
        iterator = _ORIGINAL[(dataset_ops.DatasetV1, attribute)](self, *args, **kwargs)
        graph_modifier.note_iterator(self, iterator, kind)
        return iterator
    return make_iterator


def _tracked_session_init(self, *args, **kwargs):
    _PERMANENT[(tf_session.BaseSession, "__init__")](self, *args, **kwargs)
    fatal.track_session(self)


def _excepthook(kind, value, tb):
    fatal.excepthook(kind, value, tb, previous=_PERMANENT[(sys, "excepthook")])


def _patches():
    return [(tf_saver.Saver, "save", _save), (tf_saver.Saver, "restore", _restore),
            (dataset_ops.DatasetV1, "_make_one_shot_iterator", _recording("_make_one_shot_iterator", "one_shot")),
            (dataset_ops.DatasetV1, "_make_initializable_iterator",
             _recording("_make_initializable_iterator", "initializable"))]


def install() -> None:
    """Install every patch; idempotent."""
    if not _PERMANENT:
        for owner, attribute, replacement in ((tf_session.BaseSession, "__init__", _tracked_session_init),
                                              (sys, "excepthook", _excepthook)):
            _PERMANENT[(owner, attribute)] = getattr(owner, attribute)
            setattr(owner, attribute, replacement)
    if _ORIGINAL:
        return
    for owner, attribute, replacement in _patches():
        _ORIGINAL[(owner, attribute)] = getattr(owner, attribute)
        setattr(owner, attribute, replacement)


def uninstall() -> None:
    """Put back what ``install`` replaced (but the error handling); idempotent."""
    for (owner, attribute), original in list(_ORIGINAL.items()):
        setattr(owner, attribute, original)
    _ORIGINAL.clear()


def installed() -> bool:
    return bool(_ORIGINAL)
