"""mxRec's host pipeline ops (``mx_rec.util.ops.import_host_pipeline_ops()``): the
CPU ops that mean something here, and clear errors for the NPU kernels."""
from types import SimpleNamespace

import numpy as np
import tensorflow as tf

from . import patches
from .config_initializer import log_once
from .constants import EVAL_CHANNEL_ID, MAX_INT32, TRAIN_CHANNEL_ID
from .table import set_threshold


def clear_channel(channel_id=0):
    """The host channels do not exist here: nothing to clear."""
    log_once("ops:clear_channel", "clear_channel is accepted and does nothing: mxrec-ref has no host channel")
    return tf.no_op()


def return_timestamp(timestamp):
    """mxRec's ReturnTimestamp op: ignores its input and returns a scalar, the
    current time in whole seconds, taken when the input pipeline produces the
    batch (the control dependency ties it to the batch); a data timestamp made
    by the pipeline, not a clock read inside the store (spec/tf.md, TF-12)."""
    with tf.control_dependencies([tf.convert_to_tensor(timestamp)]):
        return tf.cast(tf.math.floor(tf.timestamp()), tf.int64)


def _unavailable(name, instead):
    def op(*args, **kwargs):
        raise NotImplementedError(f"{name} is an mxRec NPU/host-channel kernel with no CPU meaning; {instead}")
    op.__name__ = name
    return op


_UNAVAILABLE = {
    "read_emb_key_v2": "the insert function (get_asc_insert_func) hands the ids to the store",
    "read_emb_key_v2_dynamic": "the insert function (get_asc_insert_func) hands the ids to the store",
    "embedding_lookup_by_address": "use sparse_lookup: rows are looked up by key",
    "lazy_adam": "use mx_rec.optimizers.lazy_adam.create_hash_optimizer: the store applies LazyAdam",
    "lccl_all_to_all": "one process: no collectives",
}


class HostPipelineOps(SimpleNamespace):
    """What ``import_host_pipeline_ops`` returns: mxRec's op library, as CPU ops."""


def import_host_pipeline_ops(so_name=None):
    """The CPU ops mxRec's scripts call; ``so_name`` (e.g. ``LIBREC_EOS_OPS_SO``) is accepted
    and ignored: every library's ops are here."""
    return HostPipelineOps(set_threshold=set_threshold, clear_channel=clear_channel,
                           return_timestamp=return_timestamp,
                           **{name: _unavailable(name, instead) for name, instead in _UNAVAILABLE.items()})


def eos_map(dataset, librec, channel_id, max_train_steps=-1, max_eval_steps=-1):
    """mxRec's ``Dataset.eos_map`` (TF-33).  On an NPU it wraps the dataset in an op that tells
    the host channel ``channel_id`` when the data ends, so every rank's device loop stops
    together.  Here no host channel and no device loop exist: the dataset is returned
    unchanged (not bounded), and the script's own step bound or the end of its data
    (OutOfRangeError) ends the loop, as with the plain dataset.  The arguments are checked."""
    if not isinstance(librec, HostPipelineOps):
        raise TypeError(f"eos_map: librec: must be the ops of import_host_pipeline_ops(LIBREC_EOS_OPS_SO), "
                        f"got {type(librec).__name__}")
    _check_int("channel_id", channel_id, TRAIN_CHANNEL_ID, EVAL_CHANNEL_ID)
    _check_int("max_train_steps", max_train_steps, -1, MAX_INT32)
    _check_int("max_eval_steps", max_eval_steps, -1, MAX_INT32)
    log_once("ops:eos_map", "eos_map is accepted and returns the dataset unchanged: it signals the end of the data "
             "to mxRec's host channel, which mxrec-ref does not have")
    return dataset


def _check_int(parameter: str, value, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not low <= value <= high:
        raise ValueError(f"eos_map: {parameter}: must be an integer in [{low}, {high}], got {value!r}")


# ``import mx_rec`` gives every dataset this method (mxRec's data/patch.py), installed once, when these
# ops are first imported (the patch lives with the TF layer's others, ``patches.py``).
patches.install_dataset_eos_map(eos_map)
