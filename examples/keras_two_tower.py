"""A two-tower click model in Keras 3 with mxrec-ref tables (spec/keras.md):

    python examples/keras_two_tower.py [OUTPUT_FOLDER]

1. ``model.fit`` on the embedded synthetic click log (``mxrec_ref.demo``): fields 0-5 are the user's, 6-11
   the item's; each tower is an ``Embedding`` table (admission after 2 sightings, eviction after 2000 steps)
   averaged over its fields (``combiner="mean"``) and a dense layer; the score is their dot product.
2. ``tf.train.Checkpoint`` saves the model, tables included, and restores it into a new model.
3. ``mxrec_ref.keras.export_saved_model`` writes a SavedModel with the tables as static TF lookups, and a
   fresh Python process that never imports mxrec_ref loads it and checks it predicts what the model predicts.
"""
import os
import subprocess
import sys
import tempfile
import textwrap

import keras
import numpy as np
import tensorflow as tf

import mxrec_ref
from mxrec_ref.demo import synthetic_click_log
from mxrec_ref.keras import Embedding, EvictCallback, Model, export_saved_model
from mxrec_ref.metrics import auc

USER_FIELDS, ITEM_FIELDS = slice(0, 6), slice(6, 12)


def two_tower() -> Model:
    keras.utils.set_random_seed(0)
    user = keras.Input((6,), dtype="int64", name="user")
    item = keras.Input((6,), dtype="int64", name="item")
    towers = []
    for name, ids in (("user", user), ("item", item)):
        table = Embedding(16, name=f"{name}_table", combiner="mean", optimizer=mxrec_ref.Adagrad(0.3),
                          access_threshold=2, eviction_threshold=2000)
        towers.append(keras.layers.Dense(16, name=f"{name}_tower")(table(ids)))
    score = keras.layers.Activation("sigmoid")(keras.layers.Dot(axes=1)(towers))
    model = Model({"user": user, "item": item}, score)
    model.compile(keras.optimizers.Adam(0.01), "binary_crossentropy")
    return model


def inputs(keys) -> dict:
    return {"user": keys[:, USER_FIELDS], "item": keys[:, ITEM_FIELDS]}


def main(folder: str, rows: int = 24_000) -> None:
    log = synthetic_click_log(rows, seed=0)
    train, test = slice(0, rows * 5 // 6), slice(rows * 5 // 6, None)
    model = two_tower()
    model.fit(inputs(log.keys[train]), log.labels[train], batch_size=256, epochs=2, verbose=0,
              callbacks=[EvictCallback(every_n_batches=50)])
    predictions = model.predict(inputs(log.keys[test]), batch_size=2048, verbose=0).ravel()
    sizes = [model.get_layer(f"{name}_table").store.size() for name in ("user", "item")]
    print(f"test AUC {auc(log.labels[test], predictions):.3f} (the hidden model's: "
          f"{auc(log.labels[test], log.probability[test]):.3f}); tables: user {sizes[0]} keys, item {sizes[1]} keys")

    path = tf.train.Checkpoint(model=model).save(os.path.join(folder, "checkpoint", "ckpt"))
    restored = two_tower()
    tf.train.Checkpoint(model=restored).restore(path).assert_existing_objects_matched().expect_partial()
    same = np.array_equal(restored.predict(inputs(log.keys[test]), batch_size=2048, verbose=0).ravel(), predictions)
    print(f"checkpoint {path}: restored model predicts the same: {same}")
    assert same

    export = export_saved_model(model, os.path.join(folder, "serving"))
    np.save(os.path.join(folder, "keys.npy"), log.keys[test])
    np.save(os.path.join(folder, "predictions.npy"), predictions)
    check = textwrap.dedent(f"""
        import sys
        import numpy as np
        import tensorflow as tf
        keys = np.load({os.path.join(folder, "keys.npy")!r})
        serve = tf.saved_model.load({export!r}).signatures["serving_default"]
        served = serve(user=tf.constant(keys[:, :6]), item=tf.constant(keys[:, 6:]))["output_0"].numpy().ravel()
        assert "mxrec_ref" not in sys.modules
        assert np.array_equal(served, np.load({os.path.join(folder, "predictions.npy")!r}))
        print("served without mxrec_ref: predictions equal")
    """)
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, env=environment)
    print(result.stdout.strip() or result.stderr[-2000:])
    if result.returncode:
        raise SystemExit(result.returncode)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as scratch:
            main(scratch)
