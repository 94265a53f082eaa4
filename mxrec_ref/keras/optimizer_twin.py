"""The sparse twin of a model's Keras optimizer (KERAS-13).

An ``Embedding`` built without ``optimizer=`` learns with the optimizer the
model is compiled with: ``sparse_twin`` maps the Keras optimizer to the store's
optimizer of the same update rule and hyper-parameters, and
``learning_rate_now`` is the Keras optimizer's learning rate at its current
step (a ``LearningRateSchedule`` evaluated at ``iterations``, as Keras's own
update reads it), which the table's apply takes step by step.  Keras options
that change the update and have no sparse counterpart (momentum, AMSGrad,
clipping, EMA, gradient accumulation, FTRL's beta, decoupled weight decay other
than SGD's) are refused, naming the table and the option, instead of training
the table differently from what the model says.
"""
from __future__ import annotations

import keras
import tensorflow as tf

from ..errors import ConfigError
from ..optimizers import SGD, Adagrad, Ftrl, LazyAdam, SparseOptimizer

TWINS = "Adam -> LazyAdam, Adagrad -> Adagrad, SGD (momentum 0) -> SGD, Ftrl -> Ftrl"


def _refuse(table: str, optimizer, reason: str) -> ConfigError:
    return ConfigError(f"table {table!r}: optimizer: the model's Keras optimizer {type(optimizer).__name__} "
                       f"{reason}; the table would learn differently from the dense weights. Sparse twins: "
                       f"{TWINS}. Compile with one of those, or give the table its own optimizer: "
                       f"Embedding(..., optimizer=mxrec_ref.LazyAdam(...))")


def _number(table: str, optimizer, name: str):
    value = getattr(optimizer, name)
    if callable(value):
        raise _refuse(table, optimizer, f"has a callable {name}, which the store cannot follow")
    return float(value)


def learning_rate_now(optimizer) -> float:
    """The Keras optimizer's learning rate at its current step, as a Python float (eager)."""
    return float(keras.ops.convert_to_numpy(optimizer.learning_rate))


def learning_rate_tensor(optimizer) -> tf.Tensor:
    """The same as a float32 tensor, read when the step runs (a schedule at the step's ``iterations``)."""
    return tf.cast(optimizer.learning_rate, tf.float32)


def sparse_twin(optimizer, table: str) -> SparseOptimizer:
    """The store optimizer with ``optimizer``'s update rule and hyper-parameters, or ``ConfigError``
    naming ``table`` and what has no twin.  The learning rate is the current one (a schedule's follows
    step by step through ``learning_rate_tensor``)."""
    kind = type(optimizer)        # exact: AdamW, Nadam, ... subclass Adam but update otherwise
    if kind not in (keras.optimizers.Adam, keras.optimizers.Adagrad, keras.optimizers.SGD,
                    keras.optimizers.Ftrl):
        raise _refuse(table, optimizer, "has no sparse twin")
    for option in ("clipnorm", "clipvalue", "global_clipnorm", "gradient_accumulation_steps"):
        if getattr(optimizer, option, None) is not None:
            raise _refuse(table, optimizer, f"sets {option}, which the table's apply has no counterpart of")
    if getattr(optimizer, "use_ema", False):
        raise _refuse(table, optimizer, "sets use_ema, which the table's apply has no counterpart of")
    weight_decay = getattr(optimizer, "weight_decay", None)
    if weight_decay and kind is not keras.optimizers.SGD:
        raise _refuse(table, optimizer, "sets weight_decay, which only the sparse SGD has")
    learning_rate = learning_rate_now(optimizer)
    try:
        if kind is keras.optimizers.Adam:
            if optimizer.amsgrad:
                raise _refuse(table, optimizer, "sets amsgrad, which LazyAdam has no counterpart of")
            return LazyAdam(learning_rate=learning_rate, beta1=_number(table, optimizer, "beta_1"),
                            beta2=_number(table, optimizer, "beta_2"), epsilon=_number(table, optimizer, "epsilon"))
        if kind is keras.optimizers.Adagrad:
            # Keras divides by sqrt(acc + epsilon), the store by sqrt(acc): the accumulator starts at
            # initial_accumulator_value > 0, so epsilon only guards a zero the store never reaches.
            return Adagrad(learning_rate=learning_rate,
                           initial_accumulator_value=_number(table, optimizer, "initial_accumulator_value"))
        if kind is keras.optimizers.SGD:
            if _number(table, optimizer, "momentum") != 0:
                raise _refuse(table, optimizer, "sets momentum, which the sparse SGD has no slot for")
            # Keras's decoupled decay w -= lr*wd*w before w -= lr*g is the store's w -= lr*(g + wd*w),
            # applied to the rows of the batch only (as mxRec's).
            return SGD(learning_rate=learning_rate, weight_decay=float(weight_decay) if weight_decay else None)
        if _number(table, optimizer, "beta") != 0:
            raise _refuse(table, optimizer, "sets beta, which the store's FTRL (ApplyFtrlV2) has no counterpart of")
        return Ftrl(learning_rate=learning_rate,
                    learning_rate_power=_number(table, optimizer, "learning_rate_power"),
                    initial_accumulator_value=_number(table, optimizer, "initial_accumulator_value"),
                    l1_regularization_strength=_number(table, optimizer, "l1_regularization_strength"),
                    l2_regularization_strength=_number(table, optimizer, "l2_regularization_strength"),
                    l2_shrinkage_regularization_strength=_number(table, optimizer,
                                                                  "l2_shrinkage_regularization_strength"))
    except ConfigError as error:
        if str(error).startswith(f"table {table!r}"):
            raise
        raise ConfigError(f"table {table!r}: optimizer: the model's Keras optimizer {kind.__name__} maps to a "
                          f"sparse optimizer it cannot configure: {error}") from None
