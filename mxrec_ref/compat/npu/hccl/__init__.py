"""``npu_bridge.hccl`` (TF-29)."""
from . import hccl_ops  # noqa: F401
