"""mxRec's init module, with the older module-level helpers (reference 1.2)."""
from mxrec_ref.tf import EvictHook
from mxrec_ref.tf import initialize as _initialize
from mxrec_ref.tf.config_initializer import ConfigInitializer
from mxrec_ref.tf.initialize import terminate_config_initializer  # noqa: F401

from .communication.hccl_ops import get_device_id, get_rank_id, get_rank_size  # noqa: F401
from .log import logger  # noqa: F401
from .ops import clear_channel as _clear_channel
from .ops import import_host_pipeline_ops


def init(**kwargs):
    """mxRec's init: NPU-only options are accepted and logged once (mxrec_ref.tf.config_initializer)."""
    return _initialize.init(**kwargs)


def _instance():
    return ConfigInitializer.get_instance()


def set_if_load(value: bool) -> None:
    _instance().if_load = bool(value)


def get_initializer(is_training: bool):
    return _instance().train_params_config.get_initializer(is_training)


def clear_channel(is_train_channel: bool = True):
    return _clear_channel(0 if is_train_channel else 1)


def trigger_evict():
    return EvictHook(evict_enable=True).evict_now()


def get_use_dynamic_expansion() -> bool:
    return _instance().use_dynamic_expansion


def get_use_static() -> bool:
    return _instance().use_static


def get_host_pipeline_ops():
    return import_host_pipeline_ops()


def set_ascend_global_hashtable_collection(name: str) -> None:
    _instance().train_params_config.ascend_global_hashtable_collection = name
