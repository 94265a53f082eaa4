"""``npu_device.compat`` (TF-29)."""
import tensorflow as tf

from . import v1  # noqa: F401
from ...npu.notes import npu_only


def enable_v1():
    """Lets TF1-style graphs run on the NPU: here, graph mode (eager execution off)."""
    npu_only("npu_device.compat.enable_v1", "graph mode is turned on; there is no NPU to enable")
    tf.compat.v1.disable_eager_execution()
