"""``npu_device.compat.v1`` (TF-29)."""
