"""``EstimatorSpec``: what a model function returns (tf.estimator's fields and checks, EST-3)."""
from __future__ import annotations

import collections

import tensorflow as tf

from .mode_keys import ModeKeys

_FIELDS = ("mode", "predictions", "loss", "train_op", "eval_metric_ops", "export_outputs", "training_chief_hooks",
           "training_hooks", "scaffold", "evaluation_hooks", "prediction_hooks")


class EstimatorSpec(collections.namedtuple("EstimatorSpec", _FIELDS)):
    """The ops and objects a model function returns for one mode.  TRAIN needs ``loss`` and ``train_op``,
    EVAL needs ``loss``, PREDICT needs ``predictions``; hooks must be SessionRunHooks and metric ops
    (value, update) pairs.  A wrong field raises ValueError/TypeError naming it, as TF's does."""

    def __new__(cls, mode, predictions=None, loss=None, train_op=None, eval_metric_ops=None, export_outputs=None,
                training_chief_hooks=None, training_hooks=None, scaffold=None, evaluation_hooks=None,
                prediction_hooks=None):
        if mode not in (ModeKeys.TRAIN, ModeKeys.EVAL, ModeKeys.PREDICT):
            raise ValueError(f"EstimatorSpec: mode: must be one of ModeKeys, got {mode!r}")
        if mode == ModeKeys.TRAIN and (loss is None or train_op is None):
            raise ValueError("EstimatorSpec: loss, train_op: both are required in TRAIN mode")
        if mode == ModeKeys.EVAL and loss is None:
            raise ValueError("EstimatorSpec: loss: required in EVAL mode")
        if mode == ModeKeys.PREDICT and predictions is None:
            raise ValueError("EstimatorSpec: predictions: required in PREDICT mode")
        if loss is not None:
            loss = tf.convert_to_tensor(loss)
            if loss.shape.rank not in (0, None) and loss.shape.num_elements() != 1:
                raise ValueError(f"EstimatorSpec: loss: must be a scalar, got shape {loss.shape}")
            loss = tf.reshape(loss, [])
        if predictions is not None and not isinstance(predictions, (dict, tf.Tensor)):
            raise TypeError(f"EstimatorSpec: predictions: must be a Tensor or a dict of Tensors, "
                            f"got {type(predictions).__name__}")
        eval_metric_ops = dict(eval_metric_ops or {})
        for key, value in eval_metric_ops.items():
            if not (isinstance(value, tuple) and len(value) == 2):
                raise TypeError(f"EstimatorSpec: eval_metric_ops[{key!r}]: must be a (value, update_op) pair "
                                f"(e.g. tf.compat.v1.metrics.accuracy), got {value!r}")
        hooks = {}
        for field, given in (("training_chief_hooks", training_chief_hooks), ("training_hooks", training_hooks),
                             ("evaluation_hooks", evaluation_hooks), ("prediction_hooks", prediction_hooks)):
            given = tuple(given or ())
            for hook in given:
                if not isinstance(hook, tf.compat.v1.train.SessionRunHook):
                    raise TypeError(f"EstimatorSpec: {field}: must be SessionRunHooks, got {type(hook).__name__}")
            hooks[field] = given
        if scaffold is not None and not isinstance(scaffold, tf.compat.v1.train.Scaffold):
            raise TypeError(f"EstimatorSpec: scaffold: must be a tf.compat.v1.train.Scaffold, "
                            f"got {type(scaffold).__name__}")
        return super().__new__(cls, mode, predictions, loss, train_op, eval_metric_ops, export_outputs,
                               hooks["training_chief_hooks"], hooks["training_hooks"], scaffold,
                               hooks["evaluation_hooks"], hooks["prediction_hooks"])
