"""``npu_bridge.estimator.npu_ops``: the NPU adapter's ops with their CPU equivalents (TF-29)."""
from __future__ import annotations

import numbers

import tensorflow as tf

from ..notes import npu_only


def dropout(x, keep_prob, noise_shape=None, seed=None, name=None):
    """TF's dropout with a keep probability (the NPU op's signature): each element is kept with
    probability ``keep_prob`` and scaled by ``1 / keep_prob``; ``keep_prob`` 1 returns ``x``."""
    if isinstance(keep_prob, numbers.Real) and not isinstance(keep_prob, bool):
        if not 0.0 < keep_prob <= 1.0:
            raise ValueError(f"npu_ops.dropout: keep_prob: must be in (0, 1], got {keep_prob!r}")
        if keep_prob == 1.0:
            return tf.convert_to_tensor(x, name=name)
    with tf.name_scope(name or "dropout"):
        x = tf.convert_to_tensor(x, name="x")
        # a number stays a number, as tf.compat.v1.nn.dropout(keep_prob=) passes it: the same scale bits
        rate = 1.0 - (keep_prob if isinstance(keep_prob, numbers.Real)
                      else tf.convert_to_tensor(keep_prob, dtype=x.dtype, name="keep_prob"))
        return tf.nn.dropout(x, rate=rate, noise_shape=noise_shape, seed=seed)


def initialize_system(name=None):
    """The NPU system's start (HCCL, device): a no-op here, so ``sess.run(init_op)`` still runs."""
    npu_only("npu_ops.initialize_system", "no NPU system to start on this machine")
    return tf.no_op(name=name or "initialize_system")


def shutdown_system(name=None):
    npu_only("npu_ops.shutdown_system", "no NPU system to stop on this machine")
    return tf.no_op(name=name or "shutdown_system")
