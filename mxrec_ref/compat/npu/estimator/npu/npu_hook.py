"""``npu_bridge.estimator.npu.npu_hook`` (TF-29)."""
from ...hooks import NPUBroadcastGlobalVariablesHook, npu_hooks_append  # noqa: F401
