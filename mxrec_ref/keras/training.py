"""``model.fit`` that trains the tables (KERAS-2): ``TableTraining`` is Keras's
``train_step`` (TF backend) under a ``TableGradientTape``; ``Model`` and
``Sequential`` are Keras's with it mixed in.  Their ``export`` writes the
serving SavedModel of ``export_saved_model`` (KERAS-9).
"""
from __future__ import annotations

import warnings

import keras
import tensorflow as tf

from ..errors import MxrecError, UsageError
from ..tf.distributed import reduce_dense_gradients
from .export import embedding_layers, export_saved_model
from .layer import refuse_several_replicas
from .tape import TableGradientTape


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
        for layer in embedding_layers(self):        # before the forward pass: the error names the table plainly
            if layer.trainable:
                refuse_several_replicas(layer.table_name)          # KERAS-15
        with TableGradientTape(step=self.optimizer.iterations) as tape:
            y_pred = self(x, training=True) if self._call_has_training_arg else self(x)
            loss = self._compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=True)
            self._loss_tracker.update_state(loss, sample_weight=tf.shape(
                next(i for i in tf.nest.flatten(x) if i is not None))[0])
        trainable = self.trainable_weights
        gradients, _ = tape.gradient_and_apply(loss, trainable)
        if trainable:
            # Under mpirun the ranks' dense gradients are averaged, summed in rank order (KERAS-17); the
            # tables' own collectives ran in gradient_and_apply, before it in every rank's program order.
            gradients = [g for g, _ in reduce_dense_gradients(zip(gradients, trainable))]
            self.optimizer.apply_gradients(zip(gradients, trainable))
        elif not tape.lookups:
            warnings.warn("The model does not have any trainable weights.")
        else:      # only tables train: the optimizer's step counter still advances (the tables' clock)
            self.optimizer.iterations.assign_add(1)
        return self.compute_metrics(x, y, y_pred, sample_weight=sample_weight)

    def fit(self, *args, **kwargs):
        """Keras's ``fit``; a ``keras.callbacks.TensorBoard`` without the ``tensorboard`` package (which
        implements ``tf.summary.scalar``) is refused before the first step, naming the extra (KERAS-16)."""
        callbacks = kwargs.get("callbacks", args[5] if len(args) > 5 else None)
        check_callbacks(callbacks)
        return super().fit(*args, **kwargs)

    def compile(self, optimizer="rmsprop", *args, jit_compile="auto", **kwargs):
        """Keras's ``compile``; ``jit_compile=True`` is refused: a table's store call is a
        ``tf.numpy_function``, which XLA cannot compile ("auto" turns XLA off, KERAS-1).  Every
        ``Embedding`` built without ``optimizer=`` then follows the sparse twin of ``optimizer``
        (KERAS-13); a layer that cannot is refused before the model changes."""
        if jit_compile is True:
            raise MxrecError("mxrec_ref.keras: compile: jit_compile=True cannot compile the tables' store calls "
                             "(tf.numpy_function); leave jit_compile='auto' or set it to False")
        optimizer = keras.optimizers.get(optimizer)
        followers = [layer for layer in embedding_layers(self) if layer.follows_model]
        for layer in followers:
            layer.twin_for(optimizer)                    # every refusal before anything changes
        result = super().compile(optimizer, *args, jit_compile=jit_compile, **kwargs)
        for layer in followers:
            layer.follow_optimizer(self.optimizer)
        return result

    def compile_from_config(self, config):
        """``keras.models.load_model``: compile as saved -- the tables follow the optimizer again -- and
        build the optimizer so that its saved variables (step, slots) load next (KERAS-14)."""
        config = keras.saving.deserialize_keras_object(config)
        self.compile(**config)
        if self.built:
            self.optimizer.build(self.trainable_variables)

    def export(self, filepath, format="tf_saved_model", verbose=None, input_signature=None, **kwargs):
        """Keras's ``export`` for a model with tables: ``format="tf_saved_model"`` writes
        ``export_saved_model``'s SavedModel (tables as static lookups, no PyFunc)."""
        if format != "tf_saved_model" or input_signature is not None or kwargs:
            raise MxrecError(f"mxrec_ref.keras: export: only format='tf_saved_model' with the model's own inputs "
                             f"is supported for a model with Embedding tables, got format={format!r}")
        return export_saved_model(self, filepath)


def check_callbacks(callbacks) -> None:
    """KERAS-16: Keras's TensorBoard callback writes with ``tf.summary.scalar``, which the ``tensorboard``
    package implements (TensorFlow does not depend on it): without it the callback would fail after the
    first epoch, the tables already trained."""
    if not any(isinstance(callback, keras.callbacks.TensorBoard) for callback in callbacks or ()):
        return
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        raise UsageError("mxrec_ref.keras: fit: callbacks: keras.callbacks.TensorBoard needs the tensorboard "
                         "package, which the 'tensorboard' extra installs: pip install 'mxrec-ref[tensorboard]'") \
            from None


@keras.saving.register_keras_serializable(package="mxrec_ref")
class Model(TableTraining, keras.Model):
    """``keras.Model`` whose ``fit`` trains its ``Embedding`` tables (functional or subclassed)."""


@keras.saving.register_keras_serializable(package="mxrec_ref")
class Sequential(TableTraining, keras.Sequential):
    """``keras.Sequential`` whose ``fit`` trains its ``Embedding`` tables."""
