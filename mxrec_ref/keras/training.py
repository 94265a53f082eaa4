"""Training that cannot skip a table (KERAS-2, KERAS-3).

A training lookup of an ``Embedding`` is only built inside a
``TableGradientTape``: the tape watches the rows each lookup returns and, with
``gradient_and_apply``, computes the dense gradients and the tables' gradients
from one loss and sends each table's (unique keys, gradient rows) to its store
in one call.  ``TableTraining`` is the ``train_step`` that does this inside
``model.fit``; ``Model`` and ``Sequential`` are Keras's with it mixed in.  A
model whose training would never update its tables -- a plain ``keras.Model``
and its default ``train_step``, or a custom step with a plain
``tf.GradientTape`` -- fails when the step is built, with an error that names
the table, instead of running with frozen tables.
"""
from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass

import keras
import tensorflow as tf

from ..errors import MxrecError

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


class TableTraining:
    """``train_step`` for a Keras model with ``Embedding`` layers: Keras's own
    (TF backend) with a ``TableGradientTape``, so the optimizer step also applies
    each table's sparse optimizer with the same loss's gradients.  The step of
    the tables' lookups is ``optimizer.iterations``.  Mix it in before the model
    class: ``class MyModel(TableTraining, keras.Model)``."""

    def train_step(self, data):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        if getattr(self.optimizer, "loss_scale_factor", None) or isinstance(
                self.optimizer, keras.optimizers.LossScaleOptimizer):
            raise MxrecError("mxrec_ref.keras: loss scaling is not supported: the tables would receive scaled "
                             "gradients; use a float32 policy without LossScaleOptimizer")
        with TableGradientTape(step=self.optimizer.iterations) as tape:
            y_pred = self(x, training=True) if self._call_has_training_arg else self(x)
            loss = self._compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=True)
            self._loss_tracker.update_state(loss, sample_weight=tf.shape(
                next(i for i in tf.nest.flatten(x) if i is not None))[0])
        trainable = self.trainable_weights
        gradients, _ = tape.gradient_and_apply(loss, trainable)
        if trainable:
            self.optimizer.apply_gradients(zip(gradients, trainable))
        elif not tape.lookups:
            warnings.warn("The model does not have any trainable weights.")
        else:      # only tables train: the optimizer's step counter still advances (the tables' clock)
            self.optimizer.iterations.assign_add(1)
        return self.compute_metrics(x, y, y_pred, sample_weight=sample_weight)


@keras.saving.register_keras_serializable(package="mxrec_ref")
class Model(TableTraining, keras.Model):
    """``keras.Model`` whose ``fit`` trains its ``Embedding`` tables (functional or subclassed)."""


@keras.saving.register_keras_serializable(package="mxrec_ref")
class Sequential(TableTraining, keras.Sequential):
    """``keras.Sequential`` whose ``fit`` trains its ``Embedding`` tables."""
