"""``Embedding``: a Keras 3 layer over one dynamic table (KERAS-1).

The layer owns one store (``open_store`` with the layer's ``TableConfig`` and
sparse optimizer) -- no ``init()`` and no global state, so several models and
tests live side by side.  A batch is one ``tf.numpy_function`` per table: one
store lookup for the batch's unique keys.  The output is built from the unique
rows with the inverse index, so the gradient of the loss with respect to the
rows is the gradient summed per unique key, which ``TableGradientTape`` sends
to the store (tape.py: one op for every layer, reusing each lookup's result,
KERAS-12).
"""
from __future__ import annotations

import dataclasses
import functools
import threading

import keras
import numpy as np
import tensorflow as tf

from ..backends import available_backends, open_store
from ..config import Initializer, TableConfig
from ..distributed.comm import world
from ..errors import ConfigError, UsageError
from ..optimizers import SparseOptimizer, optimizer_from_description
from ..tf.key_pipeline import AheadQueue
from ..tf.lookup_limit import count_lookup
from ..tf.store_call import OUTPUTS as STORE_OUTPUTS
from ..tf.store_call import apply_gradient, lookup_outputs
from ..tf.table import KeptResults, initializer_from_tf
from . import ids as ids_module
from .optimizer_twin import learning_rate_tensor, sparse_twin
from .tracking import TableCheckpoint
from .tape import TrainingLookup, active_tape

# TableConfig fields a layer takes as keyword arguments (name and dim are the layer's own)
TABLE_FIELDS = tuple(f.name for f in dataclasses.fields(TableConfig) if f.name not in ("name", "dim"))


def refuse_several_replicas(table: str) -> None:
    """KERAS-15: under a ``tf.distribute`` strategy with several replicas each replica would look up and
    apply its own share of the batch to the one store -- several optimizer steps a step, a table unlike one
    replica's -- so a training lookup is refused when the step is built, before the store changes."""
    context = tf.distribute.get_replica_context()
    replicas = (context.num_replicas_in_sync if context is not None
                else tf.distribute.get_strategy().num_replicas_in_sync)
    if replicas > 1:
        strategy = type(tf.distribute.get_strategy()).__name__
        raise UsageError(
            f"table {table!r}: tf.distribute: {strategy} runs {replicas} replicas, and each would apply its "
            f"own gradient to this one table (it would not match a one-replica run); train with one replica "
            f"per process, and to train on several processes launch them with `mpirun -np N`, which shards "
            f"each table over the ranks (spec/sharding.md)")


@keras.saving.register_keras_serializable(package="mxrec_ref")
class Embedding(keras.layers.Layer):
    """``Embedding(dim, name=..., combiner=None, optimizer=None, backend=None, hot_rows=None, **table_fields)``.

    ``table_fields`` are ``TableConfig``'s (``device_vocabulary_size``,
    ``access_threshold``, ``eviction_threshold``, ``initializer`` -- an
    ``mxrec_ref.Initializer`` or a Keras/TF initializer --, ``serving_default_value``,
    ``dynamic_expansion``, ``host_vocabulary_size``, ...).  ``optimizer``: the
    table's sparse optimizer (``mxrec_ref.Adagrad(...)`` etc.); None: the sparse
    twin of the optimizer the model is compiled with, its learning rate followed
    step by step (KERAS-13; SGD(0.01), the store's, until a model binds one).  ``backend``: "ref" or "fast" (default: "fast" when built).
    ``combiner``: None, "sum", "mean" or "sqrtn" (ids.py).  The layer's name is
    the table's name (CFG-1).
    """

    def __init__(self, dim, name=None, *, combiner=None, optimizer=None, backend=None, hot_rows=None,
                 trainable=True, dtype=None, **table_fields):
        unknown = sorted(set(table_fields) - set(TABLE_FIELDS))
        if unknown:
            raise ConfigError(f"table {name!r}: {unknown[0]}: not a TableConfig field nor an Embedding argument")
        super().__init__(name=name, trainable=trainable, dtype=dtype)
        table_name = self.name
        ids_module.check_combiner(table_name, combiner)
        if isinstance(optimizer, dict):
            optimizer = optimizer_from_description(optimizer)
        if optimizer is not None and not isinstance(optimizer, SparseOptimizer):
            raise ConfigError(f"table {table_name!r}: optimizer: must be an mxrec_ref sparse optimizer "
                              f"(mxrec_ref.Adagrad, SGD, LazyAdam, Ftrl), got {type(optimizer).__name__}; the "
                              f"model's Keras optimizer trains the dense weights")
        if isinstance(table_fields.get("initializer"), dict):
            table_fields["initializer"] = Initializer(**table_fields["initializer"])
        if "initializer" in table_fields:
            table_fields["initializer"] = initializer_from_tf(table_fields["initializer"], table_name)
        if not {"device_vocabulary_size", "host_vocabulary_size", "dynamic_expansion"} & set(table_fields):
            table_fields["dynamic_expansion"] = True      # no size given: the table grows (KERAS-1)
        if "ssd_data_path" in table_fields and isinstance(table_fields["ssd_data_path"], list):
            table_fields["ssd_data_path"] = tuple(table_fields["ssd_data_path"])
        self.config = TableConfig(name=table_name, dim=dim, **table_fields)   # validates, naming the field
        self.combiner = combiner
        self.backend = backend or ("fast" if "fast" in available_backends() else "ref")
        self.hot_rows = hot_rows
        self._table_fields = table_fields
        self.store = self._open_store(optimizer)
        self.follows_model = optimizer is None   # the table learns with the model's optimizer (KERAS-13)
        self.model_optimizer = None              # the Keras optimizer followed, bound by compile
        self.train_lookups_run = 0          # the step of a training lookup when the tape gives none (KERAS-3)
        self._step_lock = threading.Lock()
        self.kept_results = KeptResults()   # training lookup results awaiting their apply (KERAS-12)
        self.ahead = AheadQueue()           # training batches resolve_keys_ahead resolved in tf.data (PIPE-9)
        self.supports_jit = False           # a numpy_function cannot be XLA-compiled
        self.serving = None                 # (StaticHashTable, rows variable) while exporting (KERAS-9)
        self.table_checkpoint = TableCheckpoint(self)   # tf.train.Checkpoint's view of the table (KERAS-7)

    @property
    def optimizer(self) -> SparseOptimizer:
        """The table's sparse optimizer (the store's)."""
        return self.store.optimizer

    @property
    def opened_store(self):
        """The table's store (the key pipeline's view of an owner, tf/key_pipeline.py): a layer's is always open."""
        return self.store

    @property
    def dim(self) -> int:
        return self.config.dim

    @property
    def table_name(self) -> str:
        return self.config.name

    # ---------------------------------------------------------------- Keras
    def build(self, input_shape=None):
        self.built = True

    def compute_output_spec(self, ids, training=None, timestamp=None):
        shape = tuple(ids.shape)
        if self.combiner is not None:
            shape = shape[:-1]
        return keras.KerasTensor(shape + (self.dim,), dtype="float32")

    def get_config(self):
        table_fields = {}
        for field, value in self._table_fields.items():
            value = getattr(self.config, field)
            if isinstance(value, Initializer):
                value = dataclasses.asdict(value)
            elif isinstance(value, tuple):
                value = list(value)
            table_fields[field] = value
        return {**super().get_config(), "dim": self.dim, "combiner": self.combiner,
                "optimizer": None if self.follows_model else self.optimizer.describe(), "backend": self.backend, "hot_rows": self.hot_rows,
                **table_fields}

    # --------------------------------------------------------------- lookup
    def call(self, ids, training=None, timestamp=None):
        """``timestamp``: the batch's data timestamp (an integer tensor; its maximum is the batch's), the
        clock of training lookups instead of the step (CON-5); evaluation never reads it (LKP-2)."""
        if training is None:         # unset (a model whose call takes no training argument): train under a tape
            training = active_tape() is not None
        training = bool(training) and self.trainable
        keys, layout = ids_module.flatten(self.table_name, ids, self.config.key_dtype, self.combiner)
        if self.serving is not None:
            table, rows = self.serving
            return ids_module.assemble(layout, rows, table.lookup(keys), self.combiner, self.dim)
        tape = active_tape() if training else None
        if training:
            refuse_several_replicas(self.table_name)
        if training and tape is None:
            raise UsageError(
                f"table {self.table_name!r}: training: this Embedding is called with training=True outside a "
                f"TableGradientTape, so nothing would ever update the table (a plain keras.Model's train_step or "
                f"a plain tf.GradientTape). Build the model with mxrec_ref.keras.Model / Sequential (or mix "
                f"mxrec_ref.keras.TableTraining into your model class), or record a custom step under "
                f"mxrec_ref.keras.TableGradientTape and call its gradient_and_apply")
        count_lookup(self, self.table_name, training, "Embedding")    # per graph / trace (KERAS-6, TF-17)
        step = tape.step_tensor() if training else tf.constant(-1, tf.int64)
        stamp = tf.constant(-1, tf.int64)
        if timestamp is not None and training:
            timestamp = tf.convert_to_tensor(timestamp)
            if not timestamp.dtype.is_integer:
                raise UsageError(f"table {self.table_name!r}: timestamp: must be an integer tensor, got "
                                 f"{timestamp.dtype.name}")
            stamp = tf.reduce_max(tf.cast(timestamp, tf.int64))
        unique_keys, rows, inverse, _, step_used, token = tf.numpy_function(
            functools.partial(self._store_lookup, training), [keys, step, stamp], list(STORE_OUTPUTS),
            stateful=True, name=f"{self.table_name}_store_lookup")
        unique_keys.set_shape([None])
        rows.set_shape([None, self.dim])
        inverse.set_shape(keys.shape)
        step_used.set_shape([])
        token.set_shape([])
        if training:
            tape.record(TrainingLookup(self, unique_keys, rows, step_used, token))
        return ids_module.assemble(layout, rows, inverse, self.combiner, self.dim)

    def _store_lookup(self, training: bool, keys, step, stamp) -> tuple:
        """The lookup's six outputs (``tf.store_call``, the TF layer's one store call)."""
        return lookup_outputs(self, keys, is_train=training, step=step, timestamp=None if stamp < 0 else int(stamp))

    def lookup_batch(self, keys, *, is_train: bool, step, timestamp=None, pad_to=None):
        """The store lookup of a batch and the step it used (``store_call.call_store``): a training
        lookup takes the tape's step, or, where the tape gives none (negative), counts its own
        (KERAS-3); an evaluation lookup reads no clock (LKP-2) and uses step -1.  A training batch of
        exactly these keys that ``resolve_keys_ahead`` queued is gathered, its key work done ahead (PIPE-9)."""
        if not is_train:
            self.ahead.discard(np.asarray(keys))      # a mapped dataset evaluated: its map must not wait
            return self.store.lookup(keys, train=False), -1
        with self._step_lock:
            step = int(step)
            if step < 0:
                step = self.train_lookups_run
            ahead = self.ahead.take(np.asarray(keys))
            if ahead is not None:
                try:
                    result = self.store.gather(ahead, step=step, timestamp=timestamp, pad_to=pad_to)
                finally:
                    self.ahead.gathered()
            else:
                result = self.store.lookup(keys, train=True, step=step, timestamp=timestamp, pad_to=pad_to)
            self.train_lookups_run += 1
        return result, step

    def keep_result(self, result) -> int:
        """Keep a training lookup's result for its apply (KERAS-12); returns its token."""
        return self.kept_results.keep(result)

    def apply_kept(self, keys, grads, step, token, learning_rate) -> int:
        """The store's apply of this layer's gradient rows for ``keys`` (KERAS-2), run inside the tape's
        one apply op: with the lookup's kept result when ``token`` names the lookup whose unique keys
        these are, else by key; the same state bit for bit either way (OPT-9, KERAS-12).
        ``learning_rate``: the followed Keras optimizer's at this step, negative when none (KERAS-13)."""
        learning_rate = float(learning_rate)
        if learning_rate >= 0 and learning_rate != self.store.optimizer.learning_rate:
            self.store.set_optimizer(dataclasses.replace(self.store.optimizer, learning_rate=learning_rate))
        return apply_gradient(self, keys, grads, step, token)

    def take_result_for(self, token: int, keys):
        """The kept result of the lookup ``token`` names when its unique keys are ``keys``, else None (KERAS-12)."""
        return self.kept_results.take_for(token, keys)

    # ------------------------------------------------------------ optimizer
    def twin_for(self, keras_optimizer) -> SparseOptimizer:
        """The sparse optimizer this layer would follow ``keras_optimizer`` with (KERAS-13), or the error
        naming the table: no twin, or a table that has trained with another kind (its slots differ)."""
        twin = sparse_twin(keras_optimizer, self.table_name)
        if twin.kind != self.optimizer.kind and (self.train_lookups_run or self.store.size()):
            raise UsageError(f"table {self.table_name!r}: optimizer: the table has trained with "
                             f"{self.optimizer.kind}; the model's {type(keras_optimizer).__name__} maps to "
                             f"{twin.kind}, whose slots differ; compile with the optimizer it trained with")
        return twin

    def _open_store(self, optimizer):
        """A new store for the table: under ``mpirun -np N`` this rank's shard (keys ``key mod N``) of
        one table sharded over the ranks (KERAS-17); a key's gradient rows are summed over the ranks and
        divided by N, as the dense gradients are (the mean loss of the ranks' batches together)."""
        return open_store(self.config, optimizer, backend=self.backend, comm=world(), divide_gradients=True,
                          **({} if self.hot_rows is None else {"hot_rows": self.hot_rows}))

    def follow_optimizer(self, keras_optimizer) -> None:
        """Learn with the sparse twin of ``keras_optimizer`` from now on (KERAS-13); ``compile`` of
        ``mxrec_ref.keras.Model`` calls it for every layer built without ``optimizer=``.  A table that has
        not trained yet gets a fresh store with the twin; one that has keeps its state, the twin's
        hyper-parameters taking over."""
        twin = self.twin_for(keras_optimizer)
        if twin.kind != self.optimizer.kind:
            self.store = self._open_store(twin)
            self.kept_results = KeptResults()
            self.ahead.clear()      # batches the old store resolved: only it may gather them (PIPE-2)
        else:
            self.store.set_optimizer(twin)
        self.model_optimizer = keras_optimizer

    def learning_rate_tensor(self) -> tf.Tensor:
        """The learning rate this step's apply takes: the followed Keras optimizer's, -1 when none."""
        if self.model_optimizer is None:
            return tf.constant(-1.0, tf.float32)
        return learning_rate_tensor(self.model_optimizer)

    # ------------------------------------------------------- checkpointing
    def save_own_variables(self, store):
        """Keras weight files (``save_weights``, ``model.save``, ModelCheckpoint): the table's state (KERAS-8)."""
        self.table_checkpoint.save_to_keras_store(store)

    def load_own_variables(self, store):
        self.table_checkpoint.load_from_keras_store(store)

    def __repr__(self):
        return f"Embedding({self.table_name!r}, dim={self.dim}, size={self.store.size()}, backend={self.backend!r})"
