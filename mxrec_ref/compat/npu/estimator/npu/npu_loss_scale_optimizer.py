"""``npu_bridge.estimator.npu.npu_loss_scale_optimizer`` (TF-29)."""
from ...optimizers import NPULossScaleOptimizer  # noqa: F401
