"""Opt-in aliases: ``import mx_rec.<anything>`` loads ``mxrec_ref.compat.mx_rec.<anything>``,
and the NPU adapter's top-level names load their CPU faces: ``npu_bridge`` and ``tf_adapter``
``mxrec_ref.compat.npu``, ``npu_device`` ``mxrec_ref.compat.npu_device`` (spec/tf.md, TF-29).

None of them is installed as a top-level package, so a real mxRec or CANN install is never
shadowed; ``mxrec-ref run SCRIPT`` enables them for one script, and
``import mxrec_ref.compat.enable_mx_rec`` enables them in a process.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

# top-level name a script imports -> the package of this project that serves it
ALIASES = {
    "mx_rec": "mxrec_ref.compat.mx_rec",
    "npu_bridge": "mxrec_ref.compat.npu",
    "npu_device": "mxrec_ref.compat.npu_device",
    "tf_adapter": "mxrec_ref.compat.npu",
}
ALIAS, TARGET = "mx_rec", ALIASES["mx_rec"]


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str):
        self.target = target

    def create_module(self, spec):
        return importlib.import_module(self.target)

    def exec_module(self, module):
        pass  # already executed under its real name


class _AliasFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        top = fullname.partition(".")[0]
        if top not in ALIASES:
            return None
        real = ALIASES[top] + fullname[len(top):]
        if importlib.util.find_spec(real) is None:
            return None
        return importlib.util.spec_from_loader(fullname, _AliasLoader(real), is_package=True)


def enable() -> None:
    if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _AliasFinder())


def enabled() -> bool:
    return any(isinstance(f, _AliasFinder) for f in sys.meta_path)
