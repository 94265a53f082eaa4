"""KERAS-15: under a ``tf.distribute`` strategy with more than one replica, training a table is refused when
the step is built -- naming the table and pointing to ``mpirun`` -- before the store changes, instead of each
replica applying its own gradient (a table unlike one replica's).  Evaluation lookups change nothing and run.
Two logical CPU devices must be configured before TensorFlow starts: the check runs in a fresh process."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent("""
    import json, sys
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import keras
    import numpy as np
    from mxrec_ref import UsageError
    from mxrec_ref.keras import Embedding, Model, TableGradientTape

    backend = sys.argv[1]
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    x = np.random.default_rng(0).integers(0, 100, (256, 3))
    y = (x[:, 0] % 2).astype("float32")
    report = {"replicas": strategy.num_replicas_in_sync}

    def model_with(layer):
        ids = keras.Input((3,), dtype="int64")
        model = Model(ids, keras.layers.Dense(1, activation="sigmoid")(keras.layers.Flatten()(layer(ids))))
        model.compile(keras.optimizers.Adam(0.01), "binary_crossentropy")
        return model

    with strategy.scope():
        table = Embedding(4, name="item", backend=backend)
        model = model_with(table)
        static = model_with(keras.layers.Embedding(100, 4))
    static.fit(x, y, batch_size=64, epochs=1, verbose=0)               # the strategy itself trains
    predicted = model.predict(x[:64], batch_size=32, verbose=0)       # evaluation lookups: allowed
    report["predict_matches"] = bool(np.array_equal(predicted, model(x[:64], training=False).numpy()))
    try:
        model.fit(x, y, batch_size=64, epochs=1, verbose=0)
    except UsageError as error:
        report["fit"] = str(error)
    report["after_fit"] = table.store.stats()

    @tf.function(autograph=False)      # autograph would re-wrap the error as a StagingError
    def custom_step(ids):
        with TableGradientTape() as tape:
            loss = tf.reduce_sum(table(ids, training=True))
        return tape.gradient_and_apply(loss, [])[1]
    try:
        strategy.run(custom_step, (tf.constant(x[:8]),))
    except UsageError as error:
        report["custom"] = str(error)
    report["after_custom"] = table.store.stats()
    print(json.dumps(report))
""")


def test_keras_15_several_replicas_are_refused_before_the_table_changes(backend):
    done = subprocess.run([sys.executable, "-c", CHILD, backend], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["replicas"] == 2 and report["predict_matches"]
    assert report["fit"].startswith("table 'item': tf.distribute")      # fit refuses before any layer call
    for case in ("fit", "custom"):
        assert "table 'item': tf.distribute: MirroredStrategy runs 2 replicas" in report[case], report
        assert "mpirun -np N" in report[case]
        stats = report[f"after_{case}"]
        assert stats["size"] == stats["pending"] == stats["train_lookups"] == stats["grad_applies"] == 0


def test_keras_15_one_replica_trains_as_without_a_strategy():
    """A one-replica strategy is not refused."""
    import keras
    import numpy as np
    import tensorflow as tf

    from mxrec_ref.keras import Embedding, Model

    x = np.random.default_rng(1).integers(0, 50, (128, 2))
    y = (x[:, 0] % 2).astype("float32")
    with tf.distribute.OneDeviceStrategy("/cpu:0").scope():
        ids = keras.Input((2,), dtype="int64")
        table = Embedding(4, name="one", backend="ref")
        model = Model(ids, keras.layers.Dense(1)(keras.layers.Flatten()(table(ids))))
        model.compile(keras.optimizers.SGD(0.1), "mse")
    model.fit(x, y, batch_size=32, epochs=1, verbose=0)
    assert table.store.stats()["grad_applies"] == 4
