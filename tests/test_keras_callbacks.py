"""KERAS-16: Keras's own TensorBoard callback works with an ``mxrec_ref.keras.Model`` (with the project's
StatsLogger beside it); without the ``tensorboard`` package ``fit`` says which extra to install, in one line,
before the first step."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from mxrec_ref.keras import Embedding, Model, StatsLogger

MODEL = textwrap.dedent("""
    import keras
    import numpy as np
    from mxrec_ref.keras import Embedding, Model

    x = np.random.default_rng(0).integers(0, 100, (256, 3))
    y = (x[:, 0] % 2).astype("float32")
    ids = keras.Input((3,), dtype="int64")
    table = Embedding(4, name="item", backend="ref")
    model = Model(ids, keras.layers.Dense(1, activation="sigmoid")(keras.layers.Flatten()(table(ids))))
    model.compile(keras.optimizers.Adam(0.01), "binary_crossentropy", metrics=[keras.metrics.AUC(name="auc")])
""")


def _tags(folder: Path) -> set[str]:
    return {value.tag for path in folder.glob("events.out.tfevents.*")
            for event in tf.compat.v1.train.summary_iterator(str(path)) for value in event.summary.value}


def test_keras_16_the_tensorboard_callback_writes_the_models_scalars(tmp_path):
    namespace: dict = {}
    exec(MODEL, namespace)
    model, x, y = namespace["model"], namespace["x"], namespace["y"]
    model.fit(x, y, batch_size=64, epochs=2, verbose=0, validation_data=(x[:64], y[:64]),
              callbacks=[keras.callbacks.TensorBoard(str(tmp_path / "tb"), histogram_freq=1),
                         StatsLogger(str(tmp_path / "tb" / "tables"))])
    assert {"epoch_loss", "epoch_auc"} <= _tags(tmp_path / "tb" / "train")
    assert {"epoch_loss", "epoch_auc"} <= _tags(tmp_path / "tb" / "validation")
    assert "mxrec/item/grad_applies" in _tags(tmp_path / "tb" / "tables")


def test_keras_16_without_tensorboard_fit_names_the_extra_before_training(tmp_path):
    child = ('import sys; sys.modules["tensorboard"] = None   # as if not installed\n' + MODEL + textwrap.dedent(f"""
        from mxrec_ref import UsageError
        try:
            model.fit(x, y, batch_size=64, epochs=1, verbose=0,
                      callbacks=[keras.callbacks.TensorBoard({str(tmp_path / "tb")!r})])
        except UsageError as error:
            print(error)
        print(table.store.stats()["train_lookups"], int(model.optimizer.iterations.numpy()))
    """))
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-2:] == [
        "mxrec_ref.keras: fit: callbacks: keras.callbacks.TensorBoard needs the tensorboard package, which the "
        "'tensorboard' extra installs: pip install 'mxrec-ref[tensorboard]'", "0 0"]
