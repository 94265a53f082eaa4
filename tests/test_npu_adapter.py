"""The NPU adapter's CPU face (TF-29): `npu_bridge`, `tf_adapter`, `npu_device` under `mxrec-ref run`,
each name implemented by its CPU equivalent or accepted and logged once; the audit section of spec/tf.md."""
import json
import logging
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from mxrec_ref.compat import npu
from mxrec_ref.compat.npu import optimizers, session_config
from mxrec_ref.compat.npu.estimator import npu_ops
from mxrec_ref.compat.npu.estimator.npu import npu_plugin, util

REPO = Path(__file__).resolve().parent.parent
SPEC = REPO / "spec" / "tf.md"


def _session_values(build, config=None):
    """Build in a fresh graph with graph seed 1, initialise, return ``session.run(build())``."""
    with tf.Graph().as_default():
        tf.compat.v1.set_random_seed(1)
        fetch = build()
        with tf.compat.v1.Session(config=config) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            return session.run(fetch)


def test_tf_29_dropout_is_tfs_dropout_with_a_keep_probability():
    x = np.arange(1, 2001, dtype=np.float32).reshape(40, 50)
    ours = _session_values(lambda: npu_ops.dropout(tf.constant(x), keep_prob=0.75, seed=7))
    tfs = _session_values(lambda: tf.compat.v1.nn.dropout(tf.constant(x), keep_prob=0.75, seed=7))
    np.testing.assert_array_equal(ours, tfs)
    kept = ours != 0
    np.testing.assert_allclose(ours[kept], x[kept] / 0.75, rtol=1e-6)
    assert 0.7 < kept.mean() < 0.8
    # noise_shape broadcasts one mask over a dimension; a tensor keep_prob works as a number does
    column = _session_values(lambda: npu_ops.dropout(tf.constant(x), keep_prob=tf.constant(0.5), noise_shape=[40, 1],
                                                     seed=3))
    assert all(len(set((row != 0).tolist())) == 1 for row in column)
    np.testing.assert_array_equal(_session_values(lambda: npu_ops.dropout(tf.constant(x), keep_prob=1.0)), x)


@pytest.mark.parametrize("keep_prob", [0.0, -0.1, 1.5])
def test_tf_29_dropout_refuses_a_keep_probability_outside_0_1(keep_prob):
    with tf.Graph().as_default(), pytest.raises(ValueError, match=r"npu_ops.dropout: keep_prob: must be in \(0, 1\]"):
        npu_ops.dropout(tf.constant([1.0]), keep_prob=keep_prob)


def _train(wrap, steps=4, poison_step=None):
    """Dense SGD on y = w.x, the optimizer wrapped by ``wrap``; a NaN in the loss at ``poison_step``."""
    def build():
        w = tf.compat.v1.get_variable("w", initializer=tf.constant([0.5, -1.0, 2.0]))
        step = tf.compat.v1.train.get_or_create_global_step()
        poison = tf.compat.v1.placeholder_with_default(0.0, [])
        loss = tf.reduce_sum(tf.square(w * [1.0, 2.0, 3.0] - 1.0)) * (1.0 + poison)
        train = wrap(tf.compat.v1.train.GradientDescentOptimizer(0.01)).minimize(loss, global_step=step)
        return w, step, poison, train

    with tf.Graph().as_default():
        w, step, poison, train = build()
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            for i in range(steps):
                session.run(train, {poison: np.nan} if i == poison_step else {})
            values = {v.op.name: session.run(v) for v in tf.compat.v1.global_variables()}
    return values


def test_tf_29_wrapped_optimizers_train_bit_for_bit_as_the_plain_one():
    """NPUDistributedOptimizer (one rank: no all-reduce) and loss scaling by a power of two change no bit."""
    plain = _train(lambda opt: opt)
    for wrap in (optimizers.NPUDistributedOptimizer,
                 lambda opt: optimizers.NPULossScaleOptimizer(opt, optimizers.FixedLossScaleManager(2 ** 12)),
                 lambda opt: optimizers.NPULossScaleOptimizer(
                     opt, optimizers.ExponentialUpdateLossScaleManager(2 ** 10, incr_every_n_steps=2))):
        wrapped = _train(wrap)
        np.testing.assert_array_equal(wrapped["w"], plain["w"])
        assert wrapped["global_step"] == plain["global_step"] == 4


def test_tf_29_loss_scaling_skips_a_non_finite_step_and_shrinks_the_scale():
    manager = {}

    def wrap(opt):
        manager["m"] = optimizers.ExponentialUpdateLossScaleManager(1024, incr_every_n_steps=100,
                                                                     decr_every_n_nan_or_inf=1, decr_ratio=0.5)
        return optimizers.NPULossScaleOptimizer(opt, manager["m"])

    skipped = _train(wrap, steps=4, poison_step=1)
    three = _train(lambda opt: opt, steps=3)
    np.testing.assert_array_equal(skipped["w"], three["w"])       # the NaN step changed no weight
    assert skipped["global_step"] == 4                            # but counted
    assert skipped["loss_scale_manager/loss_scale"] == 512.0


def test_tf_29_wrappers_refuse_what_is_not_a_tf1_optimizer():
    with pytest.raises(TypeError, match="NPUDistributedOptimizer: optimizer: must be a tf.compat.v1.train.Optimizer"):
        optimizers.NPUDistributedOptimizer(object())
    with pytest.raises(ValueError, match="FixedLossScaleManager: loss_scale"):
        optimizers.FixedLossScaleManager(0.5)
    with pytest.raises(ValueError, match="ExponentialUpdateLossScaleManager: decr_ratio"):
        optimizers.ExponentialUpdateLossScaleManager(8, 2, decr_ratio=1.5)


def _npu_optimizer_config():
    config = tf.compat.v1.ConfigProto()
    custom_op = config.graph_options.rewrite_options.custom_optimizers.add()
    custom_op.name = "NpuOptimizer"
    custom_op.parameter_map["use_off_line"].b = True
    custom_op.parameter_map["precision_mode"].s = tf.compat.as_bytes("allow_mix_precision")
    custom_op.parameter_map["iterations_per_loop"].i = 10
    config.graph_options.rewrite_options.remapping = session_config.RewriterConfig.OFF
    return config


def test_tf_29_an_npu_optimizer_session_config_runs_a_cpu_session_unchanged(caplog):
    """TensorFlow 2.21 skips the unregistered custom optimizer: same values, no error; the adapter's
    config builders log its knobs once, the precision one as a WARNING."""
    def build():
        x = tf.compat.v1.get_variable("x", initializer=tf.constant(np.linspace(-1, 1, 12, dtype=np.float32)))
        return tf.reduce_sum(tf.nn.relu(tf.reshape(x, [3, 4]) @ tf.ones([4, 2])))

    assert _session_values(build, _npu_optimizer_config()) == _session_values(build)
    assert session_config.npu_knobs(_npu_optimizer_config()) == {"use_off_line": True,
                                                                 "precision_mode": "allow_mix_precision",
                                                                 "iterations_per_loop": 10}
    with caplog.at_level(logging.INFO, logger="mxrec_ref.tf"):
        built = npu.npu_config_proto(_npu_optimizer_config())
        npu.npu_session_config_init(_npu_optimizer_config())
    assert [c.name for c in built.graph_options.rewrite_options.custom_optimizers] == ["NpuOptimizer"]
    assert _session_values(build, built) == _session_values(build)
    precision = [r for r in caplog.records if "precision_mode" in r.getMessage()]
    assert len(precision) == 1 and precision[0].levelno == logging.WARNING
    assert any("'use_off_line'" in r.getMessage() and r.levelno == logging.INFO for r in caplog.records)


def test_tf_29_loop_and_saturation_settings_are_checked_and_logged_once(caplog):
    with caplog.at_level(logging.INFO, logger="mxrec_ref.tf"):
        assert util.set_iteration_per_loop(None, "train_op", 1) == "train_op"
        for _ in range(2):
            assert util.set_iteration_per_loop(None, "train_op", 7) == "train_op"
        npu_plugin.set_device_sat_mode(1)
    loops = [r for r in caplog.records if "iterations_per_loop=7" in r.getMessage()]
    assert len(loops) == 1 and loops[0].levelno == logging.WARNING
    with pytest.raises(ValueError, match="util.set_iteration_per_loop: iterations_per_loop: must be an integer >= 1"):
        util.set_iteration_per_loop(None, "train_op", 0)
    with pytest.raises(ValueError, match="npu_plugin.set_device_sat_mode: mode: must be 0 or 1"):
        npu_plugin.set_device_sat_mode(2)
    assert npu.npu_hooks_append() == [] and npu.npu_hooks_append([1]) == [1]
    with pytest.raises(TypeError, match="npu_hooks_append: hooks_list"):
        npu.npu_hooks_append("hook")


def test_tf_29_the_adapter_names_are_opt_in_and_one_package():
    code = ("import importlib.util, sys; print(importlib.util.find_spec('npu_bridge'), "
            "importlib.util.find_spec('tf_adapter'), importlib.util.find_spec('npu_device')); "
            "import mxrec_ref.compat.enable_mx_rec; import npu_bridge, tf_adapter, npu_device; "
            "from npu_bridge.estimator import npu_ops as a; from tf_adapter import npu_ops as b; "
            "print(npu_bridge is tf_adapter, a is b)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="3"))
    assert result.stdout.split() == ["None", "None", "None", "True", "True"], result.stderr[-2000:]


# An mxRec Estimator script as the model zoo writes them: TF 1.15 names, `from npu_bridge.npu_init import *`,
# NPUEstimator + NPURunConfig with NPU options, an NpuOptimizer session config, npu_ops.dropout, loss scaling
# around NPUDistributedOptimizer, train_and_evaluate, and predict in a new process.
ESTIMATOR_SCRIPT = r'''"""An mxRec Estimator script written TF 1.15-style on the NPU adapter (tests/test_npu_adapter.py)."""
import sys

import numpy as np
import tensorflow as tf
from npu_bridge.npu_init import *

from mx_rec.core.embedding import create_table, sparse_lookup
from mx_rec.optimizers.lazy_adam import create_hash_optimizer
from mx_rec.util.initialize import init
from mx_rec.util.variable import get_dense_and_sparse_variable

phase, model_dir = sys.argv[1], sys.argv[2]
init(use_dynamic=True)


def input_fn(epochs=1):
    rng = np.random.default_rng(0)
    ids = (rng.zipf(1.4, size=(256, 2)) % 60).astype(np.int64)
    label = (ids[:, 0] % 3 == 0).astype(np.float32)
    return tf.data.Dataset.from_tensor_slices(({"ids": ids}, label)).repeat(epochs).batch(32)


def model_fn(features, labels, mode, params):
    table = create_table(tf.int64, 4, "user_table", tf.truncated_normal_initializer(stddev=0.1, seed=1),
                         device_vocabulary_size=500)
    emb = sparse_lookup(table, features["ids"], modify_graph=True, is_train=mode == tf.estimator.ModeKeys.TRAIN)
    with tf.variable_scope("mlp"):
        hidden = npu_ops.dropout(tf.reshape(emb, [-1, 8]), keep_prob=params["keep_prob"] if mode == "train" else 1.0)
        logit = tf.reshape(tf.layers.dense(hidden, 1, name="out"), [-1])
    if mode == tf.estimator.ModeKeys.PREDICT:
        return tf.estimator.EstimatorSpec(mode, predictions={"p": tf.sigmoid(logit)})
    loss = tf.losses.sigmoid_cross_entropy(labels, logit)
    if mode == tf.estimator.ModeKeys.EVAL:
        auc = tf.metrics.auc(labels, tf.sigmoid(logit))
        return tf.estimator.EstimatorSpec(mode, loss=loss, eval_metric_ops={"auc": auc})
    dense_optimizer = NPULossScaleOptimizer(NPUDistributedOptimizer(tf.train.AdamOptimizer(0.01)),
                                            ExponentialUpdateLossScaleManager(2 ** 10, incr_every_n_steps=5))
    dense_vars, sparse_vars = get_dense_and_sparse_variable()
    train_op = tf.group(
        dense_optimizer.minimize(loss, var_list=dense_vars, global_step=tf.train.get_global_step()),
        create_hash_optimizer(learning_rate=0.05).apply_gradients(zip(tf.gradients(loss, sparse_vars), sparse_vars)))
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)


session_config = tf.ConfigProto(allow_soft_placement=True)
custom_op = session_config.graph_options.rewrite_options.custom_optimizers.add()
custom_op.name = "NpuOptimizer"
custom_op.parameter_map["precision_mode"].s = tf.compat.as_bytes("allow_mix_precision")
config = NPURunConfig(model_dir=model_dir, save_checkpoints_steps=10, iterations_per_loop=5,
                      session_config=session_config,
                      enable_data_pre_proc=True, hcom_parallel=True, dump_config=DumpConfig(enable_dump=False))
estimator = NPUEstimator(model_fn=model_fn, config=config, params={"keep_prob": 0.9})
if phase == "train":
    tf.estimator.train_and_evaluate(estimator,
                                    tf.estimator.TrainSpec(lambda: input_fn(3), max_steps=24, hooks=npu_hooks_append()),
                                    tf.estimator.EvalSpec(input_fn, steps=None))
    print("EVAL", estimator.evaluate(input_fn)["auc"] > 0.5)
scores = [p["p"] for p in estimator.predict(input_fn)]
print("PREDICT", len(scores), repr(float(np.sum(scores))))
'''


def test_tf_29_an_npu_estimator_script_trains_evaluates_and_predicts_in_a_new_process(mxrec_ref_command, tmp_path):
    """TF-29 with TF-26..28: run as written (TF1 mode detected); the new process's predictions are
    those of the training process, restored from model_dir (dense and sparse)."""
    script = tmp_path / "npu_estimator.py"
    script.write_text(ESTIMATOR_SCRIPT)
    outputs = {}
    for phase in ("train", "predict"):
        result = mxrec_ref_command(["run", script, phase, str(tmp_path / "model")], timeout=300, cwd=str(tmp_path),
                                   env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
        assert result.returncode == 0, result.stderr[-3000:]
        outputs[phase] = result.stdout.splitlines()
        assert "NpuOptimizer parameter_map['precision_mode']" in result.stderr
    assert "EVAL True" in outputs["train"]
    predictions = [line for line in outputs["train"] if line.startswith("PREDICT 256 ")]
    assert predictions and predictions == [line for line in outputs["predict"] if line.startswith("PREDICT")]
    assert any(name.startswith("model.ckpt-24") for name in os.listdir(tmp_path / "model"))


# ------------------------------------------------------------------ the audit section
CALLS = {
    "npu_bridge.npu_init": "import npu_bridge.npu_init as m; ns = {}; exec('from npu_bridge.npu_init import *', ns); "
                           "assert {'npu_ops', 'npu_hooks_append', 'RewriterConfig', 'util'} <= set(ns)",
    "npu_device.compat.v1.npu_init": "ns = {}; exec('from npu_device.compat.v1.npu_init import *', ns); "
                                     "assert ns['npu_ops'].dropout is npu_ops.dropout",
    "NPUEstimator": "from tf_adapter import NPUEstimator, NPURunConfig; import mxrec_ref.tf.estimator as E; "
                    "e = NPUEstimator(model_fn=lambda features, labels, mode: None, config=NPURunConfig(), "
                    "job_start_file='x'); assert isinstance(e, E.Estimator); "
                    "raises(ValueError, NPUEstimator, model_fn=lambda features, labels, mode: None, "
                    "config=E.RunConfig())",
    "NPURunConfig": "from npu_bridge.estimator.npu.npu_config import NPURunConfig; import mxrec_ref.tf.estimator as E; "
                    "c = NPURunConfig(iterations_per_loop=4, model_dir='m', keep_checkpoint_max=3); "
                    "assert isinstance(c, E.RunConfig) and c.iterations_per_loop == 4 and c.keep_checkpoint_max == 3; "
                    "assert c.save_checkpoints_steps == 100 and c.save_summary_steps == 0; "
                    "raises(ValueError, NPURunConfig, iterations_per_loop=0)",
    "NPURunConfig(<NPU options>)": "from tf_adapter import NPURunConfig; c = NPURunConfig(precision_mode="
                                   "'allow_mix_precision', enable_data_pre_proc=False, hcom_parallel=True, "
                                   "session_device_id=0); assert c._precision_mode == 'allow_mix_precision'; "
                                   "assert logged('precision_mode') and logged('hcom_parallel'); "
                                   "raises(TypeError, NPURunConfig, no_such_option=1)",
    "DumpConfig / ProfilingConfig": "from tf_adapter import DumpConfig, ProfilingConfig, NPURunConfig; "
                                    "NPURunConfig(dump_config=DumpConfig(enable_dump=True, dump_path='d'), "
                                    "profiling_config=ProfilingConfig(True)); assert logged('dump_config')",
    "npu_run_config_init": "from npu_bridge.npu_init import npu_run_config_init, NPURunConfig; "
                           "c = npu_run_config_init(NPURunConfig()); assert [o.name for o in c.session_config."
                           "graph_options.rewrite_options.custom_optimizers] == ['NpuOptimizer']",
    "tf_adapter": "import tf_adapter, npu_bridge; assert tf_adapter is npu_bridge",
    "npu_ops.dropout": "y = npu_ops.dropout(tf.ones([100]), keep_prob=0.5, seed=1); "
                       "v = run(y); assert set(v.tolist()) <= {0.0, 2.0}",
    "npu_ops.initialize_system / shutdown_system": "run(npu_ops.initialize_system()); run(npu_ops.shutdown_system())",
    "util.set_iteration_per_loop": "from npu_bridge.estimator.npu import util; "
                                   "assert util.set_iteration_per_loop(None, 'op', 3) == 'op'; "
                                   "assert logged('iterations_per_loop=3')",
    "util.create_iteration_per_loop_var / load_iteration_per_loop_var":
        "from npu_bridge.estimator.npu import util; op = util.create_iteration_per_loop_var('op'); "
        "util.load_iteration_per_loop_var(None, op, 1); assert op == 'op'",
    "npu_plugin.set_device_sat_mode": "from npu_bridge.estimator.npu import npu_plugin; "
                                      "npu_plugin.set_device_sat_mode(0); assert logged('set_device_sat_mode(0)')",
    "npu_hooks_append": "from npu_bridge import npu_hooks_append; assert npu_hooks_append([]) == []",
    "NPUBroadcastGlobalVariablesHook": "from npu_bridge.estimator.npu.npu_hook import NPUBroadcastGlobalVariablesHook; "
                                       "assert isinstance(NPUBroadcastGlobalVariablesHook(0, 0), "
                                       "tf.compat.v1.train.SessionRunHook)",
    "NPUDistributedOptimizer": "from npu_bridge.estimator.npu.npu_optimizer import NPUDistributedOptimizer; "
                               "opt = NPUDistributedOptimizer(tf.compat.v1.train.AdamOptimizer(0.1)); "
                               "assert isinstance(opt, tf.compat.v1.train.Optimizer)",
    "npu_distributed_optimizer_wrapper": "from npu_bridge import npu_distributed_optimizer_wrapper as w; "
                                         "o = tf.compat.v1.train.AdamOptimizer(0.1); assert w(o) is o",
    "NPULossScaleOptimizer": "from npu_bridge.estimator.npu.npu_loss_scale_optimizer import NPULossScaleOptimizer; "
                             "from npu_bridge.estimator.npu.npu_loss_scale_manager import FixedLossScaleManager; "
                             "v = tf.compat.v1.get_variable('ls', initializer=1.0); "
                             "op = NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.5), "
                             "FixedLossScaleManager(8)).minimize(v * v); s = sess(); s.run(op); assert s.run(v) == 0.0",
    "FixedLossScaleManager": "from npu_bridge.estimator.npu.npu_loss_scale_manager import FixedLossScaleManager; "
                             "assert run(FixedLossScaleManager(16).get_loss_scale()) == 16.0",
    "ExponentialUpdateLossScaleManager":
        "from npu_bridge.estimator.npu.npu_loss_scale_manager import ExponentialUpdateLossScaleManager as E; "
        "m = E(4, 1); s = sess(); s.run(m.update_loss_scale(tf.constant(True))); "
        "assert s.run(m.get_loss_scale()) == 8.0",
    "npu_config_proto / npu_session_config_init": "from tf_adapter import npu_config_proto, "
                                                  "npu_session_config_init; run(tf.constant(1), npu_config_proto()); "
                                                  "run(tf.constant(1), npu_session_config_init())",
    "NpuOptimizer session-config knobs": "c = tf.compat.v1.ConfigProto(); o = c.graph_options.rewrite_options."
                                         "custom_optimizers.add(); o.name = 'NpuOptimizer'; "
                                         "o.parameter_map['hcom_parallel'].b = True; assert run(tf.constant(2), c) == 2",
    "RewriterConfig": "from npu_bridge import RewriterConfig; assert RewriterConfig.OFF == 2",
    "npu_bridge.hccl.hccl_ops.allreduce / broadcast / allgather / reduce_scatter":
        "from npu_bridge.hccl import hccl_ops as h; x = tf.constant([1.0, 2.0]); "
        "assert run([h.allreduce(x, 'sum'), h.broadcast([x], 0)[0], h.allgather(x, 1), "
        "h.reduce_scatter(x, 'sum', 1)])[0].tolist() == [1.0, 2.0]",
    "npu_device.open().as_default()": "import npu_device; npu_device.open().as_default()",
    "npu_device.compat.enable_v1": "import npu_device; npu_device.compat.enable_v1(); "
                                   "assert not tf.executing_eagerly()",
}

RUNNER = """
import json, logging
import numpy as np
import tensorflow as tf
tf.compat.v1.disable_eager_execution()
from npu_bridge.estimator import npu_ops
records = []
logging.getLogger("mxrec_ref").setLevel(logging.INFO)
logging.getLogger("mxrec_ref").addHandler(type("H", (logging.Handler,), {"emit": lambda s, r: records.append(r)})())

def logged(text):
    return any(text in r.getMessage() for r in records)

def sess(config=None):
    session = tf.compat.v1.Session(config=config)
    session.run(tf.compat.v1.global_variables_initializer())
    return session

def raises(kind, fn, *a, **kw):
    try:
        fn(*a, **kw)
    except kind:
        return
    raise AssertionError(f"{fn} did not raise {kind.__name__}")

def run(fetch, config=None):
    with sess(config) as session:
        return session.run(fetch)

results = {}
for name, code in CALLS.items():
    try:
        with tf.Graph().as_default():
            exec(code, globals())
        results[name] = "ok"
    except Exception as error:  # noqa: BLE001
        results[name] = f"{type(error).__name__}: {error}"
print("AUDIT " + json.dumps(results))
"""


def _audit_rows():
    text = SPEC.read_text()
    section = text[text.index("## Audit of the NPU adapter's names"):].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        match = re.match(r"^\| `(.+?)`(?: [\w-]+)* \| (\w+) \|", line)
        if match:
            rows[line.split(" | ")[0][2:].replace("`", "")] = match.group(2)
    return rows


def test_tf_29_the_npu_audit_has_no_missing_row():
    rows = _audit_rows()
    assert set(rows.values()) <= {"implemented", "accepted", "rejected"}, set(rows.values())
    assert set(rows) == set(CALLS), (sorted(set(rows) - set(CALLS)), sorted(set(CALLS) - set(rows)))


def test_tf_29_every_npu_name_imports_and_runs_under_mxrec_ref_run(mxrec_ref_command, tmp_path):
    script = tmp_path / "npu_audit.py"
    script.write_text(f"CALLS = {CALLS!r}\n" + textwrap.dedent(RUNNER))
    result = mxrec_ref_command(["run", "--no-tf1", script], env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
                               timeout=300, cwd=str(tmp_path))
    lines = [line for line in result.stdout.splitlines() if line.startswith("AUDIT ")]
    assert lines, result.stderr[-3000:]
    failures = {name: outcome for name, outcome in json.loads(lines[-1][6:]).items() if outcome != "ok"}
    assert failures == {}
