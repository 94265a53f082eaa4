"""An updatable export's delta against the full export (spec/serving.md, SERVE-3; issue 33 item 5): a
table of 10^6 keys (dim 16, Adagrad, fast backend) under a small Keras model; each delta changes 1 % of the
rows (9,000 keys updated, 1,000 new keys).  Two ratios, both "how many times cheaper the delta is":

- ``serving delta write / full updatable export``: ``export_delta`` vs ``export_saved_model(updatable=True)``
  (target >= 20, i.e. the delta costs <= 5 % of the export);
- ``serving delta apply / full load``: ``mxrec_ref.serving.apply_delta`` (read, checksum, the signature call)
  on a loaded model vs ``tf.saved_model.load`` of the export (target >= 20).

The same size in both profiles: the target is stated at 10^6 rows."""
from __future__ import annotations

import itertools
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

from mxrec_ref import Adagrad
from mxrec_ref.keras import Embedding, Model, export_saved_model
from mxrec_ref.serving import apply_delta, export_delta

from workloads import BATCH, DIM, all_keys

ROWS = 1_000_000
CHANGED, NEW = 9_000, 1_000            # 1 % of the rows per delta
DELTAS = 8                              # enough for the warm-up round and the timed rounds


def change_one_percent(store, round_: int) -> None:
    """Train 9,000 existing keys and 1,000 keys never seen, different ones each round."""
    keys = all_keys(ROWS)
    start = round_ * CHANGED
    batch = np.concatenate([keys[start:start + CHANGED], 10**15 + round_ * NEW + np.arange(NEW)])
    result = store.lookup(batch, step=round_ + 1)
    store.apply_gradients(result, np.full((len(result.unique_keys), DIM), 0.01, np.float32), step=round_ + 1)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("serving")
    ids = keras.Input((4,), dtype="int64", name="ids")
    table = Embedding(DIM, name="bench_serving", optimizer=Adagrad(0.05), backend="fast")
    model = Model(ids, keras.layers.Dense(1)(keras.layers.Flatten()(table(ids))))
    keys = all_keys(ROWS)
    for start in range(0, ROWS, BATCH):
        table.store.lookup(keys[start:start + BATCH], step=0)
    export_saved_model(model, root / "export", updatable=True)
    for k in range(DELTAS):                # the deltas the apply benchmark applies, in order
        change_one_percent(table.store, k)
        export_delta(root / "export", root / f"delta{k + 1}")
    yield model, table, root
    shutil.rmtree(root, ignore_errors=True)


def test_full_updatable_export(benchmark, served):
    model, _, root = served
    benchmark.extra_info.update(ratio_group="serving delta write (1% of 10^6 rows) / full updatable export",
                                role="full updatable export")
    benchmark.pedantic(lambda: export_saved_model(model, root / "again", updatable=True), rounds=2)   # ~250x the delta


def test_delta_write(benchmark, served):
    model, table, root = served
    benchmark.extra_info.update(ratio_group="serving delta write (1% of 10^6 rows) / full updatable export",
                                role="candidate")
    rounds = itertools.count(DELTAS)
    export_saved_model(model, root / "base", updatable=True)

    def setup():
        change_one_percent(table.store, next(rounds))
        return (), {}

    names = itertools.count(1)
    benchmark.pedantic(lambda: export_delta(root / "base", root / f"written{next(names)}"), setup=setup,
                       rounds=3, warmup_rounds=1)


def test_full_load(benchmark, served):
    _, _, root = served
    benchmark.extra_info.update(ratio_group="serving delta apply (1% of 10^6 rows) / full load",
                                role="tf.saved_model.load")
    benchmark.pedantic(lambda: tf.saved_model.load(str(root / "export")), rounds=3, warmup_rounds=1)


def test_delta_apply(benchmark, served):
    _, _, root = served
    benchmark.extra_info.update(ratio_group="serving delta apply (1% of 10^6 rows) / full load", role="candidate")
    loaded = tf.saved_model.load(str(root / "export"))
    deltas = itertools.count(1)
    benchmark.pedantic(lambda: apply_delta(loaded, root / f"delta{next(deltas)}"), rounds=DELTAS - 1,
                       warmup_rounds=1)
