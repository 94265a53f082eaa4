"""One run of a tiny ``mxrec_ref.keras.Model`` for tests/test_keras_mpi.py (KERAS-17), on both backends.

Under ``mpirun -np N`` rank r trains on its share of every step's batch (rows ``r*B .. (r+1)*B`` of each
global batch of ``N*B`` rows); in one process it trains on the whole global batch.  Each process writes
``<folder>/<backend>-<ranks>-<rank>.npz``: the whole table (``store.export()``, gathered from its owners
under mpirun), the dense weights and the running loss after each step."""
from __future__ import annotations

import sys
from pathlib import Path

import keras
import numpy as np

from mxrec_ref import Initializer, LazyAdam
from mxrec_ref.distributed.comm import world
from mxrec_ref.keras import Embedding, Model

ROWS_PER_RANK, RANKS, STEPS = 8, 2, 3        # the global batch is RANKS * ROWS_PER_RANK rows


def data() -> tuple[np.ndarray, np.ndarray]:
    generator = np.random.default_rng(7)
    rows = ROWS_PER_RANK * RANKS * STEPS
    ids = generator.integers(0, 40, size=(rows, 3)).astype(np.int64)
    labels = (ids.sum(axis=1) % 2).astype(np.float32)
    return ids, labels


def share(array: np.ndarray, rank: int, ranks: int) -> np.ndarray:
    """Rank ``rank``'s rows of every global batch, in step order."""
    batches = array.reshape(STEPS, RANKS * ROWS_PER_RANK, *array.shape[1:])
    per_rank = RANKS * ROWS_PER_RANK // ranks
    return batches[:, rank * per_rank:(rank + 1) * per_rank].reshape(-1, *array.shape[1:])


class Losses(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.values = []

    def on_train_batch_end(self, batch, logs=None):
        self.values.append(float(logs["loss"]))


def run(backend: str, folder: Path) -> None:
    comm = world()
    ids, labels = data()
    ids, labels = share(ids, comm.rank, comm.size), share(labels, comm.rank, comm.size)
    keras.utils.set_random_seed(1)
    inputs = keras.Input(shape=(3,), dtype="int64")
    table = Embedding(4, optimizer=LazyAdam(learning_rate=0.05), name=f"t_{backend}", backend=backend,
                      initializer=Initializer(kind="uniform", minval=-0.5, maxval=0.5, seed=7))
    pooled = keras.layers.Flatten()(table(inputs))
    hidden = keras.layers.Dense(4, activation="relu", kernel_initializer=keras.initializers.GlorotUniform(3))(pooled)
    outputs = keras.layers.Dense(1, kernel_initializer=keras.initializers.GlorotUniform(4))(hidden)
    model = Model(inputs, outputs)
    model.compile(keras.optimizers.Adam(0.05), loss=keras.losses.BinaryCrossentropy(from_logits=True))
    losses = Losses()
    model.fit(ids, labels, batch_size=len(ids) // STEPS, epochs=1, shuffle=False, verbose=0, callbacks=[losses])
    state = table.store.export()           # collective under mpirun: the whole table on every rank
    order = np.argsort(state.keys)
    np.savez(folder / f"{backend}-{comm.size}-{comm.rank}.npz", keys=state.keys[order], rows=state.values[order],
             losses=np.array(losses.values), **{f"dense{i}": w for i, w in enumerate(model.get_weights())})


def uneven(folder: Path) -> None:
    """Rank r fits 2 + r steps, then reads the table: the ranks' calls differ and every rank fails clearly
    (SHARD-22) instead of waiting; each writes what it raised to ``<folder>/uneven-<rank>.txt``."""
    comm = world()
    ids = (np.arange((2 + comm.rank) * 4 * 3).reshape(-1, 3) % 17).astype(np.int64)
    inputs = keras.Input(shape=(3,), dtype="int64")
    table = Embedding(4, optimizer=LazyAdam(learning_rate=0.05), name="uneven", backend="ref")
    model = Model(inputs, keras.layers.Dense(1)(keras.layers.Flatten()(table(inputs))))
    model.compile("adam", loss="mse")
    try:
        model.fit(ids, np.zeros(len(ids), np.float32), batch_size=4, verbose=0)
        table.store.export()
        outcome = "no error"
    except Exception as error:    # noqa: BLE001 -- the test reads what each rank raised
        outcome = f"{type(error).__name__}: {error}"
    (folder / f"uneven-{comm.rank}.txt").write_text(outcome)


if __name__ == "__main__":
    for name in sys.argv[2:]:
        run(name, Path(sys.argv[1]))
    if world().size > 1:
        uneven(Path(sys.argv[1]))
