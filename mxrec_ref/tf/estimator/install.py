"""``install_into_tensorflow()``: ``tf.estimator`` and ``tf.compat.v1.estimator`` resolve to this
package for the rest of the process (EST-9).  TensorFlow 2.16 removed ``tf.estimator``, and the last
``tensorflow-estimator`` (2.15.0) does not import on TF 2.21; ``mxrec-ref run`` calls this, as it
enables the ``mx_rec`` alias, and scripts that import the project may call it themselves."""
from __future__ import annotations

import importlib
import sys


_HOSTS = ("tensorflow", "tensorflow.compat.v1", "tensorflow.compat.v2")
_INSTALLED: dict = {}      # (module name, attribute) -> what was there before (None: nothing)


def install_into_tensorflow(package) -> None:
    """Make ``tf.estimator`` (and ``tf.compat.v1.estimator``, ``tf.compat.v2.estimator``,
    ``import tensorflow.estimator``) ``package`` (this one: the package's own function passes it); idempotent."""
    for host_name in _HOSTS:
        host = _host(host_name)
        if host is None or (host_name, "estimator") in _INSTALLED:
            continue
        _INSTALLED[(host_name, "estimator")] = getattr(host, "estimator", None) if _has(host, "estimator") else None
        setattr(host, "estimator", package)
        module_name = f"{host_name}.estimator"
        _INSTALLED[(module_name, None)] = sys.modules.get(module_name)
        sys.modules[module_name] = package
        sys.modules[f"{module_name}.export"] = package.export


def uninstall_from_tensorflow() -> None:
    """Put back what ``install_into_tensorflow`` replaced (for tests); idempotent."""
    for (name, attribute), previous in list(_INSTALLED.items()):
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
    _INSTALLED.clear()


def installed() -> bool:
    return bool(_INSTALLED)


def _host(name: str):
    # imported by name, not read as tf.compat.v1: a first ``import tensorflow.compat.v1`` loads the
    # module again and replaces the attribute, which would drop what was set on the old one
    return importlib.import_module(name)


def _has(host, attribute: str) -> bool:
    try:
        return attribute in vars(host)
    except TypeError:
        return False
