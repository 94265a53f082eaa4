"""`mxrec-ref run`'s TF1 mode (TF-26..TF-28): a script written against TensorFlow 1.15 runs unchanged."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mxrec_ref.compat import tf1

REPO = Path(__file__).resolve().parent.parent
TWO_TABLES = REPO / "examples" / "mxrec_two_tables.py"

# A model-zoo-shaped script: TF 1.15 names at `tf.`, the model in a module beside it and one in a subfolder.
SCRIPT = '''
import importlib
import sys

import numpy as np
import tensorflow as tf
from tensorflow import layers as imported_layers

import model_lib
from sub import deeper

real = importlib.import_module("tensorflow")        # not an import statement: the real module (TF-27)
assert tf is not real and tf.__name__ == "tensorflow.compat.v1", tf.__name__
assert model_lib.tf is tf and deeper.tf is tf
assert imported_layers.dense is tf.layers.dense
assert not tf.executing_eagerly() and not real.executing_eagerly()
import outside
assert outside.tf is real and hasattr(outside.tf, "function") and not hasattr(outside.tf, "Session")
import mxrec_ref.tf.table as project_module        # the project's own imports: the real TensorFlow
assert project_module.tf is real, project_module.tf

ds = tf.data.Dataset.from_tensor_slices((np.linspace(0, 1, 64, dtype=np.float32).reshape(16, 4),
                                         np.ones((16, 1), np.float32))).batch(8)
it = ds.make_initializable_iterator()
x, y = it.get_next()
assert x.shape[1].value == 4                          # TF 1.15's Dimension (v2 shapes off)
assert tf.estimator.ModeKeys.TRAIN == "train"         # the Estimator package, installed by mxrec-ref run
with tf.variable_scope("net"):
    out = model_lib.mlp(x)
loss = tf.losses.mean_squared_error(y, out)
train = tf.train.AdamOptimizer(0.05).minimize(loss, global_step=tf.train.get_or_create_global_step())
kernel = [v for v in tf.global_variables() if v.name == "net/mlp/h/kernel:0"][0]
print("KERNEL_DTYPE", kernel.dtype)
print("LAYER", type(model_lib.LAYERS[0]).__module__)
config = tf.ConfigProto(allow_soft_placement=True)
with tf.Session(config=config) as sess:
    sess.run(tf.global_variables_initializer())
    losses = []
    for _ in range(5):
        sess.run(it.initializer)
        while True:
            try:
                losses.append(sess.run([loss, train])[0])
            except tf.errors.OutOfRangeError:
                break
print("LOSSES", losses[0], losses[-1], len(losses))
'''
MODEL_LIB = '''
import tensorflow as tf

LAYERS = []


def mlp(x):
    with tf.variable_scope("mlp"):
        layer = tf.layers.Dense(8, activation=tf.nn.relu, name="h")
        LAYERS.append(layer)
        return tf.layers.dense(layer(x), 1, name="out")
'''


@pytest.fixture
def tf1_script(tmp_path):
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "sub").mkdir()
    (tmp_path / "lib").mkdir()
    (tmp_path / "app" / "train.py").write_text(SCRIPT)
    (tmp_path / "app" / "model_lib.py").write_text(MODEL_LIB)
    (tmp_path / "app" / "sub" / "__init__.py").write_text("")
    (tmp_path / "app" / "sub" / "deeper.py").write_text("import tensorflow as tf\n")
    (tmp_path / "lib" / "outside.py").write_text("import tensorflow as tf\n")
    return tmp_path


def _run(args, tmp_path, **extra_env):
    """A fresh process: TF_USE_LEGACY_KERAS has to be set before TensorFlow's first import."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=os.pathsep.join([str(REPO), str(tmp_path / "lib")]),
               **extra_env)
    env.pop(tf1.LEGACY_KERAS, None)
    return subprocess.run([sys.executable, "-m", "mxrec_ref", "run", *args], capture_output=True, text=True,
                          timeout=300, cwd="/", env=env)


def test_tf_26_detects_tf_1_15_names_written_at_tf():
    for source in ("sess = tf.Session()", "x = tf.placeholder(tf.float32)", "with tf.variable_scope('a'):",
                   "y = tf.layers.dense(x, 4)", "opt = tf.train.AdamOptimizer(0.1)", "c = tf.ConfigProto()",
                   "tf.logging.set_verbosity(tf.logging.INFO)", "tf.get_variable('w', [1])"):
        assert tf1.detect(source), source
    for source in ("sess = tf.compat.v1.Session()", "tf.compat.v1.layers.dense(x, 4)", "opt = tf.keras.optimizers.Adam()",
                   "with tf.name_scope('a'):", "tf.data.Dataset.range(3)", "v1.Session()", "my_tf.Session()",
                   "tf.train.Checkpoint()", "tf.SessionX = 1"):
        assert not tf1.detect(source), source


def test_tf_26_the_flag_overrides_detection(tmp_path):
    plain = tmp_path / "plain.py"
    plain.write_text("import tensorflow as tf\nprint(tf.__name__)\n")
    assert not tf1.wanted(None, str(plain)) and tf1.wanted(True, str(plain))
    assert tf1.wanted(None, str(tmp_path / "no-such.py")) is False
    old = tmp_path / "old.py"
    old.write_text("import tensorflow as tf\ns = tf.Session()\n")
    assert tf1.wanted(None, str(old)) and not tf1.wanted(False, str(old))


def test_tf_27_a_tf_1_15_script_runs_unchanged_detected_or_forced(tf1_script):
    """TF-26 / TF-27: detected from the script's source and with --tf1 alike: tf.compat.v1 at `tf.` in the
    script and the modules of its folder, graph mode, reference variables, tf.layers from tf_keras;
    the project and modules elsewhere keep the real TensorFlow."""
    for args in ([], ["--tf1"]):
        result = _run([*args, str(tf1_script / "app" / "train.py")], tf1_script)
        assert result.returncode == 0, result.stderr[-3000:]
        lines = dict(line.split(" ", 1) for line in result.stdout.splitlines() if " " in line)
        assert lines["KERNEL_DTYPE"] == "<dtype: 'float32_ref'>"          # TF 1.15's reference variables
        assert lines["LAYER"].startswith("tf_keras."), lines["LAYER"]        # Keras 2, not a hand-written layer
        first, last, steps = lines["LOSSES"].split()
        assert int(steps) == 10 and float(last) < float(first)
        assert "is deprecated" not in result.stderr                        # tf.layers' deprecation notices


def test_tf_26_without_the_mode_the_script_stops_at_its_first_tf1_name(tf1_script):
    result = _run(["--no-tf1", str(tf1_script / "app" / "train.py")], tf1_script)
    assert result.returncode == 1
    assert "ImportError: cannot import name 'layers' from 'tensorflow'" in result.stderr


def test_tf_27_tf1_mode_is_one_process_only(tmp_path):
    """The import hook and legacy Keras are `mxrec-ref run`'s, not the package's: importing mxrec_ref
    changes neither."""
    code = ("import builtins, os; import mxrec_ref.cli; from mxrec_ref.compat import tf1; "
            "print(tf1.enabled(), os.environ.get('TF_USE_LEGACY_KERAS'))")
    env = {k: v for k, v in os.environ.items() if k != tf1.LEGACY_KERAS}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                            env=dict(env, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="3"))
    assert result.stdout.split() == ["False", "None"], result.stderr[-2000:]


def test_tf_28_the_upstream_shaped_example_trains_in_tf1_mode(tmp_path):
    """mxRec's TF layer with v2 behaviour off (reference variables, v1 control flow and shapes): the
    two-table example trains, saves, restores and evaluates in graph-modification mode and DDR."""
    result = _run(["--tf1", str(TWO_TABLES)], tmp_path, MXREC_EXAMPLE_MODE="modify_graph",
                  MXREC_EXAMPLE_STORAGE="ddr")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1].startswith("SUCCESS mode=modify_graph multi_lookup=1 storage=ddr")


def test_tf_26_verbose_says_why_the_mode_is_on(tmp_path):
    script = tmp_path / "old.py"
    script.write_text("import tensorflow as tf\nwith tf.Session() as s:\n    print('RESULT', s.run(tf.constant(3)))\n")
    result = _run(["--verbose", str(script)], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "RESULT 3" in result.stdout
    assert "TF1 mode: the script writes tf.Session, a TF 1.15 name (--no-tf1: off)" in result.stderr
    quiet = _run([str(script)], tmp_path)
    assert quiet.returncode == 0 and "TF1 mode" not in quiet.stderr


def test_tf_27_without_tf_keras_the_mode_says_how_to_install_it(tmp_path, monkeypatch, capsys):
    """tf-keras is installed without its `tensorflow` requirement on Linux x86-64 (pyproject.toml): where it is
    missing, `run --tf1` says in one line how to install it, before TensorFlow is imported."""
    import importlib.util

    from mxrec_ref import cli

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "tf_keras" else real_find_spec(name, *args))
    script = tmp_path / "s.py"
    script.write_text("print('ran')\n")
    assert cli.main(["run", "--tf1", str(script)]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        'mxrec-ref run: TF1 mode needs the tf_keras package (tf.layers are Keras 2\'s): '
        'pip install --no-deps "tf-keras>=2.20,<2.22"']
    assert tf1.missing_tf_keras() is not None
    monkeypatch.undo()
    assert tf1.missing_tf_keras() is None
