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

import tensorflow as tf

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


class TableGradientTape(tf.GradientTape):
    """A ``tf.GradientTape`` under which ``Embedding`` layers may look up for training.

    ``step``: the step of this batch's lookups and applies (an int or an integer
    tensor, e.g. ``optimizer.iterations``); None: each table's own count of
    training lookups (KERAS-3).  After the forward pass,
    ``gradient_and_apply(loss, variables)`` returns the gradients of ``variables``
    (apply them with a Keras optimizer) and applies the tables' gradients: one
    store call per layer, the gradients of all its lookups concatenated.
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
        receives its gradient rows in one store call per lookup; ``applied`` is the
        int64 count of rows updated (a tensor; the applies run in the same step)."""
        variables = list(variables)
        grads = self.gradient(loss, variables + [lookup.rows for lookup in self.lookups])
        dense, sparse = grads[:len(variables)], grads[len(variables):]
        by_layer: dict[int, list] = {}       # a layer called twice: one apply, duplicate keys summed (OPT-1)
        for lookup, grad in zip(self.lookups, sparse):
            if grad is not None:
                by_layer.setdefault(id(lookup.layer), []).append((lookup, tf.convert_to_tensor(grad)))
        applied = []
        for pairs in by_layer.values():
            layer = pairs[0][0].layer
            keys = tf.concat([lookup.unique_keys for lookup, _ in pairs], axis=0)
            rows = tf.concat([grad for _, grad in pairs], axis=0)
            step = tf.reduce_max(tf.stack([lookup.step for lookup, _ in pairs]))
            applied.append(layer.apply_gradient_op(keys, rows, step))
        total = tf.add_n(applied) if applied else tf.constant(0, tf.int64)
        return dense, total
