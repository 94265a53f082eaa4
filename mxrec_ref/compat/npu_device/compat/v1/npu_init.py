"""``from npu_device.compat.v1.npu_init import *``: the same names as ``npu_bridge.npu_init`` (TF-29)."""
from ....npu import *  # noqa: F401,F403
from ....npu import __all__  # noqa: F401
