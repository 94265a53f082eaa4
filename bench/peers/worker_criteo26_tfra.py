"""The 26-table model (bench/criteo26.py) on TFRA 0.8.1's TF2 path: one
``dynamic_embedding.keras.layers.Embedding`` per field, tf_keras Dense layers, a ``tf.function``
step with GradientTape, Keras 2's legacy Adagrad (wrapped in ``DynamicEmbeddingOptimizer`` for the tables) and
the same tf.data feed, its iterator read inside the function as the TF1 graphs read theirs.

Usage: python worker_criteo26_tfra.py BENCH_DIR STREAM_NPZ; prints one JSON line."""
import json
import os
import sys

os.environ["TF_USE_LEGACY_KERAS"] = "1"    # tf.keras = tf_keras (Keras 2): TFRA 0.8 does not support Keras 3
import tensorflow as tf  # noqa: E402
import tensorflow_recommenders_addons as tfra  # noqa: E402
import tf_keras as keras  # noqa: E402

sys.path.insert(0, sys.argv[1])
import criteo26  # noqa: E402

de = tfra.dynamic_embedding
stream = criteo26.load_stream(sys.argv[2])
tables = [de.keras.layers.Embedding(criteo26.DIM, key_dtype=tf.int64, name=f"emb_{name}",
                                    initializer=keras.initializers.TruncatedNormal(stddev=criteo26.STDDEV, seed=i))
          for i, name in enumerate(criteo26.FIELDS)]
mlp = [keras.layers.Dense(units, activation="relu" if units != 1 else None,
                          kernel_initializer=keras.initializers.GlorotUniform(seed=i))
       for i, units in enumerate((*criteo26.HIDDEN, 1))]
# Keras 2's legacy optimizers: with tf_keras' current Adagrad (keras.optimizers.Adagrad) TFRA's step took 3-4x
# longer (0.36-1.29 s against 0.10-0.24 s, 12 steps each, same loaded machine; bench/README.md)
sparse_optimizer = de.DynamicEmbeddingOptimizer(
    keras.optimizers.legacy.Adagrad(criteo26.SPARSE_LR, initial_accumulator_value=criteo26.INITIAL_ACCUMULATOR))
dense_optimizer = keras.optimizers.legacy.Adagrad(criteo26.DENSE_LR,
                                                  initial_accumulator_value=criteo26.INITIAL_ACCUMULATOR)
iterator = iter(criteo26.dataset(tf, stream, "keys", tf.int64).prefetch(2))


@tf.function
def step(iterator):
    batch = next(iterator)
    with tf.GradientTape() as tape:
        x = tf.concat([table(batch[name]) for table, name in zip(tables, criteo26.FIELDS)] + [batch["dense"]], axis=1)
        for layer in mlp:
            x = layer(x)
        loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=batch["label"],
                                                                      logits=tf.reshape(x, [-1])))
    sparse_vars = [v for table in tables for v in table.trainable_variables]
    dense_vars = [v for layer in mlp for v in layer.trainable_variables]
    grads = tape.gradient(loss, sparse_vars + dense_vars)
    sparse_optimizer.apply_gradients(zip(grads[:len(sparse_vars)], sparse_vars))
    dense_optimizer.apply_gradients(zip(grads[len(sparse_vars):], dense_vars))
    return loss


result = criteo26.time_steps(lambda: step(iterator).numpy())
keys = sum(int(table.params.size()) for table in tables)
print(json.dumps({"system": "tfra", "tf": tf.__version__, "keys": keys, "traces": step.experimental_get_tracing_count(),
                  **result}))
