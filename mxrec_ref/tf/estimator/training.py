"""``TrainSpec``, ``EvalSpec`` and ``train_and_evaluate`` (EST-7): one process, so TF's local mode.

Training runs as one ``train`` call (its input is read once, not restarted); an evaluation runs,
each in its own new graph, after every checkpoint the training saves by step count (the first one,
at the starting step, excepted) and once at the end.  When it runs depends on steps only, never the
clock: ``throttle_secs`` and ``start_delay_secs`` are accepted and recorded, and with time-based
checkpoints (``save_checkpoints_secs``) the one evaluation is the final one.
"""
from __future__ import annotations

import collections

import tensorflow as tf

from .estimator import Estimator


class TrainSpec(collections.namedtuple("TrainSpec", ["input_fn", "max_steps", "hooks", "saving_listeners"])):
    def __new__(cls, input_fn, max_steps=None, hooks=None, saving_listeners=None):
        if not callable(input_fn):
            raise TypeError(f"TrainSpec: input_fn: must be callable, got {input_fn!r}")
        if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, int)
                                      or max_steps <= 0):
            raise ValueError(f"TrainSpec: max_steps: must be a positive integer, got {max_steps!r}")
        return super().__new__(cls, input_fn, max_steps, tuple(hooks or ()), tuple(saving_listeners or ()))


class EvalSpec(collections.namedtuple("EvalSpec", ["input_fn", "steps", "name", "hooks", "exporters",
                                                   "start_delay_secs", "throttle_secs"])):
    def __new__(cls, input_fn, steps=100, name=None, hooks=None, exporters=None, start_delay_secs=120,
                throttle_secs=600):
        if not callable(input_fn):
            raise TypeError(f"EvalSpec: input_fn: must be callable, got {input_fn!r}")
        if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps <= 0):
            raise ValueError(f"EvalSpec: steps: must be None or a positive integer, got {steps!r}")
        if exporters:
            raise ValueError("EvalSpec: exporters: not supported; call Estimator.export_saved_model after "
                             "train_and_evaluate")
        return super().__new__(cls, input_fn, steps, name, tuple(hooks or ()), (), start_delay_secs, throttle_secs)


class _EvaluateOnSave(tf.compat.v1.train.CheckpointSaverListener):
    """Evaluates after each checkpoint but the first, and at the end if the last step has none yet."""

    def __init__(self, estimator: Estimator, eval_spec: EvalSpec):
        self._estimator, self._spec = estimator, eval_spec
        self._first = True
        self.results = []          # (global step, metrics) of every evaluation, in order

    def after_save(self, session, global_step_value):
        first, self._first = self._first, False
        if first or self._estimator.config.save_checkpoints_steps is None:   # time-based saves: no clock here
            return
        self.evaluate_at(global_step_value)

    def end(self, session, global_step_value):
        if not self.results or self.results[-1][0] != global_step_value:
            self.evaluate_at(global_step_value)

    def evaluate_at(self, step):
        metrics = self._estimator.evaluate(self._spec.input_fn, steps=self._spec.steps, hooks=self._spec.hooks,
                                           name=self._spec.name)
        self.results.append((int(metrics[tf.compat.v1.GraphKeys.GLOBAL_STEP]) if step is None else int(step),
                             metrics))


def train_and_evaluate(estimator, train_spec, eval_spec):
    """Train with ``train_spec``, evaluating with ``eval_spec`` as the module says; returns
    (the last evaluation's metrics, export results: an empty list), as TF's local mode does."""
    if not isinstance(estimator, Estimator):
        raise TypeError(f"train_and_evaluate: estimator: must be an Estimator, got {type(estimator).__name__}")
    if not isinstance(train_spec, TrainSpec):
        raise TypeError(f"train_and_evaluate: train_spec: must be a TrainSpec, got {type(train_spec).__name__}")
    if not isinstance(eval_spec, EvalSpec):
        raise TypeError(f"train_and_evaluate: eval_spec: must be an EvalSpec, got {type(eval_spec).__name__}")
    listener = _EvaluateOnSave(estimator, eval_spec)
    estimator.train(train_spec.input_fn, hooks=train_spec.hooks, max_steps=train_spec.max_steps,
                    saving_listeners=[*train_spec.saving_listeners, listener])
    if not listener.results:     # max_steps already reached: nothing trained, nothing saved
        listener.evaluate_at(None)
    return listener.results[-1][1], []
