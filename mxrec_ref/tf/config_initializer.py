"""`init()` and the process-wide configuration singleton (reference 1.2).

mxRec keeps one ``ConfigInitializer`` per process: ``init`` creates it (a
second ``init`` raises), ``terminate_config_initializer`` destroys it.  It
holds the tables, the one global sparse optimizer, the feature specs and the
mode switches (dynamic shape, dynamic expansion, backend).
"""
from __future__ import annotations

import atexit
import os
import warnings

from .constants import BACKEND_ENV, MAX_INT32

_INSTANCE: "ConfigInitializer | None" = None

_STEP_KWARGS = ("max_steps", "train_steps", "eval_steps", "save_steps")
_KNOWN_KWARGS = set(_STEP_KWARGS) | {
    "if_load", "use_dynamic", "use_dynamic_expansion", "use_lccl", "bind_cpu", "save_checkpoint_due_time",
    "save_delta_checkpoints_secs", "is_incremental_checkpoint", "restore_model_version",
    "recent_key_count_threshold", "backend", "use_mpi", "rank_id", "rank_size", "train_interval",
    "prefetch_batch_number", "use_hot",
}


class TrainParamsConfig:
    """Per-mode pipeline objects (the graph modifier fills the initializers)."""

    def __init__(self):
        self.ascend_global_hashtable_collection = "ASCEND_GLOBAL_HASHTABLE_COLLECTION"
        self._initializers = {}

    def get_initializer(self, is_training: bool):
        return self._initializers.get(bool(is_training))

    def set_initializer(self, is_training: bool, initializer) -> None:
        self._initializers[bool(is_training)] = initializer


class ConfigInitializer:
    def __init__(self, **kwargs):
        unknown = sorted(set(kwargs) - _KNOWN_KWARGS)
        if unknown:
            warnings.warn(f"mxrec_ref.init: ignoring unknown arguments {unknown}", stacklevel=3)
        for name in _STEP_KWARGS:
            value = kwargs.get(name, -1)
            if isinstance(value, bool) or not isinstance(value, int) or not -1 <= value <= MAX_INT32:
                raise ValueError(f"init: {name}: must be an integer in [-1, {MAX_INT32}], got {value!r}")
            setattr(self, name, value)
        if self.max_steps == 0 and self.train_steps == 0 and self.eval_steps == 0:
            raise ValueError("init: max_steps, train_steps and eval_steps must not all be 0")
        for name, default in (("if_load", False), ("use_dynamic", True), ("use_dynamic_expansion", False),
                              ("use_lccl", False), ("bind_cpu", True), ("is_incremental_checkpoint", False)):
            value = kwargs.get(name, default)
            if not isinstance(value, (bool, int)) or value not in (0, 1):
                raise ValueError(f"init: {name}: must be True or False, got {value!r}")
            setattr(self, name, bool(value))
        # an explicit argument beats the environment variable, which beats the default
        backend = kwargs.get("backend") or os.environ.get(BACKEND_ENV) or "fast"
        from ..store import available_backends, unknown_backend_reason

        if backend not in available_backends():
            raise ValueError(f"init: backend: {unknown_backend_reason(backend)}")
        self.backend = backend
        self.restore_model_version = kwargs.get("restore_model_version")
        self.tables: dict = {}                 # name -> SparseTable, in creation order
        self.feature_specs: list = []
        self.optimizer_instance = None         # the one global sparse optimizer (reference 1.8)
        self.train_params_config = TrainParamsConfig()
        self.modify_graph = False
        self.modify_records: list = []          # sparse_lookup(..., modify_graph=True) calls, for the rewrite
        self.frozen = False

    @property
    def use_static(self) -> bool:
        return not self.use_dynamic

    @staticmethod
    def get_instance() -> "ConfigInitializer":
        if _INSTANCE is None:
            raise EnvironmentError("Please init the environment for mx_rec at first.")
        return _INSTANCE


def init(**kwargs) -> ConfigInitializer:
    """Create the configuration (mxRec's kwargs, plus ``backend="fast"|"ref"``,
    the MXREC_REF_BACKEND environment variable when no backend is given)."""
    global _INSTANCE
    if _INSTANCE is not None:
        raise EnvironmentError("mx_rec has been initialized; call terminate_config_initializer() first")
    _INSTANCE = ConfigInitializer(**kwargs)
    from . import graph_modifier, saver

    saver.install()
    graph_modifier.install()
    atexit.register(terminate_config_initializer)
    return _INSTANCE


def terminate_config_initializer() -> None:
    """Forget every table and the optimizer; idempotent."""
    global _INSTANCE
    if _INSTANCE is None:
        return
    from . import graph_modifier, saver

    saver.uninstall()
    graph_modifier.uninstall()
    _INSTANCE = None


def is_initialized() -> bool:
    return _INSTANCE is not None
