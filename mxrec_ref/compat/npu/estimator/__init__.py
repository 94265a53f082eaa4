"""``npu_bridge.estimator``: ``npu_ops`` and the ``npu`` package (TF-29)."""
from . import npu_ops  # noqa: F401
