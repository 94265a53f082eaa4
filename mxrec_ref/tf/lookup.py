"""`sparse_lookup` (reference 1.4): one store call per table per step and mode.

Forward: a ``tf.numpy_function`` sends the table's (merged) ids of the batch
to the store, which counts, admits, places and returns the unique rows and
the inverse index; each lookup gathers its own slice of the inverse.  The
FeatureSpec lookups of one batch share one numpy_function for all their tables
(TF-20, ``fused_lookup.py``).
Backward: the gradient of each lookup is summed per unique key and returned
for the table's proxy variable as ``IndexedSlices(values, indices=keys)``;
the sparse optimizer hands those to ``store.apply_gradients``: with the
lookup's own result when the gradient's keys are that lookup's unique keys
(TF-18: the lookup op outputs a token for its result), else with the keys,
which the store merges (several lookups of a table).
"""
from __future__ import annotations

import logging
import weakref

import numpy as np
import tensorflow as tf

from . import fused_lookup
from .config_initializer import ConfigInitializer, log_once
from .constants import (ASCEND_SPARSE_LOOKUP_ID_OFFSET, ASCEND_SPARSE_LOOKUP_LOCAL_EMB, ASCEND_TIMESTAMP,
                        MAX_INT32)
from .distributed import ordered
from .feature_spec import MERGED_IDS_KEY, TIMESTAMP_KEY, FeatureSpec, get_feature_spec, register_thresholds
from .graph_modifier import iterator_output_of, record_lookup
from .keys import int64_keys
from .table import NO_RESULT, SparseTable

GRADIENT_DENSE_SHAPE = 2**62  # the IndexedSlices' nominal first dimension: indices are keys, not rows

# Per graph (weakly, so a dropped graph and its tensors are freed):
# (merged ids, is_train) -> the step op, so lookups of one table share one store call
_STEP_OPS: "weakref.WeakKeyDictionary[tf.Graph, dict]" = weakref.WeakKeyDictionary()
# unique-keys tensor -> (table, the step tensor of its training lookup, its result token): for the
# dynamic-expansion recipe (ASCEND_SPARSE_LOOKUP_ID_OFFSET), the step of the apply and the result it reuses
_KEYS_TO_TABLE: "weakref.WeakKeyDictionary[tf.Graph, dict]" = weakref.WeakKeyDictionary()


_INTERNAL_KWARGS = {"feature_spec_name_ids_dict", "multi_lookup", "lookup_ids"}


def table_of_keys(tensor):
    """The table whose lookup produced this unique-keys tensor, or None."""
    entry = _KEYS_TO_TABLE.get(_graph_of(tensor), {}).get(tensor.ref())
    return entry[0] if entry else None


def _graph_of(tensor):
    return tf.compat.v1.get_default_graph() if tf.executing_eagerly() else tensor.graph


def train_step_of(table, keys):
    """The step the training lookups feeding ``keys`` used (an int64 scalar
    tensor), for the sparse apply of the same step: it comes from the lookup op
    by data flow, never from state a later lookup could have changed.

    ``keys`` are the gradient's indices: one lookup's unique keys, or the
    concatenation TF builds for several lookups of the table; the lookups are
    found by walking up from them.  Where no lookup is above them (a rewritten
    optimizer update, or eager execution where tensors have no inputs), the
    table's training lookups in this graph give it.  Several lookups: the
    latest step (with a global step they are all equal)."""
    registered = _KEYS_TO_TABLE.get(_graph_of(keys), {})
    steps, seen, frontier = [], set(), [keys]
    while frontier and not tf.executing_eagerly():
        tensor = frontier.pop()
        entry = registered.get(tensor.ref())
        if entry is not None:
            if entry[0] is table:
                steps.append(entry[1])
            continue
        for source in tensor.op.inputs:
            if source.ref() not in seen:
                seen.add(source.ref())
                frontier.append(source)
    if not steps:
        steps = [entry[1] for entry in registered.values() if entry[0] is table]
    if not steps:
        raise ValueError(f"table {table.table_name!r}: grad: no training sparse_lookup of this table in this graph; "
                         f"build the lookups and apply_gradients in one graph")
    return steps[0] if len(steps) == 1 else tf.reduce_max(tf.stack(steps))


def result_token_of(table, keys):
    """TF-18: the result token of the training lookup of ``table`` whose unique keys ``keys`` are
    (the very tensor: one lookup's gradient, or the recipe's id offset), or None -- then the
    apply sends keys, e.g. the concatenated keys of several lookups, which the store merges."""
    entry = _KEYS_TO_TABLE.get(_graph_of(keys), {}).get(keys.ref())
    return entry[2] if entry is not None and entry[0] is table else None


def sparse_lookup(hashtable, ids, send_count=None, is_train=True, name=None, modify_graph=False, batch=None,
                  access_and_evict_config=None, is_grad=True, serving_default_value=None, **kwargs):
    instance = ConfigInitializer.get_instance()
    _note_dim(hashtable, kwargs.pop("dim", None))
    unknown = sorted(set(kwargs) - _INTERNAL_KWARGS)
    if unknown:
        raise TypeError(f"sparse_lookup: unknown arguments {unknown}")
    if kwargs:
        log_once("sparse_lookup:internal", f"sparse_lookup: {sorted(kwargs)} are mxRec-internal arguments (set by "
                 f"its graph modifier); accepted and ignored: merging is done by the insert function / the rewrite")
    if not isinstance(hashtable, SparseTable):
        raise TypeError(f"sparse_lookup: hashtable: must be a table from create_table, got {type(hashtable).__name__}")
    table = hashtable
    pad_to = _check_send_count(table, send_count, instance.use_static)
    if isinstance(ids, FeatureSpec):
        if ids.table_name != table.table_name:
            raise ValueError(f"table {table.table_name!r}: ids: FeatureSpec {ids.name!r} belongs to table "
                             f"{ids.table_name!r}")
        if batch is None:
            raise ValueError(f"table {table.table_name!r}: batch: FeatureSpec mode needs batch= (the dict from "
                             f"iterator.get_next() after the insert function)")
        merged_key = MERGED_IDS_KEY.format(table=table.table_name)
        if merged_key not in batch:
            raise ValueError(f"table {table.table_name!r}: batch: the batch was not mapped through "
                             f"get_asc_insert_func(...) for this table")
        register_thresholds(ids)
        group = _group_of(table, ids, batch)
        feature = batch[ids.index_key]
        segments = [batch[s.index_key] for s in group]   # the merged ids are these, concatenated
        segment = group.index(ids)
        merged = batch[merged_key]
        timestamp = batch.get(TIMESTAMP_KEY)
        instance.train_params_config.set_target_batch(bool(is_train), batch)
    elif isinstance(ids, (tf.Tensor, tf.SparseTensor, np.ndarray)) or hasattr(ids, "dtype"):
        if isinstance(ids, tf.SparseTensor):
            raise TypeError(f"table {table.table_name!r}: ids: tf.SparseTensor ids are not supported")
        if not modify_graph:
            raise ValueError(f"table {table.table_name!r}: modify_graph: a tensor of ids needs modify_graph=True "
                             f"(or pass a FeatureSpec with batch=)")
        feature = tf.convert_to_tensor(ids)
        if not feature.dtype.is_integer:
            raise TypeError(f"table {table.table_name!r}: ids: must be an integer tensor, got {feature.dtype.name}")
        if access_and_evict_config is not None:
            register_thresholds(get_feature_spec(table.table_name, access_and_evict_config))
        merged = tf.reshape(int64_keys(table.table_name, feature), [-1])      # LKP-7
        segments, segment = [feature], 0
        timestamp = _mode_timestamp(table, feature, bool(is_train))
    else:
        raise TypeError(f"table {table.table_name!r}: ids: must be a FeatureSpec or a tensor, got {type(ids).__name__}")
    table.note_lookup(bool(is_train))
    with tf.name_scope(f"{table.table_name}/{name or 'sparse_lookup'}"):
        fused = isinstance(ids, FeatureSpec) and fused_lookup.available()     # TF-20
        step = _step_op(table, merged, bool(is_train), timestamp, pad_to, segments, fused)
        if not isinstance(ids, FeatureSpec) and not tf.executing_eagerly():
            record_lookup(table, feature, step, bool(is_train), bool(is_grad))
        shape = tf.concat([tf.shape(feature, out_type=tf.int64), [table.emb_size]], axis=0)
        embeddings = tf.reshape(step.embeddings[segment], shape)
        if feature.shape.is_fully_defined():
            embeddings.set_shape(feature.shape.concatenate([table.emb_size]))
        if serving_default_value is not None:
            positions = tf.reshape(step.positions[segment], tf.shape(feature))
            default = tf.broadcast_to(tf.cast(serving_default_value, tf.float32), tf.shape(embeddings))
            embeddings = tf.where(tf.gather(step.admitted, positions)[..., None], embeddings, default)
        if not is_grad:
            embeddings = tf.stop_gradient(embeddings)
        return embeddings


def _note_dim(table, dim) -> None:
    """``dim=``: mxRec's sparse_lookup takes it among its ``**kwargs`` and never reads it
    (TF-32): the table's dim shapes the result.  Accepted; a different value is worth a warning."""
    if dim is None:
        return
    emb_size = getattr(table, "emb_size", None)
    if dim != emb_size:
        log_once("sparse_lookup:dim-differs", f"sparse_lookup: dim={dim!r} is unused, as in mxRec: the result has the "
                 f"table's dim ({emb_size})", logging.WARNING)
    else:
        log_once("sparse_lookup:dim", "sparse_lookup: dim is unused, as in mxRec: the table's dim shapes the result")


def _mode_timestamp(table, feature, is_train: bool):
    """The ASCEND_TIMESTAMP entry of this lookup's own batch: the one computed from
    the iterator its ids come from.  A training lookup whose iterator has none takes
    the first entry (one timestamp for the whole graph); an evaluation lookup then
    takes none, since evaluation never reads the clock (LKP-2) -- it must not read
    another mode's (possibly replaced) iterator."""
    stamps = tf.compat.v1.get_collection(ASCEND_TIMESTAMP)
    if not stamps or tf.executing_eagerly():
        return stamps[0] if stamps else None
    source = iterator_output_of(feature)
    mine = [s for s in stamps if source is not None and iterator_output_of(s) is source]
    stamp = mine[0] if mine else (stamps[0] if is_train else None)
    if stamp is not None:
        check_scalar_timestamp(table.table_name, "ASCEND_TIMESTAMP", tf.convert_to_tensor(stamp).shape)
    return stamp


def check_scalar_timestamp(table_name: str, source: str, shape) -> None:
    """A batch has one data timestamp (mxRec's ReturnTimestamp op returns a scalar);
    a per-example vector is rejected when the graph is built, never inside a step."""
    if shape.rank not in (0, None):
        raise ValueError(f"table {table_name!r}: timestamp: {source} must be a scalar (rank 0) per batch, got shape "
                         f"{shape}; build it with import_host_pipeline_ops().return_timestamp(...) or reduce it "
                         f"(e.g. tf.reduce_max)")


def _check_send_count(table, send_count, static: bool):
    if send_count is None:
        if static:
            raise ValueError(f"table {table.table_name!r}: send_count: static shape mode "
                             f"(init(use_dynamic=False)) needs send_count")
        return None
    if isinstance(send_count, bool) or not isinstance(send_count, int) or not 1 <= send_count <= MAX_INT32:
        raise ValueError(f"table {table.table_name!r}: send_count: must be an integer in [1, {MAX_INT32}], "
                         f"got {send_count!r}")
    if not static:
        return None  # ignored in dynamic mode, as in mxRec
    if table.send_count is not None and table.send_count != send_count:
        raise ValueError(f"table {table.table_name!r}: send_count: lookups of one table must share send_count "
                         f"({table.send_count} vs {send_count})")
    table.send_count = send_count
    return send_count


def _group_of(table, spec, batch):
    """The specs the insert function concatenated for this table, in order."""
    groups = table.merged_specs
    group = groups.get(True if True in groups and spec in groups[True] else False, [])
    if spec not in group:
        raise ValueError(f"table {table.table_name!r}: ids: FeatureSpec {spec.name!r} was not given to "
                         f"get_asc_insert_func, so its ids are not in the batch")
    return group


class _StepOp:
    """One store call for a table's merged ids, and every lookup's share of it.  ``op`` is the
    table's own numpy_function, or None when the table's lookup is part of its batch's fused call
    (TF-20); ``outputs`` are the six tensors the graph reads either way, ``merged`` the ids."""

    def __init__(self, op, share, unique_keys, rows, inverse, admitted, embeddings, positions, step, stamp,
                 has_timestamp, pad_to):
        self.op, self.share, self.has_timestamp, self.pad_to = op, share, has_timestamp, pad_to
        self.unique_keys, self.rows, self.inverse, self.admitted = unique_keys, rows, inverse, admitted
        self.embeddings, self.positions = embeddings, positions
        self.step, self.stamp = step, stamp


class MergedShare:
    """Set by the graph modifier: this lookup reads segment ``segment`` of the
    table's merged store call (``source.current``) instead of calling the store."""

    def __init__(self):
        self.source = None
        self.segment = 0


def step_ops(graph) -> list:
    """The store lookups built in ``graph`` (each with ``.op``, its numpy_function or None when
    fused, ``.outputs``, ``.merged`` and ``.table``)."""
    return list(_STEP_OPS.get(graph, {}).values())


def _step_op(table, merged, is_train, timestamp, pad_to, segments, fused: bool):
    cache = _STEP_OPS.setdefault(tf.compat.v1.get_default_graph(), {})
    cache_key = (merged.ref(), is_train)
    if cache_key in cache:
        return cache[cache_key]
    global_step = tf.compat.v1.train.get_global_step() if is_train else None
    step = tf.cast(global_step, tf.int64) if global_step is not None else tf.constant(-1, tf.int64)
    has_timestamp = timestamp is not None
    stamp = tf.cast(timestamp, tf.int64) if has_timestamp else tf.constant(0, tf.int64)
    share = MergedShare()

    def run(ids, step_value, stamp_value):
        if share.source is not None:          # merged by the graph modifier: read this lookup's segment
            result, offsets, step_used = share.source.current
            low, high = offsets[share.segment], offsets[share.segment + 1]
            # one segment of several: the gradients of the segments are concatenated and sent as keys
            alone = is_train and len(share.source.records) == 1
            return (result.unique_keys, result.rows, result.inverse.reshape(-1)[low:high], result.admitted,
                    np.int64(step_used), np.int64(table.keep_result(result) if alone else NO_RESULT))
        result, step_used = table.lookup_batch(ids, is_train=is_train, step=step_value,
                                               timestamp=stamp_value if has_timestamp else None, pad_to=pad_to)
        return (result.unique_keys, result.rows, result.inverse.reshape(-1), result.admitted, np.int64(step_used),
                np.int64(table.keep_result(result) if is_train else NO_RESULT))

    if fused:
        outputs = fused_lookup.join(table, merged, step, stamp, has_timestamp, pad_to, is_train)
    else:
        outputs = tf.numpy_function(run, [merged, step, stamp], list(fused_lookup.OUTPUTS), stateful=True,
                                    name="store_lookup")
        ordered(outputs[0], "train" if is_train else "eval")    # SHARD-12: one collective order on every rank
    unique_keys, rows, inverse, admitted, step_used, token = outputs
    unique_keys.set_shape([pad_to])
    rows.set_shape([pad_to, table.emb_size])
    inverse.set_shape(merged.shape)
    admitted.set_shape([pad_to])
    step_used.set_shape([])
    token.set_shape([])
    if is_train:
        tf.compat.v1.add_to_collection(ASCEND_SPARSE_LOOKUP_LOCAL_EMB, rows)
        tf.compat.v1.add_to_collection(ASCEND_SPARSE_LOOKUP_ID_OFFSET, unique_keys)
        registered = _KEYS_TO_TABLE.setdefault(_graph_of(unique_keys), {})
        if tf.executing_eagerly():        # eager tensors have no inputs to walk: keep the latest lookup only
            for ref in [r for r, entry in registered.items() if entry[0] is table]:
                del registered[ref]
        registered[unique_keys.ref()] = (table, step_used, token)
    # One gather for every lookup of the table, split into the lookups' shares:
    # the gradient of a split is one concat, and the custom gradient below sums
    # it per unique key in one op (instead of one small graph per lookup).
    all_embeddings = _embed(table.variable.handle, rows, unique_keys, inverse)
    sizes = tf.stack([tf.size(s, out_type=tf.int64) for s in segments])
    if len(segments) == 1:
        embeddings, positions = [all_embeddings], [inverse]
    else:
        embeddings = tf.split(all_embeddings, sizes, num=len(segments), axis=0)
        positions = tf.split(inverse, sizes, num=len(segments), axis=0)
    eager = tf.executing_eagerly()      # an eager lookup has run already: no op, nothing to share or cache
    step_op = _StepOp(None if eager or fused else unique_keys.op, share, unique_keys, rows, inverse, admitted,
                      embeddings, positions, step, stamp, has_timestamp, pad_to)
    step_op.table = table               # for the serving export (tf/export.py, KERAS-10)
    step_op.outputs, step_op.merged = list(outputs), merged
    if not eager:
        cache[cache_key] = step_op
    return step_op


@tf.custom_gradient
def _embed(handle, rows, unique_keys, positions):
    """rows[positions] ([n, dim]).  The gradient, summed per unique key, goes to
    the table's proxy as keyed IndexedSlices and to ``rows`` as a dense tensor
    (the local-embedding recipe): the same values either way."""
    def grad(dy):
        per_key = tf.math.unsorted_segment_sum(dy, positions, tf.shape(unique_keys, out_type=tf.int64)[0])
        sparse = tf.IndexedSlices(per_key, unique_keys,
                                  dense_shape=tf.stack([tf.constant(GRADIENT_DENSE_SHAPE, tf.int64),
                                                        tf.shape(rows, out_type=tf.int64)[1]]))
        return sparse, per_key, None, None
    return tf.gather(rows, positions), grad
