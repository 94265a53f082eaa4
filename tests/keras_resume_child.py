"""Child processes of tests/test_keras_resume.py (KERAS-14): each is a fresh process.

Every fit evicts every 4 batches (EvictCallback), by the tables' clock.
``train BACKEND FOLDER`` fits the model 4 epochs straight and writes its tables and dense
weights to FOLDER/straight.npz, then fits a new model 2 epochs and saves it as FOLDER/m.keras.
``resume FOLDER`` loads FOLDER/m.keras, fits 2 more epochs and writes FOLDER/resumed.npz.
"""
import dataclasses
import sys
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from mxrec_ref.demo import synthetic_click_log
from mxrec_ref.keras import Embedding, EvictCallback, Model

tf.config.experimental.enable_op_determinism()       # the dense ops too give the same bits every run
LOG = synthetic_click_log(1024, seed=5)
FIT = dict(batch_size=128, verbose=0, shuffle=False)      # 8 batches an epoch


def evict():
    return [EvictCallback(every_n_batches=4)]            # by the tables' clock: it must continue


def new_model(backend):
    keras.utils.set_random_seed(0)
    ids = keras.Input((12,), dtype="int64", name="ids")
    features = Embedding(8, name="features", backend=backend, access_threshold=2, eviction_threshold=20,
                         initializer=keras.initializers.RandomUniform(-0.1, 0.1, seed=3))(ids)
    hidden = keras.layers.Dense(8, activation="relu", name="hidden")(keras.layers.Flatten()(features))
    model = Model(ids, keras.layers.Dense(1, activation="sigmoid", name="head")(hidden))
    model.compile(keras.optimizers.Adam(keras.optimizers.schedules.ExponentialDecay(0.02, 10, 0.9)),
                  "binary_crossentropy")
    return model


def dump(model, path):
    state = model.get_layer("features").store.export()
    arrays = {f"dense{i}": w for i, w in enumerate(model.get_weights())}
    arrays.update({f"optimizer{i}": v.numpy() for i, v in enumerate(model.optimizer.variables)})
    for field in dataclasses.fields(state):
        value = getattr(state, field.name)
        if field.name == "slots":
            arrays.update({f"slot_{name}": slot for name, slot in value.items()})
        else:
            arrays[field.name] = np.asarray(str(value) if field.name.startswith("clock") else value)
    np.savez(path, **arrays)


if __name__ == "__main__":
    if sys.argv[1] == "train":
        backend, folder = sys.argv[2], Path(sys.argv[3])
        straight = new_model(backend)
        straight.fit(LOG.keys, LOG.labels, epochs=4, callbacks=evict(), **FIT)
        dump(straight, folder / "straight.npz")
        half = new_model(backend)
        half.fit(LOG.keys, LOG.labels, epochs=2, callbacks=evict(), **FIT)
        half.save(folder / "m.keras")
    else:
        folder = Path(sys.argv[2])
        model = keras.models.load_model(folder / "m.keras")
        model.fit(LOG.keys, LOG.labels, epochs=2, callbacks=evict(), **FIT)
        dump(model, folder / "resumed.npz")
