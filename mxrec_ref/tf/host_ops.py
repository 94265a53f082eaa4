"""mxRec's host pipeline ops (``mx_rec.util.ops.import_host_pipeline_ops()``): the
CPU ops that mean something here, and clear errors for the NPU kernels."""
from types import SimpleNamespace

import tensorflow as tf

from .config_initializer import log_once
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


def import_host_pipeline_ops(so_name=None):
    """The CPU ops mxRec's scripts call; ``so_name`` is accepted and ignored."""
    return SimpleNamespace(set_threshold=set_threshold, clear_channel=clear_channel, return_timestamp=return_timestamp,
                           **{name: _unavailable(name, instead) for name, instead in _UNAVAILABLE.items()})
