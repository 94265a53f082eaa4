"""``tf.estimator.export``'s serving-input names for ``Estimator.export_saved_model`` (EST-8)."""
from __future__ import annotations

import tensorflow as tf


class ServingInputReceiver:
    """``features`` the model function reads and the ``receiver_tensors`` a server feeds."""

    def __init__(self, features, receiver_tensors, receiver_tensors_alternatives=None):
        if isinstance(features, tf.Tensor):
            features = {"feature": features}
        if isinstance(receiver_tensors, tf.Tensor):
            receiver_tensors = {"input": receiver_tensors}
        if not isinstance(features, dict) or not isinstance(receiver_tensors, dict) or not receiver_tensors:
            raise ValueError("ServingInputReceiver: features, receiver_tensors: must be tensors or dicts of tensors")
        if receiver_tensors_alternatives:
            raise ValueError("ServingInputReceiver: receiver_tensors_alternatives: not supported by the serving "
                             "export (one signature, serving_default)")
        self.features = features
        self.receiver_tensors = receiver_tensors
        self.receiver_tensors_alternatives = None


def build_raw_serving_input_receiver_fn(features, default_batch_size=None):
    """A receiver function feeding one placeholder per feature (TF's function of this name)."""
    def serving_input_receiver_fn():
        receivers = {}
        for name, tensor in features.items():
            shape = [default_batch_size] + tensor.shape.as_list()[1:] if tensor.shape.rank else []
            receivers[name] = tf.compat.v1.placeholder(tensor.dtype, shape, name=name)
        return ServingInputReceiver(receivers, receivers)
    return serving_input_receiver_fn
