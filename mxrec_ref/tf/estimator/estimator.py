"""``Estimator``: tf.estimator's training loop for TF 2.21, on TF's own ``tf.compat.v1`` pieces
(spec/estimator.md).  Every ``train``, ``evaluate``, ``predict`` and ``export_saved_model`` call
builds the model again in a new ``tf.Graph``; tables created again bind to the store of their name
(TF-21), so the tables -- like the dense variables, through the checkpoint -- carry over from call
to call.  Checkpoints are written and read by ``tf.compat.v1.train.Saver``, whose patch (TF-6)
saves and restores the sparse tables beside the dense checkpoint.
"""
from __future__ import annotations

import copy
import logging
import os
import tempfile

import tensorflow as tf

from .. import feature_spec
from ..export import export_saved_model as export_serving_model
from ..warm_start import WarmStartSettings, warm_start
from .export import ServingInputReceiver
from .inputs import features_and_labels
from .mode_keys import ModeKeys
from .model_fn import call_model_fn, check_model_fn
from .run_config import RunConfig
from .session_hooks import StopAfterNEvalsHook

logger = logging.getLogger("mxrec_ref.tf")


class Estimator:
    def __init__(self, model_fn, model_dir=None, config=None, params=None, warm_start_from=None):
        if config is None:
            config = RunConfig()
        if not isinstance(config, RunConfig):
            raise ValueError(f"Estimator: config: must be a RunConfig, got {type(config).__name__}")
        check_model_fn(model_fn, params)
        model_dir = None if model_dir is None else os.fspath(model_dir)
        if model_dir is not None and config.model_dir is not None and \
                os.path.abspath(model_dir) != os.path.abspath(config.model_dir):
            raise ValueError(f"Estimator: model_dir: {model_dir!r} differs from config.model_dir "
                             f"{config.model_dir!r}; give one of them")
        model_dir = model_dir or config.model_dir
        if model_dir is None:
            model_dir = tempfile.mkdtemp()
            logger.warning("Estimator: model_dir: none given; using the temporary folder %s", model_dir)
        self._config = config.replace(model_dir=model_dir)
        self._model_dir = model_dir
        self._model_fn = model_fn
        # TF's rule: a deep copy, so a later change to the caller's object does not reach the model;
        # any object (mxRec scripts pass an argparse namespace and read params.model_dir)
        self._params = copy.deepcopy(params) if params is not None else {}
        self._warm_start_settings = _warm_start_settings(warm_start_from)

    model_dir = property(lambda self: self._model_dir)
    config = property(lambda self: self._config)
    params = property(lambda self: copy.deepcopy(self._params))
    model_fn = property(lambda self: self._model_fn)

    # ----------------------------------------------------------- checkpoints
    def latest_checkpoint(self):
        """The newest checkpoint prefix in ``model_dir``, or None."""
        return tf.train.latest_checkpoint(self._model_dir)

    def get_variable_names(self) -> list[str]:
        """The dense variables of the latest checkpoint (the tables live beside it, TF-6)."""
        return [name for name, _ in tf.train.list_variables(self._trained_checkpoint())]

    def get_variable_value(self, name):
        return tf.train.load_variable(self._trained_checkpoint(), name)

    def _trained_checkpoint(self) -> str:
        checkpoint = self.latest_checkpoint()
        if checkpoint is None:
            raise ValueError(f"Estimator: model_dir {self._model_dir!r} has no checkpoint: train first")
        return checkpoint

    # ------------------------------------------------------------ building
    def _build(self, input_fn, mode):
        """In the current (new) graph: the global step, the inputs and the model (EST-4)."""
        if self._config.tf_random_seed is not None:
            tf.compat.v1.set_random_seed(self._config.tf_random_seed)
        global_step = tf.compat.v1.train.get_or_create_global_step()
        features, labels, input_hooks = features_and_labels(input_fn, mode, self._params, self._config)
        spec = call_model_fn(self._model_fn, features, labels, mode, self._params, self._config)
        feature_spec.check_tables_resolved()       # TF-25: every FeatureSpec's table exists by now
        return global_step, spec, input_hooks

    def _session_config(self):
        return self._config.session_config

    # ---------------------------------------------------------------- train
    def train(self, input_fn, hooks=None, steps=None, max_steps=None, saving_listeners=None):
        """Train from the latest checkpoint in ``model_dir`` (or from the start / the warm start) for
        ``steps`` more steps, up to global step ``max_steps``, or until ``input_fn``'s data ends."""
        if steps is not None and max_steps is not None:
            raise ValueError("Estimator.train: steps, max_steps: give at most one of them")
        for name, value in (("steps", steps), ("max_steps", max_steps)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
                raise ValueError(f"Estimator.train: {name}: must be a positive integer, got {value!r}")
        checkpoint = self.latest_checkpoint()
        if max_steps is not None and checkpoint is not None:
            reached = int(tf.train.load_variable(checkpoint, tf.compat.v1.GraphKeys.GLOBAL_STEP))
            if reached >= max_steps:
                logger.info("Estimator.train: global step %d already reached max_steps %d", reached, max_steps)
                return self
        with tf.Graph().as_default():
            global_step, spec, input_hooks = self._build(input_fn, ModeKeys.TRAIN)
            if self._warm_start_settings is not None and checkpoint is None:
                # a checkpoint in model_dir wins over the warm start (TF's rule): only the first train warm-starts
                warm_start(self._warm_start_settings)
            scaffold = spec.scaffold or tf.compat.v1.train.Scaffold()
            if scaffold.saver is None and not tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.SAVERS):
                tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.SAVERS, tf.compat.v1.train.Saver(
                    sharded=True, max_to_keep=self._config.keep_checkpoint_max,
                    keep_checkpoint_every_n_hours=self._config.keep_checkpoint_every_n_hours,
                    defer_build=True, save_relative_paths=True))
            all_hooks = [*input_hooks, *(hooks or ()), *spec.training_hooks,
                         tf.compat.v1.train.NanTensorHook(spec.loss)]
            if steps is not None or max_steps is not None:    # neither: until input_fn's data ends
                all_hooks.append(tf.compat.v1.train.StopAtStepHook(num_steps=steps, last_step=max_steps))
            if self._config.log_step_count_steps:
                all_hooks.append(tf.compat.v1.train.LoggingTensorHook(
                    {"loss": spec.loss, "step": global_step}, every_n_iter=self._config.log_step_count_steps))
            chief_hooks = list(spec.training_chief_hooks)
            if self._config.save_checkpoints_steps or self._config.save_checkpoints_secs or saving_listeners:
                chief_hooks.append(tf.compat.v1.train.CheckpointSaverHook(
                    self._model_dir, save_secs=self._config.save_checkpoints_secs,
                    save_steps=None if self._config.save_checkpoints_secs else
                    (self._config.save_checkpoints_steps or 10 ** 9),
                    scaffold=scaffold, listeners=saving_listeners))
            with tf.compat.v1.train.MonitoredTrainingSession(
                    checkpoint_dir=self._model_dir, scaffold=scaffold, hooks=all_hooks, chief_only_hooks=chief_hooks,
                    save_checkpoint_secs=None, save_checkpoint_steps=None,
                    save_summaries_steps=self._config.save_summary_steps or None, config=self._session_config(),
                    log_step_count_steps=self._config.log_step_count_steps) as session:
                while not session.should_stop():
                    session.run([spec.train_op, spec.loss])
        return self

    # ------------------------------------------------------------- evaluate
    def evaluate(self, input_fn, steps=None, hooks=None, checkpoint_path=None, name=None) -> dict:
        """The metrics of ``eval_metric_ops`` and the mean ``loss`` over ``steps`` batches (or all of
        ``input_fn``'s data) with the variables and tables of ``checkpoint_path`` (default: the latest)."""
        if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps <= 0):
            raise ValueError(f"Estimator.evaluate: steps: must be a positive integer, got {steps!r}")
        checkpoint_path = self._checkpoint_to_read(checkpoint_path, "evaluate")
        with tf.Graph().as_default():
            global_step, spec, input_hooks = self._build(input_fn, ModeKeys.EVAL)
            metrics = dict(spec.eval_metric_ops)
            if "loss" not in metrics:
                metrics["loss"] = tf.compat.v1.metrics.mean(spec.loss)
            updates = [update for _, update in metrics.values()]
            values = {key: value for key, (value, _) in metrics.items()}
            values[tf.compat.v1.GraphKeys.GLOBAL_STEP] = global_step
            final = tf.compat.v1.train.FinalOpsHook(values)
            all_hooks = [*input_hooks, *(hooks or ()), *spec.evaluation_hooks, StopAfterNEvalsHook(steps), final]
            creator = tf.compat.v1.train.ChiefSessionCreator(
                scaffold=spec.scaffold or tf.compat.v1.train.Scaffold(), checkpoint_filename_with_path=checkpoint_path,
                config=self._session_config())
            with tf.compat.v1.train.MonitoredSession(session_creator=creator, hooks=all_hooks) as session:
                while not session.should_stop():
                    session.run(updates)
            results = dict(final.final_ops_values)
        self._write_eval_summary(results, name)
        return results

    def _write_eval_summary(self, results: dict, name) -> None:
        """``model_dir/eval`` (or ``eval_<name>``) events, as TF writes them for TensorBoard."""
        folder = os.path.join(self._model_dir, "eval" if not name else f"eval_{name}")
        values = [tf.compat.v1.Summary.Value(tag=key, simple_value=float(value)) for key, value in sorted(
            results.items()) if key != tf.compat.v1.GraphKeys.GLOBAL_STEP and getattr(value, "size", 1) == 1]
        with tf.Graph().as_default():        # TF1's writer refuses eager mode, TF2's default
            writer = tf.compat.v1.summary.FileWriterCache.get(folder)
            writer.add_summary(tf.compat.v1.Summary(value=values),
                               int(results.get(tf.compat.v1.GraphKeys.GLOBAL_STEP, 0)))
            writer.flush()

    def _checkpoint_to_read(self, checkpoint_path, caller: str):
        if checkpoint_path is not None:
            if os.path.isdir(checkpoint_path):
                checkpoint_path = tf.train.latest_checkpoint(checkpoint_path)
            elif not tf.io.gfile.exists(f"{checkpoint_path}.index"):
                raise ValueError(f"Estimator.{caller}: checkpoint_path: no checkpoint {checkpoint_path!r}")
            return checkpoint_path
        checkpoint_path = self.latest_checkpoint()
        if checkpoint_path is None:
            logger.info("Estimator.%s: no trained model in %s; running from the initial values", caller,
                        self._model_dir)
        return checkpoint_path

    # -------------------------------------------------------------- predict
    def predict(self, input_fn, predict_keys=None, hooks=None, checkpoint_path=None, yield_single_examples=True):
        """A generator of predictions for ``input_fn``'s data, with the variables and tables of
        ``checkpoint_path`` (default: the latest): one dict (or value) per example, or per batch
        when ``yield_single_examples`` is False."""
        checkpoint_path = self._checkpoint_to_read(checkpoint_path, "predict")
        with tf.Graph().as_default():
            _, spec, input_hooks = self._build(input_fn, ModeKeys.PREDICT)
            predictions = _selected(spec.predictions, predict_keys)
            creator = tf.compat.v1.train.ChiefSessionCreator(
                scaffold=spec.scaffold or tf.compat.v1.train.Scaffold(), checkpoint_filename_with_path=checkpoint_path,
                config=self._session_config())
            with tf.compat.v1.train.MonitoredSession(
                    session_creator=creator, hooks=[*input_hooks, *(hooks or ()), *spec.prediction_hooks]) as session:
                while not session.should_stop():
                    batch = session.run(predictions)
                    if not yield_single_examples:
                        yield batch
                    elif isinstance(batch, dict):
                        sizes = {key: len(value) for key, value in batch.items()}
                        if len(set(sizes.values())) != 1:
                            raise ValueError(f"Estimator.predict: yield_single_examples: the predictions have "
                                             f"different batch sizes {sizes}; pass yield_single_examples=False")
                        for index in range(next(iter(sizes.values()))):
                            yield {key: value[index] for key, value in batch.items()}
                    else:
                        yield from batch

    # --------------------------------------------------------------- export
    def export_saved_model(self, export_dir_base, serving_input_receiver_fn, assets_extra=None, as_text=False,
                           checkpoint_path=None, experimental_mode=ModeKeys.PREDICT):
        """A SavedModel of the PREDICT graph under ``export_dir_base/<n>`` through the project's serving
        export (KERAS-10): the tables become static lookups, so it serves with TensorFlow alone."""
        if experimental_mode != ModeKeys.PREDICT:
            raise ValueError(f"Estimator.export_saved_model: experimental_mode: only ModeKeys.PREDICT is "
                             f"exported, got {experimental_mode!r}")
        if assets_extra or as_text:
            raise ValueError("Estimator.export_saved_model: assets_extra, as_text: not supported by the serving "
                             "export; leave them at their defaults")
        checkpoint_path = self._checkpoint_to_read(checkpoint_path, "export_saved_model")
        if checkpoint_path is None:
            raise ValueError(f"Estimator.export_saved_model: model_dir {self._model_dir!r} has no checkpoint: "
                             f"train first")
        with tf.Graph().as_default():
            tf.compat.v1.train.get_or_create_global_step()
            receiver = serving_input_receiver_fn()
            if not isinstance(receiver, ServingInputReceiver):
                raise TypeError(f"Estimator.export_saved_model: serving_input_receiver_fn: must return a "
                                f"ServingInputReceiver, got {type(receiver).__name__}")
            spec = call_model_fn(self._model_fn, receiver.features, None, ModeKeys.PREDICT, self._params,
                                 self._config)
            outputs = spec.predictions if isinstance(spec.predictions, dict) else {"output": spec.predictions}
            with tf.compat.v1.Session(config=self._session_config()) as session:
                session.run(tf.compat.v1.local_variables_initializer())
                tf.compat.v1.train.Saver().restore(session, checkpoint_path)     # dense and sparse (TF-6)
                target = os.path.join(os.fspath(export_dir_base), _next_export_name(export_dir_base))
                return export_serving_model(session, dict(receiver.receiver_tensors), dict(outputs), target)


def _next_export_name(base) -> str:
    """TF names an export by its time; here by a count, one more than the largest name in ``base``,
    so the folder does not depend on the clock."""
    taken = [int(n) for n in os.listdir(base) if n.isdigit()] if os.path.isdir(base) else []
    return str(max(taken, default=0) + 1)


def _selected(predictions, predict_keys):
    if predict_keys is None:
        return predictions
    if not isinstance(predictions, dict):
        raise ValueError("Estimator.predict: predict_keys: the model's predictions are not a dict")
    keys = [predict_keys] if isinstance(predict_keys, str) else list(predict_keys)
    missing = sorted(set(keys) - set(predictions))
    if missing:
        raise ValueError(f"Estimator.predict: predict_keys: {missing} are not in the predictions "
                         f"{sorted(predictions)}")
    return {key: predictions[key] for key in keys}


def _warm_start_settings(warm_start_from):
    """TF's forms: None, a checkpoint path (warm-start every variable and table from it) or a
    WarmStartSettings, whose list form (the seed's Table 2) is the project's warm start (WS-1)."""
    if warm_start_from is None:
        return None
    if isinstance(warm_start_from, (str, os.PathLike)):
        return WarmStartSettings(ckpt_to_initialize_from=os.fspath(warm_start_from))
    if isinstance(warm_start_from, WarmStartSettings):
        return warm_start_from
    raise ValueError(f"Estimator: warm_start_from: must be a path or a WarmStartSettings, "
                     f"got {type(warm_start_from).__name__}")
