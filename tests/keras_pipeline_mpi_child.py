"""One run of tests/keras_mpi_child.py's tiny model for tests/test_pipeline_keras.py (PIPE-9, KERAS-17): under
``mpirun -np 2`` each rank fits its share of every batch from a tf.data dataset mapped by ``resolve_keys_ahead``
(two epochs), with the key pipeline as ``MXREC_KEY_PIPELINE`` says.  Each rank writes
``<folder>/<backend>-<switch>-<rank>.npz``: the whole table, the dense weights, the losses after each step and
how many batches the table's lookups took resolved ahead."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from keras_mpi_child import STEPS, Losses, data, share
from mxrec_ref import Initializer, LazyAdam
from mxrec_ref.distributed.comm import world
from mxrec_ref.keras import Embedding, Model, resolve_keys_ahead


def run(backend: str, folder: Path) -> None:
    comm = world()
    ids, labels = data()
    ids, labels = share(ids, comm.rank, comm.size), share(labels, comm.rank, comm.size)
    keras.utils.set_random_seed(1)
    inputs = keras.Input(shape=(3,), dtype="int64")
    table = Embedding(4, optimizer=LazyAdam(learning_rate=0.05), name=f"t_{backend}", backend=backend,
                      initializer=Initializer(kind="uniform", minval=-0.5, maxval=0.5, seed=7), access_threshold=2)
    hidden = keras.layers.Dense(4, activation="relu", kernel_initializer=keras.initializers.GlorotUniform(3))(
        keras.layers.Flatten()(table(inputs)))
    model = Model(inputs, keras.layers.Dense(1, kernel_initializer=keras.initializers.GlorotUniform(4))(hidden))
    model.compile(keras.optimizers.Adam(0.05), loss=keras.losses.BinaryCrossentropy(from_logits=True))
    losses = Losses()
    dataset = tf.data.Dataset.from_tensor_slices((ids, labels)).batch(len(ids) // STEPS)
    model.fit(resolve_keys_ahead(dataset, {None: table}), epochs=2, verbose=0, callbacks=[losses])
    state = table.store.export()           # collective under mpirun: the whole table on every rank
    order = np.argsort(state.keys)
    switch = os.environ["MXREC_KEY_PIPELINE"]
    np.savez(folder / f"{backend}-{switch}-{comm.rank}.npz", keys=state.keys[order], rows=state.values[order],
             losses=np.array(losses.values), taken=np.array([table.ahead.taken]),
             **{f"dense{i}": w for i, w in enumerate(model.get_weights())})


if __name__ == "__main__":
    for name in sys.argv[2:]:
        run(name, Path(sys.argv[1]))
