"""``npu_run_config_init``: the migration tool's RunConfig with the NPU session config (TF-29)."""
from __future__ import annotations

from .estimator.npu.npu_config import NPURunConfig
from .session_config import npu_session_config_init


def npu_run_config_init(run_config=None):
    """``run_config`` (a new NPURunConfig if None) with ``npu_session_config_init`` applied to its
    session config."""
    config = NPURunConfig() if run_config is None else run_config
    config.set_session_config(npu_session_config_init(config.session_config))
    return config
