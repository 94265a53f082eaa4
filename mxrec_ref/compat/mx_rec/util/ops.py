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
    """mxRec's op passes the batch timestamp through; so does this."""
    return tf.identity(timestamp)


def import_host_pipeline_ops(so_name=None):
    return SimpleNamespace(set_threshold=set_threshold, clear_channel=clear_channel, return_timestamp=return_timestamp)
