"""The key pipeline on the Estimator path (spec/pipeline.md, PIPE-9): an Estimator's input_fn maps the
FeatureSpec insert function, or ``GraphModifierHook`` (as mxRec's Estimator scripts pass it) moves its
model_fn's ``modify_graph=True`` lookups' key processing into the input pipeline, so its training batches are
resolved ahead in tf.data as a Session's are (PIPE-8), the table looked up by name for every batch (the
input_fn runs before model_fn creates it).  Graph-modification lookups without the hook read the iterator
directly: there is no input pipeline to hook, and nothing is resolved ahead.  ``train_and_evaluate`` (evaluations and checkpoints between
steps) and a second ``train`` restoring model_dir give the same losses, metrics, tables, statistics and
checkpoint files with the pipeline on and off, on both backends; with it on, the training lookups took
batches resolved ahead."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import mxrec_ref.tf as mx
from mxrec_ref.pipeline import SWITCH
from mxrec_ref.tf import estimator
from mxrec_ref.tf.graph_modifier import GraphModifierHook

import estimator_model
import tf_model
from test_pipeline_tf import _files

LOSSES = "pipe_9_loss"


@pytest.fixture(autouse=True)
def _fresh():
    tf_model.fresh_graph()
    yield
    tf_model.fresh_graph()


def model_fn(features, labels, mode, params):
    """tests/estimator_model.py's, its loss in a collection for ``LossRecorder``."""
    spec = estimator_model.model_fn(features, labels, mode, params)
    if spec.loss is not None:
        tf.compat.v1.add_to_collection(LOSSES, spec.loss)
    return spec


class LossRecorder(tf.compat.v1.train.SessionRunHook):
    def __init__(self):
        self.losses: list[float] = []

    def before_run(self, run_context):
        return tf.compat.v1.train.SessionRunArgs(tf.compat.v1.get_collection(LOSSES)[0])

    def after_run(self, run_context, run_values):
        self.losses.append(float(run_values.results))


def train(backend, mode, folder, *, modifier: bool):
    mx.init(backend=backend)
    hooks = [GraphModifierHook()] if modifier else []
    est = estimator.Estimator(model_fn, model_dir=str(folder), params={"mode": mode},
                              config=estimator.RunConfig(save_checkpoints_steps=4, log_step_count_steps=0))
    recorder = LossRecorder()
    metrics, _ = estimator.train_and_evaluate(
        est, estimator.TrainSpec(estimator_model.input_fn_for(mode, epochs=2), max_steps=11,
                                   hooks=[recorder, *hooks]),
        estimator.EvalSpec(estimator_model.input_fn_for(mode, seed=1), steps=2))
    est.train(estimator_model.input_fn_for(mode, seed=2), steps=5, hooks=[recorder, *hooks])    # a new graph: restores
    table = mx.ConfigInitializer.get_instance().tables["user_table"]
    result = dict(losses=recorder.losses, metrics={k: float(v) for k, v in metrics.items()},
                  state=table.store.export(), stats=table.store.stats(), files=_files(folder),
                  dense=est.get_variable_value("mlp_layer_w").tolist(), taken=table.ahead.taken)
    tf_model.fresh_graph()
    return result


@pytest.mark.parametrize("mode, modifier", [("feature_spec", False), ("modify_graph", True), ("modify_graph", False)],
                         ids=["feature_spec", "modify_graph_hook", "modify_graph_no_hook"])
def test_pipe_9_an_estimator_trains_the_same_with_the_pipeline_on_and_off(backend, monkeypatch, tmp_path, mode,
                                                                          modifier):
    runs = {}
    for switch in ("1", "0"):
        monkeypatch.setenv(SWITCH, switch)
        runs[switch] = train(backend, mode, tmp_path / switch, modifier=modifier)
    on, off = runs["1"], runs["0"]
    if mode == "modify_graph" and not modifier:
        assert on["taken"] == off["taken"] == 0     # the lookups read the iterator: no input pipeline to hook
    else:
        assert on["taken"] >= 11 + 5 - 3 and off["taken"] == 0    # (almost) every training batch resolved ahead
    assert len(on["losses"]) == 11 + 5 and on["losses"] == off["losses"] and np.isfinite(on["losses"]).all()
    assert on["metrics"] == off["metrics"] and on["dense"] == off["dense"]
    assert on["state"].differences(off["state"]) == [] and on["stats"] == off["stats"]
    assert on["files"] == off["files"] and any("user_table" in name for name in on["files"])
