"""The process-wide configuration singleton (reference 1.2): the registry at
the bottom of the TF layer.

mxRec keeps one ``ConfigInitializer`` per process: ``init`` creates it (a
second ``init`` raises), ``terminate_config_initializer`` destroys it (both in
``initialize.py``, which also installs the TF patches).  It holds the tables,
the one global sparse optimizer, the feature specs and the mode switches
(dynamic shape, dynamic expansion, backend).  This module imports nothing of
the TF layer but its constants, so every other module can import it.
"""
from __future__ import annotations

import logging
import os
import warnings
from types import SimpleNamespace

from ..backends import available_backends, unknown_backend_reason
from .constants import (BACKEND_ENV, EVAL_CHANNEL_ID, GET_CONFIG_INSTANCE_ERR_MSG, IGNORED_ENV, MAX_INT32,
                        TRAIN_CHANNEL_ID)

logger = logging.getLogger("mxrec_ref.tf")
_LOGGED: set = set()

_INSTANCE: "ConfigInitializer | None" = None

_STEP_KWARGS = ("max_steps", "train_steps", "eval_steps", "save_steps")
_KNOWN_KWARGS = set(_STEP_KWARGS) | {
    "if_load", "use_dynamic", "use_dynamic_expansion", "use_lccl", "bind_cpu", "save_checkpoint_due_time",
    "save_delta_checkpoints_secs", "is_incremental_checkpoint", "restore_model_version",
    "recent_key_count_threshold", "backend", "use_mpi", "rank_id", "rank_size", "train_interval",
    "prefetch_batch_number", "use_hot", "use_shm_swap",
}


def log_once(key: str, message: str, level: int = logging.INFO) -> None:
    """Log ``message`` the first time ``key`` is seen in this process: for settings
    that are accepted and ignored (an NPU option, a multi-process switch), so a
    script says once what did not apply, and why."""
    if key not in _LOGGED:
        _LOGGED.add(key)
        logger.log(level, message)


# init kwargs that mean nothing in one CPU process: accepted, logged once, ignored
NPU_ONLY_KWARGS = {
    "use_lccl": "low-latency NPU collectives: one process, no collectives",
    "bind_cpu": "CPU core binding of the host threads: no host thread pool",
    "use_mpi": "MPI launch: one process, rank 0 of 1",
    "rank_id": "one process, rank 0 of 1",
    "rank_size": "one process, rank 0 of 1",
    "train_interval": "NPU train/eval channel switching: the script's loop decides",
    "prefetch_batch_number": "host-to-device prefetch depth: no device channel",
    "use_hot": "Hot Embedding is always on and has no semantic effect (spec/hot.md)",
    "save_checkpoint_due_time": "incremental checkpoint timer: save(save_delta=True) writes deltas when called",
    "save_delta_checkpoints_secs": "incremental checkpoint timer: save(save_delta=True) writes deltas when called",
    "recent_key_count_threshold": "low-frequency filter of delta saves: deltas hold every touched key",
    "use_shm_swap": "shared-memory DDR swap: the host tier lives in this process",
    "if_load": "the host manager's load at start: tables load in Saver.restore (TF-6), so restore explicitly",
    "restore_model_version": "the host manager's load at start: Saver.restore loads the checkpoint it is given",
    "is_incremental_checkpoint": "pass save(..., save_delta=True) to write a delta checkpoint (CKPT-9)",
}
_NPU_DEFAULTS = {"bind_cpu": True, "if_load": False, "is_incremental_checkpoint": False,
                 "restore_model_version": None, "use_lccl": False, "use_hot": True}


class TrainParamsConfig:
    """Per-mode pipeline objects (the graph modifier fills the initializers)."""

    def __init__(self):
        self.ascend_global_hashtable_collection = "ASCEND_GLOBAL_HASHTABLE_COLLECTION"
        self._initializers = {}
        self._target_batches = {}

    def get_initializer(self, is_training: bool):
        return self._initializers.get(bool(is_training))

    def set_initializer(self, is_training: bool, initializer) -> None:
        self._initializers[bool(is_training)] = initializer

    def get_target_batch(self, is_training: bool):
        """The batch (``get_next()`` element) the mode's lookups read, once known."""
        return self._target_batches.get(bool(is_training))

    def set_target_batch(self, is_training: bool, batch) -> None:
        self._target_batches[bool(is_training)] = batch

    @staticmethod
    def get_training_mode_channel_id(is_training: bool) -> int:
        """mxRec's host channel of a mode: training 0, evaluation 1."""
        return TRAIN_CHANNEL_ID if is_training else EVAL_CHANNEL_ID


class ConfigInitializer:
    def __init__(self, **kwargs):
        unknown = sorted(set(kwargs) - _KNOWN_KWARGS)
        if unknown:
            warnings.warn(f"mxrec_ref.init: ignoring unknown arguments {unknown}", stacklevel=4)  # past create, init
        for name in sorted(n for n in set(kwargs) & set(NPU_ONLY_KWARGS) if kwargs[n] != _NPU_DEFAULTS.get(n, ...)):
            log_once(f"init:{name}", f"init: {name} is accepted and ignored: {NPU_ONLY_KWARGS[name]}")
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
        if backend not in available_backends():
            raise ValueError(f"init: backend: {unknown_backend_reason(backend)}")
        self.backend = backend
        self.restore_model_version = kwargs.get("restore_model_version")
        self.tables: dict = {}                 # name -> SparseTable, in creation order
        self.feature_specs: list = []
        self.pending_tables: dict = {}         # table name -> [(graph weakref, is_training, specs)]: insert functions built first
        self.train_params_config = TrainParamsConfig()
        self.modify_graph = False
        # mxRec's other sub-configurations, holding what exists here
        self.optimizer_config = SimpleNamespace(optimizer_instance=None)
        self.sparse_embed_config = SimpleNamespace(table_instance_dict=self.tables)
        self.feature_spec_config = SimpleNamespace(feature_spec_list=self.feature_specs)
        self.hybrid_manager_config = SimpleNamespace(freeze=False)
        self.modify_records: list = []          # sparse_lookup(..., modify_graph=True) calls, for the rewrite
        self.frozen = False

    @property
    def use_static(self) -> bool:
        return not self.use_dynamic

    @property
    def optimizer_instance(self):
        """The one global sparse optimizer (reference 1.8)."""
        return self.optimizer_config.optimizer_instance

    @optimizer_instance.setter
    def optimizer_instance(self, value) -> None:
        self.optimizer_config.optimizer_instance = value

    @staticmethod
    def get_instance() -> "ConfigInitializer":
        if _INSTANCE is None:
            raise EnvironmentError(GET_CONFIG_INSTANCE_ERR_MSG)
        return _INSTANCE


def create(**kwargs) -> ConfigInitializer:
    """Make the process's configuration from ``init``'s kwargs (plus ``backend="fast"|"ref"``,
    the MXREC_REF_BACKEND environment variable when no backend is given); a second one raises."""
    global _INSTANCE
    if _INSTANCE is not None:
        raise EnvironmentError("mx_rec has been initialized; call terminate_config_initializer() first")
    _INSTANCE = ConfigInitializer(**kwargs)
    return _INSTANCE


def discard() -> bool:
    """Forget the configuration (every table and the optimizer); False if there was none."""
    global _INSTANCE
    existed, _INSTANCE = _INSTANCE is not None, None
    return existed


def log_ignored_environment() -> None:
    """mxRec environment switches that change nothing here, logged once each (at
    init and again when the pipeline starts, for scripts that set them late)."""
    for name, reason in IGNORED_ENV.items():
        if os.environ.get(name) not in (None, "", "0"):
            level = logging.WARNING if name == "USE_COMBINE_FAAE" else logging.INFO
            log_once(f"env:{name}", f"{name}={os.environ[name]} is accepted and ignored: {reason}", level)


def is_initialized() -> bool:
    return _INSTANCE is not None
