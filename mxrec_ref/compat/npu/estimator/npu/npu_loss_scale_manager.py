"""``npu_bridge.estimator.npu.npu_loss_scale_manager`` (TF-29)."""
from ...optimizers import ExponentialUpdateLossScaleManager, FixedLossScaleManager  # noqa: F401
