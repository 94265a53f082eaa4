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
The store call itself (``store_call.py``) is the one the fused call, the graph
modifier and the Keras layer make too.  A training lookup hands its step and
token forward as a ``LookupHandle`` on the graph's state (``graph_state.py``),
which the apply takes as graph inputs (``handed_forward``).
"""
from __future__ import annotations

import logging

import numpy as np
import tensorflow as tf

from . import fused_lookup
from .config_initializer import ConfigInitializer, log_once
from .constants import (ASCEND_SPARSE_LOOKUP_ID_OFFSET, ASCEND_SPARSE_LOOKUP_LOCAL_EMB, ASCEND_TIMESTAMP,
                        MAX_INT32)
from .distributed import ordered
from .feature_spec import MERGED_IDS_KEY, TIMESTAMP_KEY, FeatureSpec, get_feature_spec, register_thresholds
from .graph_modifier import iterator_output_of, record_lookup
from .graph_state import LookupHandle, existing_state, graph_of, graph_state
from .keys import int64_keys
from .store_call import MergedShare, Member, build_call  # noqa: F401 -- MergedShare: re-exported
from .table import SparseTable

GRADIENT_DENSE_SHAPE = 2**62  # the IndexedSlices' nominal first dimension: indices are keys, not rows

_INTERNAL_KWARGS = {"feature_spec_name_ids_dict", "multi_lookup", "lookup_ids"}


def table_of_keys(tensor):
    """The table whose training lookup produced this unique-keys tensor, or None."""
    state = existing_state(graph_of(tensor))
    handle = next((h for h in (state.training_lookups if state is not None else []) if h.unique_keys is tensor), None)
    return handle.table if handle is not None else None


def handed_forward(table, keys):
    """What the training lookups of ``table`` behind the gradient keys ``keys`` handed forward to its
    apply: ``(step, token)`` -- the step they used (an int64 scalar tensor, an output of their store
    call, so lookup and apply of one step agree by data flow, never by state a later lookup could have
    changed, TF-14) and, when ``keys`` are one lookup's unique keys (that very tensor: one lookup's
    gradient, or the recipe's id offset), its result token (TF-18); else None, and the apply sends the
    keys, which the store merges.

    The lookups are those the graph's state holds (``GraphState.training_lookups``): the one whose
    unique keys ``keys`` are, else those whose unique keys ``keys`` are computed from (TF's
    concatenation of several lookups' gradients, a script's transformation), else -- keys from no
    lookup (a rewritten optimizer update, GRAPH-5; eager tensors, which have no inputs) -- the table's
    training lookups in this graph (eagerly, its latest).  Several: the latest step (with a global step
    they are all equal)."""
    state = existing_state(graph_of(keys))
    by_keys = {h.unique_keys.ref(): h for h in (state.training_lookups if state is not None else [])}
    exact = by_keys.get(keys.ref())
    if exact is not None and exact.table is table:
        return exact.step, exact.token
    mine = ([h for h in _lookups_above(by_keys, keys) if h.table is table]
            or [h for h in by_keys.values() if h.table is table])
    if not mine:
        raise ValueError(f"table {table.table_name!r}: grad: no training sparse_lookup of this table in this graph; "
                         f"build the lookups and apply_gradients in one graph")
    steps = [h.step for h in mine]
    return (steps[0] if len(steps) == 1 else tf.reduce_max(tf.stack(steps))), None


def _lookups_above(by_keys: dict, keys) -> list[LookupHandle]:
    """The lookups (``by_keys``: by their unique-keys tensor) whose unique keys ``keys`` are computed
    from, up its inputs, stopping at each lookup's keys; none eagerly, where tensors have no inputs."""
    found, seen, frontier = [], set(), [keys]
    while frontier and not tf.executing_eagerly():
        tensor = frontier.pop()
        handle = by_keys.get(tensor.ref())
        if handle is not None:
            found.append(handle)
            continue
        for source in tensor.op.inputs:
            if source.ref() not in seen:
                seen.add(source.ref())
                frontier.append(source)
    return found


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


class StoreCall:
    """One store call for a table's merged ids, and every lookup's share of it.  ``op`` is the
    table's own numpy_function, or None when the table's lookup is part of its batch's fused call
    (TF-20) or ran eagerly; ``outputs`` are the six tensors the graph reads either way, ``merged``
    the ids; ``share`` is set by the graph modifier (``store_call.MergedShare``)."""

    def __init__(self, op, table, member: Member, outputs, embeddings, positions):
        self.op, self.table, self.outputs = op, table, list(outputs)   # table: for the serving export (KERAS-10)
        self.merged, self.share = member.merged, member.share
        self.step, self.stamp, self.has_timestamp, self.pad_to = (member.step, member.stamp, member.has_timestamp,
                                                                   member.pad_to)
        self.unique_keys, self.rows, self.inverse, self.admitted = self.outputs[:4]
        self.embeddings, self.positions = embeddings, positions


def step_ops(graph) -> list:
    """The store lookups built in ``graph`` (each with ``.op``, its numpy_function or None when
    fused, ``.outputs``, ``.merged`` and ``.table``)."""
    state = existing_state(graph)
    return list(state.store_calls.values()) if state is not None else []


def _step_op(table, merged, is_train, timestamp, pad_to, segments, fused: bool):
    state = graph_state()
    cache_key = (merged.ref(), is_train)
    if cache_key in state.store_calls:
        return state.store_calls[cache_key]
    global_step = tf.compat.v1.train.get_global_step() if is_train else None
    step = tf.cast(global_step, tf.int64) if global_step is not None else tf.constant(-1, tf.int64)
    has_timestamp = timestamp is not None
    stamp = tf.cast(timestamp, tf.int64) if has_timestamp else tf.constant(0, tf.int64)
    if fused:
        member = None
        outputs = fused_lookup.join(table, merged, step, stamp, has_timestamp, pad_to, is_train)
    else:
        member = Member(table, merged, step, stamp, has_timestamp, pad_to)
        outputs = build_call([member], is_train)
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
        graph_state(graph_of(unique_keys)).hand_forward(LookupHandle(table, unique_keys, step_used, token))
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
    if member is None:                  # fused: the call's inputs, for the graph modifier and the export
        member = Member(table, merged, step, stamp, has_timestamp, pad_to)
    call = StoreCall(None if eager or fused else unique_keys.op, table, member, outputs, embeddings, positions)
    if not eager:
        state.store_calls[cache_key] = call
    return call


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
