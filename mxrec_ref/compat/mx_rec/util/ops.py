"""``import_host_pipeline_ops()``: mxRec's CPU ops that mean something here."""
from types import SimpleNamespace

import tensorflow as tf

from mxrec_ref.tf import set_threshold

from .log import logger


def clear_channel(channel_id=0):
    """The host channels do not exist here: nothing to clear."""
    logger.info("clear_channel(%s): no host channel in mxrec-ref; nothing to do", channel_id)
    return tf.no_op()


def return_timestamp(timestamp):
    """mxRec's ReturnTimestamp op: ignores its input and returns a scalar, the
    current time in whole seconds, taken when the input pipeline produces the
    batch (the control dependency ties it to the batch); a data timestamp made
    by the pipeline, not a clock read inside the store (spec/tf.md, TF-12)."""
    with tf.control_dependencies([tf.convert_to_tensor(timestamp)]):
        return tf.cast(tf.math.floor(tf.timestamp()), tf.int64)


def import_host_pipeline_ops(so_name=None):
    return SimpleNamespace(set_threshold=set_threshold, clear_channel=clear_channel, return_timestamp=return_timestamp)
