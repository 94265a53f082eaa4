"""`init()` and `terminate_config_initializer()` (reference 1.2).

``init`` creates the process's configuration and installs the TF patches
(``patches.py``); ``terminate_config_initializer`` forgets every table and the
optimizer and removes them.  The configuration itself is
``config_initializer.ConfigInitializer``, a registry that imports nothing of
the TF layer.
"""
from __future__ import annotations

import atexit

from . import config_initializer, distributed, patches
from .config_initializer import ConfigInitializer


def init(**kwargs) -> ConfigInitializer:
    """Create the configuration (mxRec's kwargs, plus ``backend="fast"|"ref"``,
    overridable by the MXREC_REF_BACKEND environment variable)."""
    instance = config_initializer.create(**kwargs)
    config_initializer.log_ignored_environment()
    distributed.share_cores()        # several ranks on one host: split its cores (SHARD-14)
    patches.broadcast_at_initialization()     # several ranks: rank 0's initial variables (SHARD-14)
    patches.install()
    atexit.register(terminate_config_initializer)
    return instance


def terminate_config_initializer() -> None:
    """Forget every table and the optimizer; idempotent."""
    if config_initializer.discard():
        patches.uninstall()
        patches.broadcast_at_initialization(install=False)
