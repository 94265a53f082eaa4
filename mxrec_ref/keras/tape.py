"""The tape under which an ``Embedding`` may look up for training (KERAS-2, KERAS-3).

A training lookup of an ``Embedding`` is only built inside a
``TableGradientTape``: the tape watches the rows each lookup returns and, with
``gradient_and_apply``, computes the dense gradients and the tables' gradients
from one loss and sends each table's (unique keys, gradient rows) to its store
in one call.  A training lookup anywhere else raises (layer.py), so a model
whose training would never update its tables -- a plain ``keras.Model`` and
its default ``train_step``, or a custom step with a plain ``tf.GradientTape``
-- fails when the step is built instead of running with frozen tables.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from ..tf.table import NO_RESULT

_ACTIVE = threading.local()


def active_tape():
    """The innermost ``TableGradientTape`` being recorded in this thread, or None."""
    stack = getattr(_ACTIVE, "stack", None)
    return stack[-1] if stack else None


@dataclass
class TrainingLookup:
    layer: object
    unique_keys: object     # int64 [u]
    rows: object            # float32 [u, dim], watched by the tape
    step: object            # int64 scalar: the step the lookup used
    token: object           # int64 scalar: the layer's kept result of this lookup (KERAS-12)


class TableGradientTape(tf.GradientTape):
    """A ``tf.GradientTape`` under which ``Embedding`` layers may look up for training.

    ``step``: the step of this batch's lookups and applies (an int or an integer
    tensor, e.g. ``optimizer.iterations``); None: each table's own count of
    training lookups (KERAS-3).  After the forward pass,
    ``gradient_and_apply(loss, variables)`` returns the gradients of ``variables``
    (apply them with a Keras optimizer) and applies the tables' gradients: one
    store call per layer, the gradients of all its lookups concatenated, every
    layer's in one op (KERAS-12).
    """

    def __init__(self, step=None, persistent: bool = False):
        super().__init__(persistent=persistent)
        self.step = step
        self.lookups: list[TrainingLookup] = []

    def __enter__(self):
        tape = super().__enter__()
        stack = getattr(_ACTIVE, "stack", None)
        if stack is None:
            stack = _ACTIVE.stack = []
        stack.append(self)
        return tape

    def __exit__(self, *exc):
        _ACTIVE.stack.remove(self)
        return super().__exit__(*exc)

    def step_tensor(self):
        return tf.constant(-1, tf.int64) if self.step is None else tf.cast(self.step, tf.int64)

    def record(self, lookup: TrainingLookup) -> None:
        self.watch(lookup.rows)
        self.lookups.append(lookup)

    def gradient_and_apply(self, loss, variables=()):
        """(gradients of ``variables``, applied): every table looked up under this tape
        receives its gradient rows in one store call (KERAS-2), all of them in one op (KERAS-12);
        ``applied`` is the int64 count of rows updated (a tensor; the applies run in the same step)."""
        variables = list(variables)
        grads = self.gradient(loss, variables + [lookup.rows for lookup in self.lookups])
        dense, sparse = grads[:len(variables)], grads[len(variables):]
        by_layer: dict[int, list] = {}       # a layer called twice: one apply, duplicate keys summed (OPT-1)
        for lookup, grad in zip(self.lookups, sparse):
            if grad is not None:
                by_layer.setdefault(id(lookup.layer), []).append((lookup, tf.convert_to_tensor(grad)))
        if not by_layer:
            return dense, tf.constant(0, tf.int64)
        return dense, tf.reduce_sum(_apply_op(list(by_layer.values())))


def _apply_op(layers: list[list]) -> tf.Tensor:
    """One numpy_function applying every layer's gradient (KERAS-12), the layers in the order of their
    first lookups under the tape: per layer its lookups' unique keys and gradient rows concatenated, the
    latest step, its lookup's result token when it looked up once (the apply then reuses that
    lookup's dedup and row handles; several lookups are merged by key, OPT-1), and the learning rate of
    the Keras optimizer it follows (KERAS-13; -1: its own).  Returns the rows each
    layer updated, int64 [layers]."""
    inputs, owners = [], []
    for pairs in layers:
        owners.append(pairs[0][0].layer)
        lookups = [lookup for lookup, _ in pairs]
        inputs += [tf.concat([lookup.unique_keys for lookup in lookups], axis=0),
                   tf.cast(tf.concat([grad for _, grad in pairs], axis=0), tf.float32),
                   tf.reduce_max(tf.stack([lookup.step for lookup in lookups])),
                   lookups[0].token if len(lookups) == 1 else tf.constant(NO_RESULT, tf.int64),
                   owners[-1].learning_rate_tensor()]

    def apply(*values):
        return np.array([layer.apply_kept(*values[5 * i:5 * i + 5]) for i, layer in enumerate(owners)],
                        dtype=np.int64)

    applied = tf.numpy_function(apply, inputs, tf.int64, stateful=True, name="sparse_apply")
    applied.set_shape([len(owners)])
    return applied
