"""What an ``input_fn`` returns, as (features, labels, hooks) tensors of the current graph (EST-1).

A ``tf.data.Dataset`` of ``features`` or ``(features, labels)`` is read through an initializable
iterator made with ``tf.compat.v1.data.make_initializable_iterator`` -- the call the graph modifier
records (GRAPH-1), so a ``GraphModifierHook`` can rewrite it -- whose initializer runs once the
session exists.  A ``(features, labels)`` tuple of tensors is used as it is.
"""
from __future__ import annotations

import tensorflow as tf


class DatasetInitializerHook(tf.compat.v1.train.SessionRunHook):
    """Runs the input iterator's initializer once the session exists (TF's own hook does the same)."""

    def __init__(self, iterator):
        self._iterator = iterator

    def begin(self):
        self._initializer = self._iterator.initializer

    def after_create_session(self, session, coord):
        session.run(self._initializer)


def features_and_labels(input_fn, mode, params, config):
    """Call ``input_fn`` (with ``mode``/``params``/``config`` when it names them) and split its result."""
    import inspect

    names = inspect.signature(input_fn).parameters
    kwargs = {k: v for k, v in (("mode", mode), ("params", params), ("config", config)) if k in names}
    result = input_fn(**kwargs)
    hooks = []
    if isinstance(result, (tf.data.Dataset, tf.compat.v1.data.Dataset)):
        iterator = tf.compat.v1.data.make_initializable_iterator(result)
        hooks.append(DatasetInitializerHook(iterator))
        result = iterator.get_next()
    if isinstance(result, (tuple, list)):
        if len(result) != 2:
            raise ValueError(f"Estimator: input_fn: must return features or (features, labels), got "
                             f"{len(result)} elements")
        return result[0], result[1], hooks
    return result, None, hooks
