"""The server half of the TFRA store (mxrec_ref.peers.tfra): TFRA's ``dynamic_embedding`` tables in a
process of the peers environment (TF 2.16.2, TFRA 0.8.1, numpy 1.26), driven over two pipes.

Run as ``python tfra_server.py READ_FD WRITE_FD`` by the client; imports the standard library, numpy,
TensorFlow, TFRA and the sibling ``protocol`` module only (never mxrec_ref, whose TensorFlow layer needs
TF 2.21).  One server holds every table of its client, by the client's table id.

Per table, what TFRA does and what this file adds:
* values: a ``dynamic_embedding.Variable`` (a CPU cuckoo hash table).  Lookups are its hash table's
  ``lookup(keys, dynamic_default_values=..., return_exists=True)``; a training lookup inserts the keys it
  saw with ``upsert`` (TFRA itself stores a key only when an optimizer first updates it).
* updates: the table's ``ShadowVariable`` and a tf_keras legacy optimizer wrapped in TFRA's
  ``DynamicEmbeddingOptimizer``, exactly as a TFRA training step applies them (its slots are
  dynamic_embedding variables too).  The gradient of ``sum(lookup(keys) * grads)`` is ``grads``.
* access counts and last-seen times: TFRA keeps none (its restrict policies keep their own status
  tables, with other semantics); a second dynamic_embedding variable of int64 pairs holds them.
"""
from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ["TF_USE_LEGACY_KERAS"] = "1"       # TFRA 0.8 supports Keras 2 (tf_keras) only

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_recommenders_addons as tfra  # noqa: E402
import tf_keras  # noqa: E402

import protocol  # noqa: E402  (the sibling module: this file runs as a script)

de = tfra.dynamic_embedding
legacy = tf_keras.optimizers.legacy
# mxrec-ref's slot name -> the tf_keras optimizer's slot name
SLOT_NAMES = {"Adagrad": {"accumulator": "accumulator"}, "LazyAdam": {"momentum": "m", "velocity": "v"},
              "ftrl": {"accum": "accumulator", "linear": "linear"}, "gradient_descent": {}}
COUNT_MAX = 2**63 - 1


def keras_optimizer(params: dict):
    """The tf_keras legacy optimizer computing the update of mxrec-ref's optimizer (its ``describe()``)."""
    kind, lr = params["kind"], params["learning_rate"]
    if kind == "gradient_descent":
        return legacy.SGD(lr)
    if kind == "Adagrad":
        # Keras adds epsilon to sqrt(acc) (default 1e-7; 0 is replaced by the default): the smallest
        # float32 leaves sqrt(acc) >= sqrt(initial_accumulator_value) unchanged, as OPT-4 has no epsilon.
        return legacy.Adagrad(lr, initial_accumulator_value=params["initial_accumulator_value"], epsilon=1e-45)
    if kind == "LazyAdam":
        return legacy.Adam(lr, beta_1=params["beta1"], beta_2=params["beta2"], epsilon=params["epsilon"])
    if kind == "ftrl":
        return legacy.Ftrl(lr, learning_rate_power=params["learning_rate_power"],
                           initial_accumulator_value=params["initial_accumulator_value"],
                           l1_regularization_strength=params["l1_regularization_strength"],
                           l2_regularization_strength=params["l2_regularization_strength"],
                           l2_shrinkage_regularization_strength=params["l2_shrinkage_regularization_strength"])
    raise ValueError(f"unknown optimizer kind {kind!r}")


class Table:
    def __init__(self, table: int, dim: int, initializer, optimizer: dict):
        name = f"mxrec_t{table}"
        self.dim = dim
        # initializer: a constant (TFRA's own default), or None: the client passes each key's initial row
        self.values = de.Variable(key_dtype=tf.int64, value_dtype=tf.float32, dim=dim, name=name,
                                  initializer=0.0 if initializer is None else float(initializer))
        self.meta = de.Variable(key_dtype=tf.int64, value_dtype=tf.int64, dim=2, name=name + "_meta",
                                initializer=0)      # [count, last_seen]
        self.shadow = de.shadow_ops.ShadowVariable(self.values, name=name + "_shadow")
        self.kind = optimizer["kind"]
        self.optimizer = de.DynamicEmbeddingOptimizer(keras_optimizer(optimizer))
        self.optimizer._create_all_weights([self.shadow])    # the slot tables exist before the first apply

    def slot(self, mxrec_name: str):
        return self.optimizer.get_slot(self.shadow, SLOT_NAMES[self.kind][mxrec_name]).params

    def slot_names(self):
        return list(SLOT_NAMES[self.kind])

    # ------------------------------------------------------------------ ops
    def lookup(self, keys, defaults=None):
        table = self.values.tables[0]
        kwargs = {} if defaults is None else {"dynamic_default_values": tf.constant(defaults)}
        rows, exists = table.lookup(tf.constant(keys), return_exists=True, **kwargs)
        return {}, {"rows": rows.numpy(), "exists": exists.numpy()}

    def commit(self, clock, new_keys, new_rows, keys, added):
        """A training lookup's changes: its new keys' rows, then every key's count and last-seen time."""
        if len(new_keys):
            self.values.upsert(tf.constant(new_keys), tf.constant(new_rows))
        if len(keys):
            meta = self.meta.lookup(tf.constant(keys)).numpy()
            room = COUNT_MAX - meta[:, 0]                    # counts saturate instead of wrapping
            meta[:, 0] += np.minimum(added, room)
            meta[:, 1] = clock
            self.meta.upsert(tf.constant(keys), tf.constant(meta))
        return {}, {}

    def apply(self, step, keys, grads):
        """One optimizer step on the rows of ``keys`` that exist; the others are dropped (OPT-2)."""
        _, exists = self.values.lookup(tf.constant(keys), return_exists=True)
        exists = exists.numpy()
        keys, grads = keys[exists], grads[exists]
        if len(keys):
            self.optimizer.iterations.assign(step)     # Adam's bias correction reads t = iterations + 1
            ids = tf.constant(keys)
            g = tf.constant(grads)
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(de.shadow_ops.embedding_lookup(self.shadow, ids) * g)
            self.optimizer.apply_gradients([(tape.gradient(loss, self.shadow), self.shadow)])
        return {"applied": int(len(keys))}, {}

    def export(self):
        keys, values = (t.numpy() for t in self.values.export())
        order = np.argsort(keys, kind="stable")         # hash order is no order (CON-6, CON-7)
        keys, values = keys[order], values[order]
        arrays = {"keys": keys, "values": values}
        meta = self.meta.lookup(tf.constant(keys)).numpy() if len(keys) else np.zeros((0, 2), np.int64)
        arrays["counts"], arrays["last_seen"] = meta[:, 0].copy(), meta[:, 1].copy()
        for name in self.slot_names():
            arrays["slot:" + name] = (self.slot(name).lookup(tf.constant(keys)).numpy() if len(keys)
                                      else np.zeros((0, self.dim), np.float32))
        return {}, arrays

    def import_state(self, keys, values, counts, last_seen, **slots):
        for variable in [self.values, self.meta] + [self.slot(n) for n in self.slot_names()]:
            variable.clear()
        if len(keys):
            ids = tf.constant(keys)
            self.values.upsert(ids, tf.constant(values))
            self.meta.upsert(ids, tf.constant(np.stack([counts, last_seen], axis=1)))
            for name in self.slot_names():
                self.slot(name).upsert(ids, tf.constant(slots["slot:" + name]))
        return {}, {}

    def size(self):
        return {"size": int(self.values.size().numpy())}, {}


def main(argv) -> None:
    reader = os.fdopen(int(argv[1]), "rb")
    writer = os.fdopen(int(argv[2]), "wb")
    tf.get_logger().setLevel("ERROR")
    protocol.serve(reader, writer, Table, {"tf": tf.__version__, "tfra": tfra.__version__, "numpy": np.__version__})


if __name__ == "__main__":
    main(sys.argv)
