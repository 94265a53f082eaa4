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

Installed on their own occasions, also here:

- ``global_variables_initializer`` (``tf.compat.v1``'s and the one ``Scaffold`` calls), on
  several ranks: also broadcast rank 0's initial values (``broadcast_at_initialization``,
  ``distributed.broadcast_global_variables``, SHARD-14); ``init`` installs it.
- ``DatasetV2.eos_map``: mxRec's dataset method (``host_ops.eos_map``, TF-33), added when
  the host ops are first imported; a method TF does not have, so it stays.
- ``tf.estimator`` / ``tf.compat.v1.estimator`` (and their ``sys.modules`` entries): this
  project's Estimator package (``install_into_tensorflow``, EST-9).
"""
from __future__ import annotations

import importlib
import sys

import tensorflow as tf
from tensorflow.python.client import session as tf_session
from tensorflow.python.data.ops import dataset_ops
from tensorflow.python.ops import variables as tf_variables    # where Scaffold finds the initializer
from tensorflow.python.training import saver as tf_saver

from . import distributed, fatal, graph_modifier, saver

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


# ------------------------------------------------- initial variables on several ranks (SHARD-14)
_ORIGINAL_INITIALIZERS: dict = {}


def broadcast_at_initialization(install: bool = True) -> None:
    """SHARD-14: on several ranks, ``global_variables_initializer()`` (tf.compat.v1's and the one
    ``Scaffold`` calls) also gives every rank rank 0's initial values, so an unmodified script's dense
    variables start equal on every rank.  ``init()`` installs it, ``terminate_config_initializer()``
    removes it; one rank installs nothing."""
    owners = ((tf_variables, "global_variables_initializer"), (tf.compat.v1, "global_variables_initializer"))
    if not install:
        for (owner, name), original in _ORIGINAL_INITIALIZERS.items():
            setattr(owner, name, original)
        _ORIGINAL_INITIALIZERS.clear()
        return
    if distributed.rank_size() == 1 or _ORIGINAL_INITIALIZERS:
        return
    original = tf_variables.global_variables_initializer

    def initializer_then_broadcast():
        init = original()
        if tf.executing_eagerly():
            return init
        with tf.control_dependencies([init]):
            shared = distributed.broadcast_global_variables()
        return tf.group(init, shared, name="init_and_broadcast")

    for owner, name in owners:
        _ORIGINAL_INITIALIZERS[(owner, name)] = getattr(owner, name)
        setattr(owner, name, initializer_then_broadcast)


# ------------------------------------------------------------- Dataset.eos_map (TF-33)
def install_dataset_eos_map(eos_map) -> None:
    """Give every dataset mxRec's ``eos_map`` method (its data/patch.py), calling ``eos_map(dataset, ...)``;
    idempotent.  A method TF does not have changes nothing else, so it is never removed."""
    if hasattr(dataset_ops.DatasetV2, "eos_map"):
        return

    def dataset_eos_map(self, librec, channel_id, max_train_steps=-1, max_eval_steps=-1):
        return eos_map(self, librec, channel_id, max_train_steps, max_eval_steps)

    dataset_ops.DatasetV2.eos_map = dataset_eos_map


# ------------------------------------------------------------------ tf.estimator (EST-9)
_ESTIMATOR_HOSTS = ("tensorflow", "tensorflow.compat.v1", "tensorflow.compat.v2")
_INSTALLED_ESTIMATOR: dict = {}      # (module name, attribute) -> what was there before (None: nothing)


def install_into_tensorflow(package) -> None:
    """Make ``tf.estimator`` (and ``tf.compat.v1.estimator``, ``tf.compat.v2.estimator``,
    ``import tensorflow.estimator``) ``package`` (this one: the package's own function passes it); idempotent."""
    for host_name in _ESTIMATOR_HOSTS:
        host = _host(host_name)
        if host is None or (host_name, "estimator") in _INSTALLED_ESTIMATOR:
            continue
        _INSTALLED_ESTIMATOR[(host_name, "estimator")] = (getattr(host, "estimator", None)
                                                          if _has(host, "estimator") else None)
        setattr(host, "estimator", package)
        module_name = f"{host_name}.estimator"
        _INSTALLED_ESTIMATOR[(module_name, None)] = sys.modules.get(module_name)
        sys.modules[module_name] = package
        sys.modules[f"{module_name}.export"] = package.export


def uninstall_from_tensorflow() -> None:
    """Put back what ``install_into_tensorflow`` replaced (for tests); idempotent."""
    for (name, attribute), previous in list(_INSTALLED_ESTIMATOR.items()):
        if attribute is None:
            if previous is None:
                sys.modules.pop(name, None)
                sys.modules.pop(f"{name}.export", None)
            else:
                sys.modules[name] = previous
            continue
        host = _host(name)
        if previous is None:
            try:
                delattr(host, attribute)
            except AttributeError:
                pass
        else:
            setattr(host, attribute, previous)
    _INSTALLED_ESTIMATOR.clear()


def estimator_installed() -> bool:
    return bool(_INSTALLED_ESTIMATOR)


def _host(name: str):
    # imported by name, not read as tf.compat.v1: a first ``import tensorflow.compat.v1`` loads the
    # module again and replaces the attribute, which would drop what was set on the old one
    return importlib.import_module(name)


def _has(host, attribute: str) -> bool:
    try:
        return attribute in vars(host)
    except TypeError:
        return False
