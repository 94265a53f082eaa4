"""Opt-in ``mx_rec`` alias: makes ``import mx_rec.<anything>`` load
``mxrec_ref.compat.mx_rec.<anything>``.

Not installed as a top-level package, so a real mxRec install is never
shadowed; ``mxrec-ref run SCRIPT`` enables it for one script, and
``import mxrec_ref.compat.enable_mx_rec`` enables it in a process.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

ALIAS, TARGET = "mx_rec", "mxrec_ref.compat.mx_rec"


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str):
        self.target = target

    def create_module(self, spec):
        return importlib.import_module(self.target)

    def exec_module(self, module):
        pass  # already executed under its real name


class _AliasFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname != ALIAS and not fullname.startswith(ALIAS + "."):
            return None
        real = TARGET + fullname[len(ALIAS):]
        if importlib.util.find_spec(real) is None:
            return None
        return importlib.util.spec_from_loader(fullname, _AliasLoader(real), is_package=True)


def enable() -> None:
    if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _AliasFinder())


def enabled() -> bool:
    return any(isinstance(f, _AliasFinder) for f in sys.meta_path)
