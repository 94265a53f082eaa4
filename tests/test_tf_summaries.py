"""Table statistics as TensorBoard scalars: the TF1 hook and the Keras callback
(spec/observability.md, OBS-3, OBS-4).  The event files are read back."""
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import mxrec_ref.tf as mx
from mxrec_ref import STAT_NAMES, TableConfig, open_store
from mxrec_ref.tf.callbacks import StatsLogger
from mxrec_ref.tf.hooks import StatsSummaryHook

import tf_model


def scalars(folder) -> dict[str, dict[int, float]]:
    """{tag: {step: value}} of every scalar in the folder's event files (v1 and v2 summaries)."""
    found: dict[str, dict[int, float]] = {}
    for path in sorted(Path(folder).glob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                number = value.simple_value if value.WhichOneof("value") == "simple_value" \
                    else float(tf.make_ndarray(value.tensor))
                assert event.step not in found.get(value.tag, {}), f"{value.tag} written twice at {event.step}"
                found.setdefault(value.tag, {})[event.step] = number
    return found


@pytest.fixture(autouse=True)
def _fresh_tables():
    yield
    tf_model.fresh_graph()


def test_obs_3_hook_writes_every_tables_stats_every_n_steps_and_at_the_end(backend, tmp_path):
    handles = tf_model.build(backend)
    hook = StatsSummaryHook(tmp_path, every_n_steps=2)
    with handles["graph"].as_default(), tf.compat.v1.train.MonitoredTrainingSession(hooks=[hook]) as session:
        for _ in range(5):
            session.run(handles["train"])
        sizes = {name: table.size() for name, table in handles["tables"].items()}
        stats = {name: table.store.stats() for name, table in handles["tables"].items()}
    written = scalars(tmp_path)
    assert set(written) == {f"mxrec/{t}/{s}" for t in ("item", "user") for s in STAT_NAMES}
    assert all(sorted(steps) == [2, 4, 5] for steps in written.values())   # every 2nd step, then the end
    for name in ("user", "item"):
        assert written[f"mxrec/{name}/size"][5] == sizes[name] > 0
        assert written[f"mxrec/{name}/train_lookups"] == {2: 2 * stats[name]["train_lookups"] / 5,
                                                           4: 4 * stats[name]["train_lookups"] / 5,
                                                           5: stats[name]["train_lookups"]}


def test_obs_3_hook_with_chosen_tables_and_statistics(backend, tmp_path):
    handles = tf_model.build(backend)
    hook = StatsSummaryHook(tmp_path, every_n_steps=10, tables=[handles["tables"]["user"]],
                            stats=["size", "admitted"])
    with handles["graph"].as_default(), tf.compat.v1.train.MonitoredTrainingSession(hooks=[hook]) as session:
        for _ in range(3):
            session.run(handles["train"])
    assert {tag: sorted(steps) for tag, steps in scalars(tmp_path).items()} == {
        "mxrec/user/size": [3], "mxrec/user/admitted": [3]}


def test_obs_3_hook_without_a_global_step_counts_runs(tmp_path):
    store = open_store(TableConfig("clicks", dim=2, device_vocabulary_size=8))
    hook = StatsSummaryHook(tmp_path, every_n_steps=2, tables=[store], stats=["size"])
    with tf.Graph().as_default():
        op = tf.constant(1)
        with tf.compat.v1.train.MonitoredSession(hooks=[hook]) as session:
            for run in range(3):
                store.lookup(np.array([run], dtype=np.int64), step=run)
                session.run(op)
    assert scalars(tmp_path) == {"mxrec/clicks/size": {2: 2.0, 3: 3.0}}


@pytest.mark.parametrize("kwargs, parameter", [
    ({"every_n_steps": 0}, "every_n_steps"), ({"every_n_steps": 2.5}, "every_n_steps"),
    ({"stats": ["size", "sise"]}, "stats"), ({"stats": []}, "stats"), ({"output_dir": ""}, "output_dir")])
def test_obs_3_hook_rejects_bad_arguments_by_name(kwargs, parameter, tmp_path):
    with pytest.raises(ValueError, match=f"StatsSummaryHook: {parameter}:"):
        StatsSummaryHook(**{"output_dir": str(tmp_path), **kwargs})


def test_obs_4_keras_callback_writes_stats_every_n_batches_and_each_epoch(backend, tmp_path):
    store = open_store(TableConfig("clicks", dim=2, device_vocabulary_size=64), backend=backend)

    def touch_store(batch, logs):                     # a stand-in for an embedding layer's lookups
        store.lookup(np.array([batch, 100 + batch], dtype=np.int64), step=batch)

    model = tf.keras.Sequential([tf.keras.Input(shape=(3,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x, y = np.ones((10, 3), np.float32), np.zeros((10, 1), np.float32)
    logger = StatsLogger(tmp_path, every_n_batches=2, tables=[store], stats=["size", "train_lookups"])
    model.fit(x, y, batch_size=2, epochs=2, verbose=0,        # 5 batches an epoch
              callbacks=[tf.keras.callbacks.LambdaCallback(on_train_batch_end=touch_store), logger])
    written = scalars(tmp_path)
    assert set(written) == {"mxrec/clicks/size", "mxrec/clicks/train_lookups"}
    steps = [2, 4, 5, 6, 8, 10]                               # every 2nd batch, plus the end of epoch 1
    assert written["mxrec/clicks/train_lookups"] == {s: float(s) for s in steps}
    assert written["mxrec/clicks/size"] == {s: float(2 * min(s, 5)) for s in steps}
    assert logger.step == 10


def test_obs_4_keras_callback_defaults_to_the_tf_layer_tables(tmp_path):
    handles = tf_model.build("ref")
    session = tf.compat.v1.Session(graph=handles["graph"])
    session.run(handles["init"])
    session.run(handles["train"])
    logger = StatsLogger(tmp_path)
    logger.write(7)
    logger.on_train_end()
    written = scalars(tmp_path)
    assert {tag for tag in written if tag.endswith("/size")} == {"mxrec/item/size", "mxrec/user/size"}
    assert written["mxrec/user/size"] == {7: handles["tables"]["user"].size()}


def test_obs_4_keras_callback_rejects_bad_arguments_by_name(tmp_path):
    with pytest.raises(ValueError, match="StatsLogger: every_n_batches:"):
        StatsLogger(tmp_path, every_n_batches=0)
    with pytest.raises(ValueError, match="StatsLogger: stats:"):
        StatsLogger(tmp_path, stats=["nope"])


def test_obs_3_tables_must_be_tables_given_once(tmp_path):
    store = open_store(TableConfig("clicks", dim=2))
    with pytest.raises(ValueError, match="StatsSummaryHook: tables: table 'clicks' is given twice"):
        StatsSummaryHook(tmp_path, tables=[store, store])
    with pytest.raises(ValueError, match="StatsLogger: tables: must be mxrec_ref stores or SparseTables, got str"):
        StatsLogger(tmp_path, tables=["clicks"])
    assert mx.StatsSummaryHook is StatsSummaryHook


def test_obs_5_train_logdir_writes_loss_auc_and_every_tables_statistics(tmp_path):
    """`mxrec-ref train --logdir DIR`: at every evaluation, train/loss, test/auc, test/logloss and each table's
    statistics, at the global step, in one event file of DIR (the graph gets no summary ops)."""
    from mxrec_ref import train

    flags = ["--backend", "ref", "--rows", "6000", "--steps", "40", "--batch-size", "128", "--eval-every", "20",
             "--no-progress", "--logdir", str(tmp_path / "logs")]
    config = train.config_from_args(train.build_parser().parse_args(flags))
    assert config.logdir == str(tmp_path / "logs")
    result = train.run(config, echo=lambda line: None)
    found = scalars(tmp_path / "logs")
    for tag in ("train/loss", "test/auc", "test/logloss"):
        assert sorted(found[tag]) == [20, 40], tag
    assert [found["test/auc"][row["step"]] for row in result["history"]] == pytest.approx(
        [row["test_auc"] for row in result["history"]])
    for table in ("wide", "deep"):
        for stat in STAT_NAMES:
            assert sorted(found[f"mxrec/{table}/{stat}"]) == [20, 40], (table, stat)
        assert found[f"mxrec/{table}/grad_applies"][40] == result["stats"][table]["grad_applies"]
    assert set(found) == {"train/loss", "test/auc", "test/logloss"} | {
        f"mxrec/{table}/{stat}" for table in ("wide", "deep") for stat in STAT_NAMES}
