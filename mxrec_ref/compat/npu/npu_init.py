"""``from npu_bridge.npu_init import *``: every name of the adapter's face (TF-29)."""
from . import *  # noqa: F401,F403
from . import __all__  # noqa: F401
