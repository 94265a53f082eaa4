"""The Estimator for TF 2.21 (spec/estimator.md)."""
import json
import os
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import mxrec_ref.tf as mx
from mxrec_ref.tf import estimator

import estimator_model
import tf_model

CHILD = Path(__file__).resolve().parent / "estimator_child.py"


@pytest.fixture(autouse=True)
def _fresh():
    tf_model.fresh_graph()
    yield
    tf_model.fresh_graph()


def _estimator(model_dir, mode="feature_spec", **config):
    config.setdefault("log_step_count_steps", 0)
    return estimator.Estimator(estimator_model.model_fn, model_dir=str(model_dir), params={"mode": mode},
                               config=estimator.RunConfig(**config))


def test_est_1_model_fn_is_called_with_the_arguments_it_names(tmp_path):
    seen = {}

    def model_fn(features, mode, config):
        seen.update(mode=mode, config=config)
        return estimator.EstimatorSpec(mode, predictions=tf.identity(features["x"]))

    mx.init()
    est = estimator.Estimator(model_fn, model_dir=str(tmp_path))
    out = list(est.predict(lambda: tf.data.Dataset.from_tensor_slices({"x": [1.0, 2.0]}).batch(2)))
    assert out == [1.0, 2.0] and seen["mode"] == estimator.ModeKeys.PREDICT and seen["config"] is est.config
    with pytest.raises(ValueError, match="'features'"):
        estimator.Estimator(lambda inputs, mode: None)
    with pytest.raises(ValueError, match="params"):
        estimator.Estimator(model_fn, params={"a": 1})
    with pytest.raises(ValueError, match="model_dir"):
        estimator.Estimator(model_fn, model_dir=str(tmp_path / "a"), config=estimator.RunConfig(model_dir="b"))
    with pytest.raises(ValueError, match="takes no 'labels'"):
        list(est.predict(lambda: ({"x": tf.constant([1.0])}, tf.constant([0.0]))))


def test_est_2_run_config_has_tfs_defaults_and_replace():
    config = estimator.RunConfig()
    assert (config.save_checkpoints_secs, config.save_checkpoints_steps, config.keep_checkpoint_max,
            config.log_step_count_steps, config.save_summary_steps, config.is_chief) == (600, None, 5, 100, 100, True)
    steps = config.replace(save_checkpoints_steps=10, model_dir="m")
    assert (steps.save_checkpoints_steps, steps.save_checkpoints_secs, steps.model_dir) == (10, None, "m")
    assert config.model_dir is None
    with pytest.raises(ValueError, match="at most one"):
        estimator.RunConfig(save_checkpoints_steps=1, save_checkpoints_secs=1)
    with pytest.raises(ValueError, match="keep_checkpoint_max"):
        estimator.RunConfig(keep_checkpoint_max=-1)
    with pytest.raises(ValueError, match="not_a_field"):
        config.replace(not_a_field=1)


def test_est_3_estimator_spec_checks_its_fields():
    with tf.Graph().as_default():
        loss = tf.constant(1.0)
        with pytest.raises(ValueError, match="train_op"):
            estimator.EstimatorSpec(estimator.ModeKeys.TRAIN, loss=loss)
        with pytest.raises(ValueError, match="loss"):
            estimator.EstimatorSpec(estimator.ModeKeys.EVAL)
        with pytest.raises(ValueError, match="predictions"):
            estimator.EstimatorSpec(estimator.ModeKeys.PREDICT)
        with pytest.raises(TypeError, match="eval_metric_ops"):
            estimator.EstimatorSpec(estimator.ModeKeys.EVAL, loss=loss, eval_metric_ops={"a": loss})
        with pytest.raises(TypeError, match="training_hooks"):
            estimator.EstimatorSpec(estimator.ModeKeys.TRAIN, loss=loss, train_op=tf.no_op(), training_hooks=[1])
        with pytest.raises(ValueError, match="scalar"):
            estimator.EstimatorSpec(estimator.ModeKeys.EVAL, loss=tf.constant([1.0, 2.0]))
    assert (estimator.ModeKeys.TRAIN, estimator.ModeKeys.EVAL, estimator.ModeKeys.PREDICT) == ("train", "eval", "infer")


@pytest.mark.parametrize("mode", ["feature_spec", "modify_graph"])
def test_est_4_est_5_train_resumes_and_equals_one_longer_train(backend, tmp_path, mode):
    """Two train calls (two graphs, the second restoring model_dir) give the state of one call of the same
    steps; evaluate and predict read the latest checkpoint."""
    states = []
    for calls, folder in (((3, 3), "two"), ((6,), "one")):
        tf_model.fresh_graph()
        mx.init(backend=backend)
        est = _estimator(tmp_path / folder, mode, save_checkpoints_steps=100)
        for steps in calls:
            est.train(estimator_model.input_fn_for(mode, epochs=3) if len(calls) == 1 else
                      _resumed_input(mode, calls, steps, est), steps=steps)
        table = mx.ConfigInitializer.get_instance().tables["user_table"].store.export()
        states.append((table.keys.tolist(), table.values.tolist(), est.get_variable_value("mlp_layer_w").tolist(),
                       int(est.get_variable_value("global_step"))))
        metrics = est.evaluate(estimator_model.input_fn_for(mode), steps=2)
        assert metrics["global_step"] == 6 and set(metrics) == {"accuracy", "loss", "global_step"}
        predictions = list(est.predict(estimator_model.input_fn_for(mode, rows=20)))
        assert len(predictions) == 20 and set(predictions[0]) == {"probability", "logit"}
        assert list(est.predict(estimator_model.input_fn_for(mode, rows=20), predict_keys="logit",
                                yield_single_examples=False))[0].keys() == {"logit"}
    assert states[0] == states[1]
    assert "mlp_layer_w" in est.get_variable_names() and est.latest_checkpoint().endswith("model.ckpt-6")


def _resumed_input(mode, calls, steps, est):
    """The batches a single train of sum(calls) steps would read at this point: skip those already trained."""
    done = 0 if est.latest_checkpoint() is None else int(est.get_variable_value("global_step"))
    base = estimator_model.input_fn_for(mode, epochs=3)
    return lambda mode: base(mode).skip(done)


def test_est_5_evaluate_and_predict_in_a_new_process_read_model_dir(backend, tmp_path, mxrec_ref_command):
    mx.init(backend=backend)
    est = _estimator(tmp_path, "feature_spec", save_checkpoints_steps=4)
    est.train(estimator_model.input_fn_for("feature_spec"), steps=5)
    here_metrics = est.evaluate(estimator_model.input_fn_for("feature_spec"))
    here_predictions = [float(p["probability"]) for p in est.predict(estimator_model.input_fn_for("feature_spec"))]
    state = mx.ConfigInitializer.get_instance().tables["user_table"].store.export()
    result = mxrec_ref_command(["run", CHILD, str(tmp_path), "feature_spec", backend],
                               env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    there = json.loads(result.stdout.strip().splitlines()[-1])
    assert there["metrics"] == pytest.approx({k: float(v) for k, v in here_metrics.items()}, rel=0, abs=0)
    assert there["predictions"] == here_predictions
    assert there["keys"] == state.keys.tolist() and there["values"] == np.asarray(state.values, np.float64).tolist()


def test_est_5_train_arguments_are_checked(tmp_path):
    mx.init()
    est = _estimator(tmp_path)
    with pytest.raises(ValueError, match="at most one"):
        est.train(estimator_model.input_fn_for("feature_spec"), steps=1, max_steps=1)
    with pytest.raises(ValueError, match="steps"):
        est.train(estimator_model.input_fn_for("feature_spec"), steps=0)
    est.train(estimator_model.input_fn_for("feature_spec"), max_steps=2)
    est.train(estimator_model.input_fn_for("feature_spec"), max_steps=2)      # reached: returns at once
    assert int(est.get_variable_value("global_step")) == 2
    est.train(estimator_model.input_fn_for("feature_spec", rows=48))          # neither: until the data ends
    assert int(est.get_variable_value("global_step")) == 2 + 48 // estimator_model.BATCH
    with pytest.raises(ValueError, match="predict_keys"):
        next(est.predict(estimator_model.input_fn_for("feature_spec"), predict_keys=["nope"]))


def test_est_6_variable_reads_need_a_checkpoint(tmp_path):
    est = _estimator(tmp_path)
    assert est.latest_checkpoint() is None
    with pytest.raises(ValueError, match="no checkpoint"):
        est.get_variable_names()


def test_est_7_train_and_evaluate_evaluates_at_step_checkpoints_and_the_end(backend, tmp_path):
    mx.init(backend=backend)
    est = _estimator(tmp_path, "modify_graph", save_checkpoints_steps=3)
    evaluated = []

    class Recorder(tf.compat.v1.train.SessionRunHook):
        def end(self, session):
            evaluated.append(int(session.run(tf.compat.v1.train.get_global_step())))

    metrics, exports = estimator.train_and_evaluate(
        est, estimator.TrainSpec(estimator_model.input_fn_for("modify_graph", epochs=2), max_steps=7),
        estimator.EvalSpec(estimator_model.input_fn_for("modify_graph"), steps=2, hooks=[Recorder()]))
    assert evaluated == [3, 6, 7] and metrics["global_step"] == 7 and exports == []
    assert tf.io.gfile.glob(str(tmp_path / "eval" / "events.out.tfevents.*"))        # TensorBoard's eval folder
    evaluated_state = _final_state(est)
    tf_model.fresh_graph()             # the same training without the evaluations: the same model, bit for bit
    mx.init(backend=backend)
    alone = _estimator(tmp_path / "alone", "modify_graph", save_checkpoints_steps=3)
    alone.train(estimator_model.input_fn_for("modify_graph", epochs=2), max_steps=7)
    assert _final_state(alone) == evaluated_state
    with pytest.raises(ValueError, match="exporters"):
        estimator.EvalSpec(estimator_model.input_fn_for("modify_graph"), exporters=[object()])


def _final_state(est):
    table = mx.ConfigInitializer.get_instance().tables["user_table"].store.export()
    return table.keys.tolist(), table.values.tolist(), est.get_variable_value("mlp_layer_w").tolist()


def test_est_8_export_saved_model_serves_without_mxrec(backend, tmp_path):
    mx.init(backend=backend)
    est = _estimator(tmp_path / "model", "modify_graph")
    est.train(estimator_model.input_fn_for("modify_graph"), steps=4)
    ids = np.array([[1, 2], [3, 39]], np.int64)
    expected = [p["probability"] for p in est.predict(
        lambda: tf.data.Dataset.from_tensor_slices(({"user_ids": ids}, np.zeros(2, np.float32))).batch(2))]
    receiver = estimator.export.build_raw_serving_input_receiver_fn(
        {"user_ids": tf.zeros([1, 2], tf.int64)})
    path = est.export_saved_model(str(tmp_path / "export"), receiver)
    assert os.path.basename(path) == "1"
    served = tf.saved_model.load(path).signatures["serving_default"](user_ids=tf.constant(ids))
    assert np.allclose(served["probability"].numpy(), expected, atol=1e-6)


def test_est_9_install_makes_tf_estimator_this_package():
    import importlib
    import sys

    estimator.install_into_tensorflow()
    try:
        v1 = importlib.import_module("tensorflow.compat.v1")
        assert tf.estimator is estimator and v1.estimator is estimator
        assert importlib.import_module("tensorflow.estimator") is estimator
        assert tf.estimator.SessionRunHook is tf.compat.v1.train.SessionRunHook
        assert tf.compat.v1.estimator.WarmStartSettings is mx.WarmStartSettings
    finally:
        estimator.uninstall_from_tensorflow()
    assert not hasattr(tf, "estimator") and "tensorflow.estimator" not in sys.modules


def test_est_9_every_name_of_the_tf_estimator_audit_resolves():
    """spec/tf.md's audit of tf.estimator: each 'implemented' name is there after install, each 'rejected' one
    is not."""
    import re

    text = (Path(__file__).resolve().parent.parent / "spec" / "tf.md").read_text()
    section = text[text.index("## Audit of `tf.estimator`'s names"):].split("\n## ", 1)[0]
    rows = [line.split("|")[1:3] for line in section.splitlines() if line.startswith("| `")]
    estimator.install_into_tensorflow()
    try:
        for names, status in rows:
            for name in re.findall(r"`([\w.]+)`", names):
                holder = tf.estimator
                for part in name.split("."):
                    holder = getattr(holder, part, None)
                assert (holder is not None) == (status.strip() == "implemented"), name
    finally:
        estimator.uninstall_from_tensorflow()
    assert len(rows) == 9


def test_est_10_warm_start_from_a_path_and_model_dir_wins(backend, tmp_path):
    mx.init(backend=backend)
    source = _estimator(tmp_path / "source", "modify_graph", save_checkpoints_steps=100)
    source.train(estimator_model.input_fn_for("modify_graph"), steps=3)
    source_table = mx.ConfigInitializer.get_instance().tables["user_table"].store.export()
    source_w = source.get_variable_value("mlp_layer_w")
    tf_model.fresh_graph()
    mx.init(backend=backend)
    target = estimator.Estimator(estimator_model.model_fn, model_dir=str(tmp_path / "target"),
                                 params={"mode": "modify_graph", "w0": 7.0},
                                 config=estimator.RunConfig(log_step_count_steps=0),
                                 warm_start_from=source.latest_checkpoint())
    rows = {}

    class Rows(tf.compat.v1.train.SessionRunHook):
        def after_create_session(self, session, coord):
            rows["w"] = session.run(tf.compat.v1.trainable_variables()[0])
            rows["table"] = mx.ConfigInitializer.get_instance().tables["user_table"].store.export()

    target.train(estimator_model.input_fn_for("modify_graph"), steps=1, hooks=[Rows()])
    assert np.array_equal(rows["w"], source_w)
    assert rows["table"].keys.tolist() == source_table.keys.tolist()
    assert np.array_equal(rows["table"].values, source_table.values)
    trained_w = target.get_variable_value("mlp_layer_w")
    target.train(estimator_model.input_fn_for("modify_graph"), steps=1, hooks=[Rows()])   # model_dir wins now
    assert np.array_equal(rows["w"], trained_w)
