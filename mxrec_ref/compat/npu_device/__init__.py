"""``npu_device``, the NPU adapter for TF2 scripts: its CPU face (TF-29)."""
from . import compat  # noqa: F401
from ..npu.notes import npu_only


class _Device:
    def as_default(self):
        return self


def open(*args, **kwargs):  # noqa: A001 - upstream's name
    """Opens the NPU device for eager/tf.function work: this machine's CPU is the device."""
    npu_only("npu_device.open", "TensorFlow places ops on this machine's CPU")
    return _Device()
