"""``npu_bridge.estimator.npu.npu_optimizer`` (TF-29)."""
from ...optimizers import NPUDistributedOptimizer, npu_distributed_optimizer_wrapper  # noqa: F401
