"""TF1 mode of ``mxrec-ref run`` (spec/tf.md, TF-26..TF-28): a script written against
TensorFlow 1.15 -- ``tf.Session``, ``tf.placeholder``, ``tf.variable_scope``, ``tf.layers.dense``,
``tf.train.AdamOptimizer``, ``dataset.make_initializable_iterator()`` -- runs unchanged on TF 2.21.

Three steps, in this order:
1. ``prepare_environment()`` before TensorFlow is imported: ``TF_USE_LEGACY_KERAS=1``, so
   ``tf.compat.v1.layers`` and ``tf.compat.v1.keras`` are Keras 2 (the ``tf_keras`` package,
   what TF 1.15's ``tf.layers`` were) instead of Keras 3, which has no TF1 layers.
2. ``enable(script)``: ``tf.compat.v1.disable_v2_behavior()`` -- graph mode, reference
   variables, v1 control flow and shapes, as TF 1.15 ran -- for the whole process;
3. and an import hook: ``import tensorflow`` (or ``from tensorflow import x``) written in the
   script or in a module of the script's folder gets ``tf.compat.v1``, TF 1.15's surface.
   Every other importer -- this project, TensorFlow, Keras, any installed library -- still
   gets the real ``tensorflow`` module, so their TF2 names keep working.
"""
from __future__ import annotations

import builtins
import importlib
import importlib.util
import logging
import os
import re
import sysconfig
import warnings

LEGACY_KERAS = "TF_USE_LEGACY_KERAS"
_MXREC_REF = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Names TF 1.15 had at ``tf.`` and TF 2 has only under ``tf.compat.v1``: a script that writes one
# at ``tf.`` cannot run on TF 2 as it is, so TF1 mode can only help it (TF-26).
_TF1_ONLY = re.compile(
    r"\btf\.(?:Session|InteractiveSession|placeholder|placeholder_with_default|variable_scope|get_variable|"
    r"ConfigProto|GPUOptions|GraphOptions|RunOptions|layers\.|losses\.|metrics\.|global_variables_initializer|"
    r"local_variables_initializer|tables_initializer|trainable_variables|global_variables|get_collection|"
    r"add_to_collection|GraphKeys|AUTO_REUSE|truncated_normal_initializer|glorot_uniform_initializer|"
    r"random_normal_initializer|logging\.|gfile\.|app\.|train\.(?:\w*Optimizer|Saver|MonitoredTrainingSession|"
    r"get_or_create_global_step|get_global_step|SessionRunHook|exponential_decay))\b")


def detect(source: str) -> bool:
    """Whether a script's source writes a TF 1.15 name at ``tf.`` (TF-26)."""
    return first_tf1_name(source) is not None


def first_tf1_name(source: str) -> str | None:
    match = _TF1_ONLY.search(source)
    return None if match is None else match.group(0)


def wanted(flag: bool | None, script: str) -> bool:
    """``--tf1`` / ``--no-tf1`` decide; without either, the script's own source does."""
    if flag is not None:
        return flag
    try:
        with open(script, encoding="utf-8", errors="replace") as file:
            name = first_tf1_name(file.read())
    except OSError:
        return False        # run_script reports the missing script
    if name is not None:    # shown with --verbose: why the mode is on
        logging.getLogger("mxrec_ref").info("TF1 mode: the script writes %s, a TF 1.15 name (--no-tf1: off)", name)
    return name is not None


def missing_tf_keras() -> str | None:
    """The one line saying how to install tf_keras when it is missing, else None."""
    if importlib.util.find_spec("tf_keras") is not None:
        return None
    # on Linux x86-64 tf-keras's own requirement would install TensorFlow's GPU build (pyproject.toml)
    return 'TF1 mode needs the tf_keras package (tf.layers are Keras 2\'s): pip install --no-deps "tf-keras>=2.20,<2.22"'


def prepare_environment() -> None:
    """Before TensorFlow is imported: TF1 layers through Keras 2 (tf_keras)."""
    os.environ[LEGACY_KERAS] = "1"


def enable(script: str) -> None:
    """Graph mode with v2 behaviour off, and ``tf.compat.v1`` at ``import tensorflow`` for the
    script's folder.  Needs ``prepare_environment()`` before TensorFlow's Keras loaders ran."""
    import tensorflow as tf

    # by name, as the Estimator package installs ``estimator`` into it: the module sys.modules holds
    v1 = importlib.import_module("tensorflow.compat.v1")
    if os.environ.get(LEGACY_KERAS) != "1":
        raise EnvironmentError(f"TF1 mode: {LEGACY_KERAS}=1 must be set before TensorFlow is imported "
                               f"(tf.layers come from tf_keras)")
    tf.compat.v1.disable_v2_behavior()
    # tf_keras warns at every tf.layers call that TF1 layers are deprecated: running them is the point here
    warnings.filterwarnings("ignore", message=r"`tf\.(?:compat\.v1\.)?layers\.", category=UserWarning)
    hook = _ScriptImports(v1, os.path.dirname(os.path.abspath(script)))
    if not isinstance(builtins.__import__, _ScriptImports):
        builtins.__import__ = hook


def enabled() -> bool:
    return isinstance(builtins.__import__, _ScriptImports)


class _ScriptImports:
    """``builtins.__import__`` that answers the script's own ``import tensorflow`` with TF 1.15's
    surface.  Who imports is read from the importing module's globals: its file must lie in the
    script's folder (or below) and outside this project and the interpreter's library folders."""

    def __init__(self, v1_module, script_dir: str):
        self.original = builtins.__import__
        self.v1_module = v1_module
        self.script_dir = script_dir + os.sep
        self.library_dirs = tuple(os.path.abspath(path) + os.sep for path in {
            _MXREC_REF, *(sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib"))})
        self._verdicts: dict[str, bool] = {}

    def __call__(self, name, globals=None, locals=None, fromlist=(), level=0):
        module = self.original(name, globals, locals, fromlist, level)
        if name == "tensorflow" and level == 0 and self._from_script(globals):
            return self.v1_module
        return module

    def _from_script(self, importer_globals) -> bool:
        if not importer_globals:
            return False
        file = importer_globals.get("__file__")
        if not file:
            return False
        if file not in self._verdicts:
            path = os.path.abspath(file)
            self._verdicts[file] = path.startswith(self.script_dir) and not path.startswith(self.library_dirs)
        return self._verdicts[file]
