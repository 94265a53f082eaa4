"""``npu_bridge.estimator.npu``: the adapter's Estimator, config, loop and optimizer modules (TF-29)."""
from . import npu_plugin, util  # noqa: F401
