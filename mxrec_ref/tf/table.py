"""`create_table` and the table object the TF layer hands around (reference 1.3).

A ``SparseTable`` holds mxRec's create_table arguments and, once the graph
first runs (or ``start_asc_pipeline`` is called), the store behind it.  Its
``variable`` is a one-row, never-initialised proxy: lookups take its handle as
an input so ``tf.gradients(loss, table.variable)`` returns the table's sparse
gradient as ``IndexedSlices`` whose indices are *keys* (not rows), which the
sparse optimizer sends to the store.
"""
from __future__ import annotations

import collections
import dataclasses
import itertools
import os
import threading

import numpy as np
import tensorflow as tf

from ..config import Initializer, TableConfig
from ..distributed.comm import world
from ..errors import MxrecError, UsageError
from ..store import LookupResult, open_store
from . import fatal
from .config_initializer import ConfigInitializer, log_once
from .constants import ASCEND_GLOBAL_HASHTABLE_COLLECTION
from .feature_spec import bind_waiting_specs
from .graph_state import existing_state, graph_state
from .key_pipeline import AheadQueue
from .lookup_limit import count_lookup, lookups_in_graph

NO_RESULT = -1      # the result token of a lookup whose result is not kept (evaluation, or merged segments)
KEPT_RESULTS = 8    # training results kept per table for their applies (TF-18); the oldest go first


class SparseTable:
    def __init__(self, *, name, dim, key_dtype, initializer, device_vocabulary_size, host_vocabulary_size,
                 ssd_vocabulary_size, ssd_data_path, is_save, is_dp, init_param, emb_initializer):
        self.table_name = name
        self.emb_size = self.embedding_size = dim
        self.key_dtype = key_dtype
        self.emb_initializer = emb_initializer
        self.init_param = init_param
        self.is_save = is_save
        self.is_dp = is_dp
        self.is_hbm = host_vocabulary_size == 0
        self.send_count = None
        self.padding_keys, self.padding_keys_mask, self.padding_keys_len = None, False, None   # not supported
        self.slice_device_vocabulary_size = device_vocabulary_size     # one rank: the whole table
        self.slice_host_vocabulary_size = host_vocabulary_size
        self.slice_ssd_vocabulary_size = ssd_vocabulary_size
        self.merged_specs: dict = {}    # is_training -> the FeatureSpecs the insert function merged, in order
        self._config_args = table_config_args(
            name=name, dim=dim, key_dtype=key_dtype, initializer=initializer,
            device_vocabulary_size=device_vocabulary_size, host_vocabulary_size=host_vocabulary_size,
            ssd_vocabulary_size=ssd_vocabulary_size, ssd_data_path=ssd_data_path, is_save=is_save,
            init_param=init_param)
        self._admission = None          # (access_threshold, eviction_threshold, faae_coefficient)
        self._store = None
        self.store_optimizer = None     # the SparseOptimizer the store was opened with (None: its default)
        self.all2all_gradients_op = "sum_gradients"   # create_table sets it; it matters on several ranks (SHARD-5)
        self._store_lock = threading.Lock()
        self._kept = KeptResults()      # training lookup results awaiting their applies (TF-18)
        self.ahead = AheadQueue()       # training batches the input pipeline resolved ahead (PIPE-8)
        self.train_lookups_run = 0      # the step of a training lookup when the graph has no global step
        self.last_train_step = 0
        self.config = TableConfig(**self._config_args)   # validates now, not at first run
        # the table's proxy in each graph lives on the graph's state (GraphState.proxies): a table created again
        # in a new graph (an Estimator builds one per call) binds that graph to this table and its store (TF-21)
        self._latest_variable = self._new_proxy()

    def _new_proxy(self):
        variable = tf.compat.v1.get_variable(
            self.table_name, shape=[1, self.emb_size], dtype=tf.float32, initializer=tf.zeros_initializer(),
            trainable=False, use_resource=True, collections=[ASCEND_GLOBAL_HASHTABLE_COLLECTION])
        graph_state().proxies[self] = variable
        return variable

    @property
    def variable(self):
        """The table's one-row proxy in the current graph (the latest one's where the current graph has none:
        a ``tf.function`` graph, eager code)."""
        state = existing_state()
        return state.proxies.get(self, self._latest_variable) if state is not None else self._latest_variable

    def bound_in_current_graph(self) -> bool:
        state = existing_state()
        return state is not None and self in state.proxies

    def bind_graph(self, config_args: dict, all2all_gradients_op: str) -> "SparseTable":
        """``create_table`` again in a new graph (TF-21): the same configuration binds the graph to this
        table -- the same store and contents -- through a new proxy; another configuration is an error
        naming the first parameter that differs (TF-22), raised before anything changes."""
        wanted = dict(config_args, all2all_gradients_op=all2all_gradients_op)
        have = dict(self._config_args, all2all_gradients_op=self.all2all_gradients_op)
        for parameter in wanted:
            if wanted[parameter] != have[parameter]:
                raise ValueError(f"table {self.table_name!r}: {parameter}: the table exists with {have[parameter]!r}; "
                                 f"creating it again in a new graph binds it to the same store, so {parameter} must "
                                 f"be the same, got {wanted[parameter]!r}")
        self._latest_variable = self._new_proxy()
        return self

    # ------------------------------------------------------------ config
    def set_admission(self, access_threshold, eviction_threshold, faae_coefficient, source: str) -> None:
        """Thresholds from a FeatureSpec or access_and_evict_config; every source
        of one table must agree (mxRec: 'All FeatureSpecs of one table must share thresholds')."""
        wanted = (access_threshold, eviction_threshold, faae_coefficient)
        if self._admission is not None and self._admission != wanted:
            raise ValueError(f"table {self.table_name!r}: access_threshold: {source} sets thresholds {wanted} but "
                             f"the table already has {self._admission}; all feature specs of a table must agree")
        if self._store is not None and self._admission != wanted:
            raise ValueError(f"table {self.table_name!r}: access_threshold: the table is already running; "
                             f"thresholds cannot change now")
        TableConfig(**self._config_args, access_threshold=access_threshold, eviction_threshold=eviction_threshold,
                    faae_coefficient=faae_coefficient)   # raises ConfigError naming the field
        self._admission = wanted
        self.config = self.frozen_config()

    def note_lookup(self, is_train: bool) -> None:
        count_lookup(self, self.table_name, is_train, "sparse_lookup")    # per graph, not per process (TF-17)

    @property
    def multi_lookup_times(self) -> dict[bool, int]:
        """mxRec's attribute: this table's lookups per mode in the current graph (TF-17)."""
        return lookups_in_graph(self)

    def frozen_config(self) -> TableConfig:
        """The table's config as it stands now: its arguments, the thresholds its feature specs set and the
        send_count of its lookups (what its store opens with; the planner sizes it)."""
        extra = {}
        if self._admission is not None:
            extra = dict(zip(("access_threshold", "eviction_threshold", "faae_coefficient"), self._admission))
        return TableConfig(**self._config_args, send_count=self.send_count, **extra)

    # ------------------------------------------------------------- store
    @property
    def store(self):
        """The table's store, created on first use with the global sparse optimizer."""
        if self._store is None:
            optimizer = ConfigInitializer.get_instance().optimizer_instance
            self.open_store(optimizer.store_optimizer if optimizer else None)
        return self._store

    @property
    def opened_store(self):
        """The table's store if it is open, else None (reading this opens nothing)."""
        return self._store

    def open_store(self, store_optimizer) -> None:
        """Create the store now with ``store_optimizer`` (None: the store's default), unless it exists.
        A process that only evaluates or predicts has no sparse optimizer: its restore opens each store
        with the checkpoint's optimizer, so the slots load too (TF-21)."""
        with self._store_lock:
            if self._store is None:
                instance = ConfigInitializer.get_instance()
                self.config = self.frozen_config()
                self._store = open_store(   # on several ranks: this rank's shard or replica (SHARD-2, SHARD-16)
                    self.config, store_optimizer, backend=instance.backend, comm=world(), replicated=self.is_dp,
                    divide_gradients=self.all2all_gradients_op == "sum_gradients_and_div_by_ranksize")
                self.store_optimizer = store_optimizer

    def lookup_batch(self, ids, *, is_train: bool, step: int, timestamp=None, pad_to=None) -> tuple[LookupResult, int]:
        """The one place the TF layer calls ``store.lookup``: one call per table,
        mode and batch (the merged ids of every lookup of the table).

        ``step`` < 0 means the graph has no global step: a training lookup then
        takes this table's count of training lookups run (TF-5).  ``timestamp``
        is the batch's data timestamp, or None.  Returns the result and the step
        the lookup used, which the sparse apply of the same step receives by
        data flow."""
        step = int(step)
        if step < 0:
            step = self.train_lookups_run
        if timestamp is not None and np.ndim(timestamp) != 0:   # rank unknown at graph construction
            error = UsageError(f"table {self.table_name!r}: timestamp: the batch timestamp must be a scalar, got "
                               f"shape {np.shape(timestamp)}; build it with import_host_pipeline_ops()."
                               f"return_timestamp(...) or reduce it (e.g. tf.reduce_max)")
            fatal.note(error)
            raise error
        try:
            ahead = self.ahead.take(np.asarray(ids)) if is_train else None   # queued while the switch was on
            if not is_train:
                self.ahead.discard(np.asarray(ids))     # a dataset mapped for training, evaluated (PIPE-9)
            if ahead is not None:       # its key work was done in the input pipeline (PIPE-8)
                try:
                    result = self.store.gather(ahead, step=step, pad_to=pad_to,
                                               timestamp=int(timestamp) if timestamp is not None else None)
                finally:
                    self.ahead.gathered()
            else:
                result = self.store.lookup(ids, train=is_train, step=step if is_train else None,
                                           timestamp=int(timestamp) if timestamp is not None and is_train else None,
                                           pad_to=pad_to)
        except MxrecError as error:
            fatal.note(error)
            raise
        if is_train:
            self.train_lookups_run += 1
            self.last_train_step = step      # read by EvictHook for its step interval
        return result, step

    def keep_result(self, result: LookupResult) -> int:
        """Keep a training lookup's result for the apply of its gradient (TF-18); returns its token."""
        return self._kept.keep(result)

    def take_result_for(self, token: int, keys) -> LookupResult | None:
        """The result kept under ``token``, removed, when its unique keys are the gradient's ``keys``;
        else None (TF-18)."""
        return self._kept.take_for(token, keys)

    def continue_clock(self, lookups_run: int | None) -> None:
        """After a restore, training lookups in a graph without a global step go on
        from the checkpoint, not from 0 (TF-5), so LazyAdam's bias correction and a
        step clock continue where ``train`` left off: from the count of training
        lookups saved with the table, or (a checkpoint without it) its step clock."""
        if lookups_run is None:
            clock, source = self.store.table_clock()   # the checkpoint's: the load was just done
            if source != "step" or clock is None:
                return
            lookups_run = clock + 1
        self.train_lookups_run = int(lookups_run)
        self.last_train_step = max(int(lookups_run) - 1, 0)

    def size(self) -> int:
        return 0 if self._store is None else self._store.size()

    def capacity(self) -> int:
        if self._store is not None:
            return self._store.capacity()
        # before the first run: what the store will hold (device + host + SSD tiers; reference 2.2)
        return self.config.device_vocabulary_size if self.config.dynamic_expansion else self.config.table_capacity

    def __repr__(self):
        return f"SparseTable({self.table_name!r}, dim={self.emb_size}, size={self.size()})"


def table_config_args(*, name, dim, key_dtype, initializer, device_vocabulary_size, host_vocabulary_size,
                      ssd_vocabulary_size, ssd_data_path, is_save, init_param) -> dict:
    """The TableConfig arguments of a create_table call: what a table created again must repeat (TF-22)."""
    return dict(name=name, dim=dim, key_dtype=key_dtype.name, initializer=initializer,
                device_vocabulary_size=device_vocabulary_size, host_vocabulary_size=host_vocabulary_size,
                ssd_vocabulary_size=ssd_vocabulary_size, ssd_data_path=tuple(ssd_data_path), is_save=is_save,
                init_param=init_param, dynamic_expansion=ConfigInitializer.get_instance().use_dynamic_expansion)


class KeptResults:
    """One table's training lookup results awaiting their applies (TF-18, KERAS-12), by token: the
    lookup op outputs the token, the apply op takes it as an input and the apply reuses the result
    (its unique keys and row handles) instead of deduplicating and probing again.  Bounded, so a
    training lookup whose apply never runs (a step that only fetches the loss) costs nothing lasting.
    Only what the apply reads is kept (keys, admitted flags, row handles), not the rows or the inverse."""

    def __init__(self, limit: int = KEPT_RESULTS):
        self._results: collections.OrderedDict = collections.OrderedDict()
        self._tokens = itertools.count()
        self._lock = threading.Lock()
        self._limit = limit

    def keep(self, result: LookupResult) -> int:
        """Keep ``result``; returns its token (>= 0)."""
        slim = dataclasses.replace(result, rows=_NO_ROWS, inverse=_NO_INVERSE)
        with self._lock:
            token = next(self._tokens)
            self._results[token] = slim
            while len(self._results) > self._limit:
                self._results.popitem(last=False)
        return token

    def take(self, token: int) -> LookupResult | None:
        """The result kept under ``token``, removed, or None (NO_RESULT, or dropped as the oldest)."""
        if token < 0:
            return None
        with self._lock:
            return self._results.pop(int(token), None)

    def take_for(self, token: int, keys) -> LookupResult | None:
        """``take``, kept only when its unique keys are ``keys`` (the gradient's): else None, and the
        apply goes by key."""
        result = self.take(token)
        if result is not None and not np.array_equal(result.unique_keys, keys):
            return None
        return result


_NO_ROWS = np.zeros((0, 0), np.float32)
_NO_INVERSE = np.zeros(0, np.int64)
_NO_ROWS.flags.writeable = _NO_INVERSE.flags.writeable = False


def create_table(key_dtype, dim, name, emb_initializer, device_vocabulary_size=1, host_vocabulary_size=0,
                 ssd_vocabulary_size=0, ssd_data_path=(os.getcwd(),), is_save=True, is_dp=False, init_param=1.0,
                 all2all_gradients_op="sum_gradients", enable_merge=False, padding_keys=None, padding_keys_mask=False,
                 padding_keys_len=None, value_dtype=tf.float32, shard_num=1, fusion_optimizer_var=True,
                 hashtable_threshold=0, **kwargs) -> SparseTable:
    """mxRec's ``create_table``; argument names, defaults and ranges as reference 1.3."""
    instance = ConfigInitializer.get_instance()
    if not isinstance(name, str):
        raise TypeError(f"table {name!r}: name: must be a string")
    existing = instance.tables.get(name)
    if existing is None and instance.frozen:
        raise RuntimeError(f"table {name!r}: create_table: the pipeline has started; create tables before "
                           f"start_asc_pipeline()")
    if existing is not None and existing.bound_in_current_graph():
        raise ValueError(f"table {name!r}: name: a table with this name already exists in this graph")
    key_dtype = tf.as_dtype(key_dtype) if not isinstance(key_dtype, tf.DType) else key_dtype
    if key_dtype not in (tf.int64, tf.int32):
        raise TypeError(f"table {name!r}: key_dtype: must be tf.int64 or tf.int32, got {key_dtype.name}")
    if isinstance(dim, tf.TensorShape):
        if dim.rank != 1 or dim[0] is None:
            raise ValueError(f"table {name!r}: dim: a TensorShape dim must be 1-D and known, got {dim}")
        dim = int(dim[0])
    if tf.as_dtype(value_dtype) != tf.float32:
        raise TypeError(f"table {name!r}: value_dtype: only tf.float32 is supported")
    if all2all_gradients_op not in ("sum_gradients", "sum_gradients_and_div_by_ranksize"):
        raise ValueError(f"table {name!r}: all2all_gradients_op: must be 'sum_gradients' or "
                         f"'sum_gradients_and_div_by_ranksize', got {all2all_gradients_op!r}")
    if isinstance(shard_num, bool) or not isinstance(shard_num, int) or not 1 <= shard_num <= 8192:
        raise ValueError(f"table {name!r}: shard_num: must be an integer in [1, 8192], got {shard_num!r}")
    initializer = initializer_from_tf(emb_initializer, name)
    if is_dp:
        log_once("create_table:is_dp", f"table {name!r}: is_dp=True is accepted: on several ranks every rank holds "
                 f"the whole table (SHARD-16); in one process every table is whole on rank 0 already")
    for parameter, value, default in (("enable_merge", enable_merge, False), ("padding_keys", padding_keys, None),
                                      ("padding_keys_mask", padding_keys_mask, False),
                                      ("padding_keys_len", padding_keys_len, None)):
        if value != default:
            raise ValueError(f"table {name!r}: {parameter}: not supported by mxrec-ref (table merging and padding-key "
                             f"masks are not implemented); leave it at its default {default!r}")
    if "optimizer_list" in kwargs:
        log_once("create_table:optimizer_list", f"table {name!r}: optimizer_list (mxRec G1/G2) is accepted and "
                 f"ignored: the one global sparse optimizer trains every table, as in current mxRec")
    unknown = sorted(set(kwargs) - {"optimizer_list"})
    if unknown:
        raise TypeError(f"table {name!r}: create_table: unknown arguments {unknown}")
    if shard_num != 1:
        log_once("create_table:shard_num", f"table {name!r}: shard_num={shard_num} is accepted and ignored: NPU "
                 f"table sharding; the store is one table")
    if not fusion_optimizer_var or hashtable_threshold:
        log_once("create_table:fusion", f"table {name!r}: fusion_optimizer_var / hashtable_threshold are accepted "
                 f"and ignored: NPU memory-layout options; the store keeps slots beside each row")
    if instance.use_dynamic_expansion:
        host_vocabulary_size = ssd_vocabulary_size = 0   # mxRec resets them in this mode (reference 1.3)
    if existing is not None:       # a new graph (an Estimator's next call) binds to the table (TF-21, TF-22)
        table = existing.bind_graph(table_config_args(
            name=name, dim=dim, key_dtype=key_dtype, initializer=initializer,
            device_vocabulary_size=device_vocabulary_size, host_vocabulary_size=host_vocabulary_size,
            ssd_vocabulary_size=ssd_vocabulary_size, ssd_data_path=ssd_data_path, is_save=is_save,
            init_param=init_param), all2all_gradients_op)
        bind_waiting_specs(table)
        return table
    table = SparseTable(name=name, dim=dim, key_dtype=key_dtype, initializer=initializer,
                        device_vocabulary_size=device_vocabulary_size, host_vocabulary_size=host_vocabulary_size,
                        ssd_vocabulary_size=ssd_vocabulary_size, ssd_data_path=ssd_data_path, is_save=is_save,
                        is_dp=is_dp, init_param=init_param, emb_initializer=emb_initializer)
    table.all2all_gradients_op = all2all_gradients_op
    instance.tables[name] = table
    try:
        bind_waiting_specs(table)      # an insert function built before the table (TF-24)
    except BaseException:
        del instance.tables[name]
        raise
    return table


def initializer_from_tf(initializer, table: str) -> Initializer:
    """Read the distribution and seed of a TF (v1, v2 or Keras) initializer.
    Values are drawn by mxrec-ref's counter-based generator (INIT-1), so a key's
    first row is the same in every backend and run; only the distribution is TF's."""
    if isinstance(initializer, Initializer):
        return initializer
    if initializer is None:
        return Initializer(kind="truncated_normal", stddev=0.05)
    kind = type(initializer).__name__.lower()
    config = initializer.get_config() if hasattr(initializer, "get_config") else {}
    seed = config.get("seed") or 0
    if "truncated" in kind:
        return Initializer(kind="truncated_normal", mean=float(config.get("mean", 0.0)),
                           stddev=float(config.get("stddev", 0.05)), seed=int(seed))
    if "uniform" in kind:
        return Initializer(kind="uniform", minval=float(config.get("minval", -0.05)),
                           maxval=float(config.get("maxval", 0.05)), seed=int(seed))
    if "zeros" in kind:
        return Initializer(kind="constant", value=0.0)
    if "ones" in kind:
        return Initializer(kind="constant", value=1.0)
    if "constant" in kind:
        value = np.asarray(config.get("value", 0.0), dtype=np.float64)
        if value.size != 1:
            raise ValueError(f"table {table!r}: emb_initializer: only scalar constant initializers are supported")
        return Initializer(kind="constant", value=float(value.reshape(-1)[0]))
    raise TypeError(f"table {table!r}: emb_initializer: unsupported initializer {type(initializer).__name__}; "
                    f"use a truncated normal, random uniform, constant, zeros or ones initializer")


def set_threshold(threshold, emb_name=None, ids_name=None):
    """mxRec's run-time ``set_threshold`` op (ADM-9) for table ``emb_name``
    (``ids_name`` is accepted and ignored, as in mxRec).  Graph mode: returns
    the op; eagerly it runs at once."""
    tables = ConfigInitializer.get_instance().tables
    if emb_name not in tables:
        raise ValueError(f"set_threshold: emb_name: no table {emb_name!r} (tables: {sorted(tables)})")
    table = tables[emb_name]

    def apply(value):
        table.store.set_threshold(int(value))
        return np.int64(value)

    return tf.numpy_function(apply, [tf.cast(threshold, tf.int64)], tf.int64, stateful=True,
                             name=f"{emb_name}_set_threshold")
