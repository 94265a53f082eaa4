"""What an upstream mxRec script hits (issue 13): the failures it found, each as a
regression test (spec/tf.md TF-12..TF-15, GRAPH-4)."""
import json
import logging
import os
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tensorflow as tf

import mxrec_ref.tf as mx

import tf_model


@pytest.fixture(autouse=True)
def _clean():
    yield
    tf_model.fresh_graph()


def _run_script(tmp_path, source, *args, env=None, timeout=120, tf_logs=False, command=None):
    """`mxrec-ref run SCRIPT ARGS` in ``tmp_path``: through ``command`` (the mxrec_ref_command
    fixture: forked from a process that imported TensorFlow) or, without it, a fresh process."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source))
    environment = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    environment.update({} if tf_logs else {"TF_CPP_MIN_LOG_LEVEL": "3"}, **(env or {}))
    if command is not None:
        return command(["run", script, *args], timeout=timeout, cwd=tmp_path, env=environment)
    return subprocess.run([sys.executable, "-m", "mxrec_ref", "run", str(script), *args], capture_output=True,
                          text=True, timeout=timeout, cwd=str(tmp_path), env=environment)


# ------------------------------------------------------------ item 1: names
def test_tf_16_by_address_modules_and_upstream_names(mxrec_ref_command, tmp_path):
    """The three names whose absence stopped the upstream script at import."""
    result = _run_script(tmp_path, command=mxrec_ref_command, source="""
        import tensorflow as tf
        from mx_rec.optimizers.lazy_adam_by_addr import create_hash_optimizer_by_address as lazy_adam_by_address
        from mx_rec.optimizers.adagrad_by_addr import create_hash_optimizer_by_address as adagrad_by_address
        from mx_rec.optimizers.gradient_descent_by_addr import create_hash_optimizer_by_addr
        from mx_rec.constants.constants import BaseEnum
        from mx_rec.util.initialize import ConfigInitializer, init, terminate_config_initializer

        class Mode(BaseEnum):
            TRAIN = "train"
            EVAL = "eval"

        assert Mode.mapping("eval") is Mode.EVAL
        try:
            Mode.mapping("predict")
            raise AssertionError("mapping accepted an unknown value")
        except KeyError:
            pass
        init(use_dynamic=True)
        params = ConfigInitializer.get_instance().train_params_config
        channels = params.get_training_mode_channel_id(True), params.get_training_mode_channel_id(False)
        try:
            lazy_adam_by_address(learning_rate=0.01)
            raise AssertionError("LazyAdamByAddress accepted a table without dynamic expansion")
        except ValueError as error:
            assert "dynamic-expansion tables only" in str(error)
        adagrad = adagrad_by_address(learning_rate=0.01)
        sgd = create_hash_optimizer_by_addr(0.1)
        terminate_config_initializer()
        init(use_dynamic_expansion=True)
        lazy = lazy_adam_by_address()
        print(channels, lazy.name.rsplit("_", 1)[0], lazy.store_optimizer.kind, lazy.store_optimizer.slot_names,
              adagrad.name.rsplit("_", 1)[0], adagrad.store_optimizer.slot_names,
              sgd.name.rsplit("_", 1)[0], sgd.store_optimizer.weight_decay)
    """)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["(0,", "1)", "LazyAdamByAddress", "LazyAdam", "('momentum',", "'velocity')",
                                     "Adagrad", "('accumulator',)", "GradientDescentByAddr", "0.0001"]


# ------------------------------------------------ item 3 / deliver 5: no hang
FAILING_SCRIPT = """
    import sys
    import numpy as np
    import tensorflow as tf
    tf.compat.v1.disable_eager_execution()
    from mx_rec.core.asc.feature_spec import FeatureSpec
    from mx_rec.core.asc.helper import get_asc_insert_func
    from mx_rec.core.embedding import create_table, sparse_lookup
    from mx_rec.graph import modify_graph_and_start_emb_cache
    from mx_rec.optimizers.lazy_adam import create_hash_optimizer
    from mx_rec.util.initialize import init
    from mx_rec.util.variable import get_dense_and_sparse_variable

    mode, shape, failure = sys.argv[1:4]
    init(use_dynamic=shape == "dynamic")
    if failure == "disk":          # a tiny SSD folder limit: the first demotion to disk fails
        import mxrec_ref.tf.table as table_module
        opened = table_module.open_store
        table_module.open_store = lambda c, o, **options: opened(c, o, **options, ssd_folder_limit_bytes=64)
    sizes = {"capacity": dict(device_vocabulary_size=300, host_vocabulary_size=1000),
             "gradient": dict(device_vocabulary_size=100000),
             "disk": dict(device_vocabulary_size=2100, host_vocabulary_size=2100, ssd_vocabulary_size=100000,
                          ssd_data_path=["ssd"])}[failure]

    def batches():                 # a Python generator behind a prefetch, as upstream demos feed data
        rng = np.random.default_rng(0)
        while True:
            ids = [int(v) for v in rng.integers(0, 100000, size=512 * 4)]
            scale = np.full(512, np.nan if failure == "gradient" else 1.0, np.float32)
            yield {"ids": np.array(ids, np.int64).reshape(512, 4), "scale": scale}

    ds = tf.data.Dataset.from_generator(batches, output_signature={
        "ids": tf.TensorSpec([512, 4], tf.int64), "scale": tf.TensorSpec([512], tf.float32)})
    table = create_table(tf.int64, 8, "item_table", tf.compat.v1.truncated_normal_initializer(stddev=0.1), **sizes)
    optimizer = create_hash_optimizer(learning_rate=0.01)
    spec = FeatureSpec("ids", table_name="item_table")
    if mode == "feature_spec":
        ds = ds.map(get_asc_insert_func(tgt_key_specs=[spec]))
    batch = tf.compat.v1.data.make_one_shot_iterator(ds.prefetch(16)).get_next()
    send_count = None if shape == "dynamic" else 2048
    if mode == "feature_spec":
        emb = sparse_lookup(table, spec, batch=batch, send_count=send_count)
    else:
        emb = sparse_lookup(table, batch["ids"], send_count=send_count, modify_graph=True)
    loss = tf.reduce_mean(tf.reduce_sum(emb, axis=[1, 2]) * batch["scale"])
    dense, sparse = get_dense_and_sparse_variable()
    train = optimizer.apply_gradients(zip(tf.gradients(loss, sparse), sparse))
    if mode == "modify_graph":
        modify_graph_and_start_emb_cache()
    if len(sys.argv) > 4:          # a thread that never ends: interpreter shutdown would wait for it forever
        import threading
        threading.Thread(target=threading.Event().wait, name="stuck").start()
    session = tf.compat.v1.Session()           # never closed by the script, as in upstream demos
    for _ in range(100):
        session.run([loss, train])
    print("NOT REACHED")
"""

FAILURES = [("feature_spec", "dynamic", "capacity"), ("feature_spec", "static", "capacity"),
            ("modify_graph", "dynamic", "capacity"), ("modify_graph", "static", "capacity"),
            ("feature_spec", "dynamic", "gradient"), ("modify_graph", "static", "gradient"),
            ("modify_graph", "dynamic", "disk"), ("feature_spec", "static", "disk")]
MESSAGES = {"capacity": "CapacityError: table 'item_table': device_vocabulary_size:",
            "gradient": "GradientError: table 'item_table':",
            "disk": "DiskFullError: [Errno 28] table 'item_table': disk full"}


@pytest.fixture(scope="module")
def failing_runs(mxrec_ref_command, tmp_path_factory):
    """Every failing script of FAILURES, two processes at a time (CI has two cores)."""
    def run(combo):
        # as a user runs it: TensorFlow's own logs on.  The shutdown watchdog's grace is raised: on a loaded
        # machine (CI runs two test processes on two cores) shutdown can pass the default 10 s and the watchdog
        # would turn status 2 into its own status 1; the watchdog has its own test below.
        return combo, _run_script(tmp_path_factory.mktemp("fail"), FAILING_SCRIPT, *combo, timeout=120,
                                  tf_logs=True, env={"MXREC_REF_SHUTDOWN_GRACE_S": "60"},
                                  command=mxrec_ref_command)

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(run, FAILURES))


@pytest.mark.parametrize("mode,shape,failure", FAILURES)
def test_tf_13_a_failing_store_call_ends_the_script_with_one_line(failing_runs, mode, shape, failure):
    """TF-13: a store error inside Session.run, with a prefetching generator pipeline
    still running, ends the process (non-zero; the subprocess timeout is the hang
    guard, not a measurement) with the store's message as the last, single line."""
    result = failing_runs[(mode, shape, failure)]
    assert result.returncode != 0
    assert "NOT REACHED" not in result.stdout
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 2                      # a user error (CLI-2 of `mxrec-ref`)
    assert last.startswith("mxrec-ref run: " + MESSAGES[failure]), result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]


def test_tf_13_a_stuck_shutdown_still_ends(tmp_path):
    """Whatever else keeps the interpreter from finishing (here a thread that never
    ends), the watchdog armed by the error ends the process with status 1 (a fresh
    process: the one real `mxrec-ref run` of this file)."""
    result = _run_script(tmp_path, FAILING_SCRIPT, "modify_graph", "dynamic", "capacity", "stuck", timeout=120,
                         env={"MXREC_REF_SHUTDOWN_GRACE_S": "2"})
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith("mxrec-ref run: " + MESSAGES["capacity"])


def test_tf_13_verbose_shows_the_chain(mxrec_ref_command, tmp_path):
    result = _run_script(tmp_path, FAILING_SCRIPT, "feature_spec", "dynamic", "capacity",
                         env={"MXREC_REF_VERBOSE": "1"}, command=mxrec_ref_command)
    assert result.returncode != 0
    assert "Traceback" in result.stderr and "CapacityError" in result.stderr


def test_tf_13_plain_python_ends_too(tmp_path):
    """The same through ``python script.py`` with the alias enabled by import:
    init() installs the exception hook."""
    script = tmp_path / "plain.py"
    script.write_text("import mxrec_ref.compat.enable_mx_rec\n" + textwrap.dedent(FAILING_SCRIPT))
    result = subprocess.run([sys.executable, str(script), "modify_graph", "dynamic", "capacity"], capture_output=True,
                            text=True, timeout=120, cwd=str(tmp_path), env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1].startswith("mxrec-ref: error: " + MESSAGES["capacity"])


# --------------------------------------------------------- item 4: timestamps
def test_tf_12_return_timestamp_is_a_scalar_of_the_pipeline(tmp_path):
    """mxRec's ReturnTimestamp ignores its input and returns the current time in
    whole seconds as a scalar (it was passed through unchanged)."""
    from mxrec_ref.tf.host_ops import import_host_pipeline_ops

    ops = import_host_pipeline_ops()
    ds = tf.data.Dataset.from_tensor_slices({"label": np.zeros(8, np.float32)}).batch(4)
    ds = ds.map(lambda b: {**b, "timestamp": ops.return_timestamp(tf.cast(b["label"], tf.int64))})
    before = int(time.time())
    stamps = [int(b["timestamp"]) for b in ds]
    after = int(time.time())
    assert ds.element_spec["timestamp"].shape.rank == 0
    assert all(before <= s <= after for s in stamps)


def _timestamp_graph(backend, mode, stamp_of):
    """Train and evaluate with admission and eviction on a batch timestamp;
    ``stamp_of(batch)`` builds the timestamp (graph-modification mode puts it in
    ASCEND_TIMESTAMP for both modes, as upstream scripts do)."""
    mx.init(backend=backend)
    table = mx.create_table(tf.int64, 4, "item", tf.compat.v1.truncated_normal_initializer(stddev=0.1, seed=1),
                            device_vocabulary_size=500)
    optimizer = mx.optimizers.lazy_adam.create_hash_optimizer(learning_rate=0.05)
    admit = {"access_threshold": 2, "eviction_threshold": 5}
    spec = mx.FeatureSpec("item", table_name="item", **admit)
    stamp_spec = mx.FeatureSpec("timestamp", is_timestamp=True)

    def dataset(seed, repeat):
        data = tf_model.features(seed)
        ds = tf.data.Dataset.from_tensor_slices({"item": data["item"], "label": data["label"]}).batch(32)
        ds = ds.map(lambda b: {**b, "timestamp": stamp_of(b)})
        if mode == "feature_spec":
            ds = ds.map(mx.get_asc_insert_func(tgt_key_specs=[spec, stamp_spec], is_training=repeat))
        return ds.repeat() if repeat else ds

    batch = tf.compat.v1.data.make_one_shot_iterator(dataset(0, True)).get_next()
    eval_iterator = tf.compat.v1.data.make_initializable_iterator(dataset(1, False))
    eval_batch = eval_iterator.get_next()

    def lookup(b, is_train):
        if mode == "feature_spec":
            return mx.sparse_lookup(table, spec, batch=b, is_train=is_train)
        tf.compat.v1.add_to_collection(mx.constants.ASCEND_TIMESTAMP, b["timestamp"])
        return mx.sparse_lookup(table, b["item"], is_train=is_train, modify_graph=True, access_and_evict_config=admit)

    loss = tf.reduce_mean(tf.reduce_sum(lookup(batch, True), axis=[1, 2]) * batch["label"])
    _, sparse = mx.get_dense_and_sparse_variable()
    train = optimizer.apply_gradients(zip(tf.gradients(loss, sparse), sparse))
    if mode == "modify_graph":        # the training rewrite first, as the failing script did
        mx.modify_graph_and_start_emb_cache()
    evaluation = tf.reduce_sum(lookup(eval_batch, False))
    eval_init = eval_iterator.initializer
    if mode == "modify_graph":
        mx.modify_graph_and_start_emb_cache()
        eval_init = mx.ConfigInitializer.get_instance().train_params_config.get_initializer(False)
    return table, train, evaluation, eval_init


@pytest.mark.parametrize("mode", ["feature_spec", "modify_graph"])
def test_tf_12_timestamp_admission_eviction_and_evaluation(backend, mode):
    """With a scalar batch timestamp: training admits and evicts by data time, and
    evaluation (built after the training rewrite) reads its own batch's timestamp,
    not the replaced training iterator (it failed with 'iterator has not been
    initialized')."""
    from mxrec_ref.tf.host_ops import return_timestamp

    tf_model.fresh_graph()
    with tf.Graph().as_default():
        table, train, evaluation, eval_init = _timestamp_graph(backend, mode, lambda b: return_timestamp(b["label"]))
        with tf.compat.v1.Session() as session:
            for _ in range(6):
                session.run(train)
            clock = table.store.export().clock
            session.run(eval_init)
            total = 0.0
            while True:
                try:
                    total += session.run(evaluation)
                except tf.errors.OutOfRangeError:
                    break
    state = table.store.export()
    assert state.clock_source == "timestamp" and abs(clock - time.time()) < 3600
    assert len(state.keys) > 0 and np.isfinite(total)


@pytest.mark.parametrize("mode", ["feature_spec", "modify_graph"])
def test_tf_12_a_per_example_timestamp_is_rejected_before_training(backend, mode):
    """A per-example timestamp vector is rejected when the graph is built, naming
    the scalar it must be (graph modification failed inside the step)."""
    tf_model.fresh_graph()
    with tf.Graph().as_default():
        with pytest.raises(ValueError, match=r"timestamp.*scalar \(rank 0\)"):
            _timestamp_graph(backend, mode, lambda b: tf.cast(b["label"], tf.int64))


# ------------------------------------------------ item 5: clock after restore
def _no_global_step_graph(backend, folder, steps, restore):
    tf_model.fresh_graph()
    with tf.Graph().as_default():
        mx.init(backend=backend)
        table = mx.create_table(tf.int64, 4, "item", tf.compat.v1.truncated_normal_initializer(stddev=0.1, seed=1),
                                device_vocabulary_size=500)
        optimizer = mx.optimizers.lazy_adam.create_hash_optimizer(learning_rate=0.05)
        data = tf_model.features(0)
        ds = tf.data.Dataset.from_tensor_slices({"item": data["item"]}).batch(32).repeat()
        batch = tf.compat.v1.data.make_one_shot_iterator(ds).get_next()
        w = tf.compat.v1.get_variable("w", [], initializer=tf.compat.v1.ones_initializer())
        loss = tf.reduce_sum(mx.sparse_lookup(table, batch["item"], modify_graph=True)) * w
        _, sparse = mx.get_dense_and_sparse_variable()
        train = optimizer.apply_gradients(zip(tf.gradients(loss, sparse), sparse))
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as session:
            session.run(w.initializer)
            if restore:
                saver.restore(session, tf.train.latest_checkpoint(folder))
            for _ in range(steps):
                session.run(train)
            saver.save(session, os.path.join(folder, "model"), global_step=steps + (restore or 0))
        clock = table.store.export().clock
        mx.terminate_config_initializer()
    return clock


def test_tf_14_load_and_train_continues_the_step_clock(backend, tmp_path):
    """Without a global step, a table's steps after a restore continue from its
    checkpoint (they restarted at 0: clock 4 instead of 9 below)."""
    assert _no_global_step_graph(backend, str(tmp_path), 5, restore=0) == 4
    assert _no_global_step_graph(backend, str(tmp_path), 5, restore=5) == 9
    meta = json.load(open(tmp_path / "sparse-model-10" / "item" / "meta.json"))
    assert meta["clock"] == 9


# ---------------------------------------------- item 6: no silent switches
def test_tf_15_ignored_switches_are_logged_once(caplog, monkeypatch):
    """USE_COMBINE_FAAE (pooled admission in mxRec) and is_dp say once that they
    change nothing here, and why."""
    from mxrec_ref.tf import config_initializer

    monkeypatch.setattr(config_initializer, "_LOGGED", set(), raising=False)
    monkeypatch.setenv("USE_COMBINE_FAAE", "1")
    tf_model.fresh_graph()
    with caplog.at_level(logging.INFO, logger="mxrec_ref"), tf.Graph().as_default():
        mx.init(bind_cpu=False)
        for name in ("a", "b"):
            mx.create_table(tf.int64, 4, name, tf.compat.v1.zeros_initializer(), device_vocabulary_size=10,
                            is_dp=True)
        mx.terminate_config_initializer()
        mx.init()
    messages = [r.getMessage() for r in caplog.records]
    faae = [m for m in messages if "USE_COMBINE_FAAE" in m]
    dp = [m for m in messages if "is_dp" in m]
    assert len(faae) == 1 and "one history per table" in faae[0]
    assert len(dp) == 1 and "accepted" in dp[0]
    assert len([m for m in messages if "bind_cpu" in m]) == 1
    assert any(r.levelno == logging.WARNING for r in caplog.records if "USE_COMBINE_FAAE" in r.getMessage())
