"""Automatic graph modification (reference 2.4; spec/graph.md).

A script passes raw id tensors from its tf.data iterator to
``sparse_lookup(..., modify_graph=True)`` and, after building its gradients,
calls ``modify_graph_and_start_emb_cache()`` (or uses ``GraphModifierHook``).
The rewrite, per iterator feeding such lookups:

1. finds the ``IteratorGetNext`` above each lookup's ids and the dataset the
   iterator was made from (recorded when the iterator was created);
2. builds ``dataset.map(key_processing)``: the sub-graph between the
   iterator's outputs and the ids is re-imported into the map function, the
   ids are cast and flattened there, and the ids of all lookups of one table
   are concatenated -- key processing now runs in the input pipeline;
3. makes a new iterator of the same kind and rewires every consumer of the old
   one's outputs to it, and each lookup's store op to its pipeline ids;
4. adds one store call per table and mode on the merged ids; each lookup reads
   its segment of that call (control dependency), so several lookups of a
   table admit and count exactly as one FeatureSpec-mode lookup does.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import tensorflow as tf

from .key_pipeline import in_input_pipeline
from .keys import int64_keys
from .config_initializer import ConfigInitializer, log_once
from .constants import ASCEND_CUTTING_POINT_INITIALIZER, ASCEND_SPARSE_LOOKUP_ENTRANCE
from .distributed import ordered_before
from .graph_edit import add_control_inputs, replace_input, rewire_consumers
from .graph_state import existing_state, graph_state
from .store_call import call_store


@dataclass
class LookupRecord:
    table: object
    ids: tf.Tensor
    step: object              # lookup.StoreCall (duck-typed: the lookup module imports this one)
    is_train: bool
    graph: object
    is_grad: bool = True      # False: mxRec's is_grad=False, a training lookup with no gradient (TF-30)
    done: bool = False


@dataclass
class _TableGroup:
    """The modify-mode lookups of one table and mode on one iterator."""
    records: list = field(default_factory=list)
    current: tuple | None = None   # (LookupResult, offsets, step used) of this step's merged store call


def record_lookup(table, ids, step, is_train: bool, is_grad: bool = True) -> None:
    instance = ConfigInitializer.get_instance()
    instance.modify_graph = True
    instance.modify_records.append(LookupRecord(table, ids, step, is_train, ids.graph, is_grad))
    tf.compat.v1.add_to_collection(ASCEND_SPARSE_LOOKUP_ENTRANCE, ids)


# ------------------------------------------------------ iterator registry
def note_iterator(dataset, iterator, kind: str) -> None:
    """Remember the dataset a TF1 iterator reads (``patches.py`` calls this from
    ``make_one_shot_iterator`` / ``make_initializable_iterator`` after init())."""
    resource = getattr(iterator, "_iterator_resource", None)
    if resource is not None and not tf.executing_eagerly():
        graph_state(resource.graph).iterators[resource.op.name] = (dataset, kind)


def iterator_output_of(tensor):
    """The IteratorGetNext op a tensor is computed from (breadth-first up its
    inputs), or None."""
    seen, frontier = set(), [tensor.op]
    while frontier:
        op = frontier.pop(0)
        if op.type == "IteratorGetNext":
            return op
        for source in op.inputs:
            if source.op.name not in seen:
                seen.add(source.op.name)
                frontier.append(source.op)
    return None


# -------------------------------------------------------------- rewrite
def modify_graph_and_start_emb_cache(full_graph=None, dump_graph=False):
    """Rewrite the default graph (or ``full_graph``) so key processing runs in
    the input pipeline; returns the number of lookups moved."""
    instance = ConfigInitializer.get_instance()
    graph = full_graph if full_graph is not None else tf.compat.v1.get_default_graph()
    records = [r for r in instance.modify_records if not r.done]
    elsewhere = [r for r in records if r.graph is not graph]
    mine = [r for r in records if r.graph is graph]
    if not mine:
        if elsewhere:
            raise RuntimeError("modify_graph_and_start_emb_cache: the lookups with modify_graph=True are in another "
                               "graph than the default one; pass full_graph=")
        raise RuntimeError("modify_graph_and_start_emb_cache: no sparse_lookup(..., modify_graph=True) to modify")
    if graph.finalized:
        raise RuntimeError("modify_graph_and_start_emb_cache: the graph is finalized; modify it before the session "
                           "is created (GraphModifierHook does this in begin())")
    for record in mine:
        if record.is_train and record.is_grad:     # TF-30: an is_grad=False lookup has no gradient by design
            _check_gradients_built(graph, record)
    if dump_graph:
        tf.io.write_graph(graph.as_graph_def(), os.getcwd(), "graph_before_modify.pbtxt", as_text=True)
    by_iterator: dict = {}
    for record in mine:
        get_next = _find_get_next(record)
        by_iterator.setdefault(get_next, []).append(record)
    with graph.as_default():
        for get_next, group in by_iterator.items():
            _rewrite(graph, get_next, group, instance)
    for record in mine:
        record.done = True
    if dump_graph:
        tf.io.write_graph(graph.as_graph_def(), os.getcwd(), "graph_after_modify.pbtxt", as_text=True)
    return len(mine)


def _check_gradients_built(graph, record) -> None:
    embed = record.step.embeddings[0]
    while embed.op.type not in ("IdentityN",) and embed.op.inputs:
        embed = embed.op.inputs[0]
    marker = f"{embed.op.name}_grad"
    if not any(marker in op.name for op in graph.get_operations()):
        raise RuntimeError(f"table {record.table.table_name!r}: modify_graph: build the training gradients "
                           f"(tf.gradients or optimizer.compute_gradients) before modifying the graph, as in mxRec")


def _find_get_next(record):
    """Breadth-first up the inputs of the ids to the IteratorGetNext feeding them."""
    op = iterator_output_of(record.ids)
    if op is not None:
        return op
    raise ValueError(f"table {record.table.table_name!r}: ids: graph modification needs ids that come from a tf.data "
                     f"iterator (no IteratorGetNext above {record.ids.name})")


def _rewrite(graph, get_next, records, instance) -> None:
    iterator_op = get_next.inputs[0].op
    state = existing_state(graph)
    entry = state.iterators.get(iterator_op.name) if state is not None else None
    if entry is None:
        raise ValueError(f"table {records[0].table.table_name!r}: ids: the iterator {iterator_op.name!r} was not "
                         f"made by make_one_shot_iterator or make_initializable_iterator after init(); only those "
                         f"iterators can be rewritten")
    dataset, kind = entry
    subgraph, input_map_names = _ids_subgraph(get_next, [r.ids for r in records])
    groups: dict = {}
    for record in records:
        groups.setdefault((record.table.table_name, record.is_train), _TableGroup()).records.append(record)
    order = list(groups)

    def key_processing(*args):
        element = args[0] if len(args) == 1 else args
        flat = tf.nest.flatten(element)
        computed = [r.ids for r in records if r.ids.op is not get_next]
        moved = dict(zip((t.ref() for t in computed), tf.compat.v1.import_graph_def(
            subgraph, input_map=dict(zip(input_map_names, flat)), return_elements=[t.name for t in computed],
            name="mxrec_keys"))) if computed else {}
        # ids that are an iterator output themselves come straight from the element
        raw = [flat[r.ids.value_index] if r.ids.op is get_next else moved[r.ids.ref()] for r in records]
        ids = [tf.reshape(int64_keys(r.table.table_name, t), [-1]) for r, t in zip(records, raw)]   # LKP-7
        position = {id(r): i for i, r in enumerate(records)}
        merged = tuple(_ahead_if_training(k, tf.concat([ids[position[id(r)]] for r in groups[k].records], axis=0))
                       for k in order)
        sizes = tuple(tf.stack([tf.size(ids[position[id(r)]], out_type=tf.int64) for r in groups[k].records])
                      for k in order)
        return element, tuple(ids), merged, sizes

    new_dataset = dataset.map(key_processing).prefetch(1)
    if kind == "one_shot":
        iterator = tf.compat.v1.data.make_one_shot_iterator(new_dataset)
    else:
        iterator = tf.compat.v1.data.make_initializable_iterator(new_dataset)
    element, ids, merged, sizes = iterator.get_next()
    new_outputs = tf.nest.flatten(element)
    remap = {old.ref(): new for old, new in zip(get_next.outputs, new_outputs)}
    for old, new in zip(get_next.outputs, new_outputs):
        rewire_consumers(old, new)
    for record, pipeline_ids in zip(records, ids):
        replace_input(record.step.op, 0, pipeline_ids)
    for key, merged_ids, segment_sizes in zip(order, merged, sizes):
        _merged_store_call(groups[key], merged_ids, segment_sizes, remap)
    initializer = iterator.initializer if kind == "initializable" else tf.no_op(name="mxrec_one_shot_initializer")
    if kind == "initializable":
        tf.compat.v1.add_to_collection(ASCEND_CUTTING_POINT_INITIALIZER, initializer)
    for is_train in {r.is_train for r in records}:
        instance.train_params_config.set_initializer(is_train, initializer)
        instance.train_params_config.set_target_batch(is_train, element)


def _ahead_if_training(group_key, merged):
    """A training group's merged ids are resolved ahead in the input pipeline (PIPE-8)."""
    table_name, is_train = group_key
    return in_input_pipeline(table_name, merged) if is_train else merged


def _ids_subgraph(get_next, ids_tensors):
    """The ops between the iterator's outputs and the ids, as a GraphDef whose
    iterator outputs are placeholders (the IteratorGetNext itself must not be
    copied: a stateful op inside a map function would read the old iterator)."""
    wanted, frontier = {}, [t.op for t in ids_tensors]
    while frontier:
        op = frontier.pop()
        if op is get_next or op.name in wanted:
            continue
        wanted[op.name] = op
        frontier.extend(t.op for t in op.inputs)
        frontier.extend(op.control_inputs)
    graph_def = tf.compat.v1.GraphDef()
    for op in wanted.values():
        graph_def.node.add().CopyFrom(op.node_def)
    names = []
    for index, output in enumerate(get_next.outputs):
        placeholder = graph_def.node.add()
        placeholder.name, placeholder.op = f"mxrec_iterator_output_{index}", "Placeholder"
        placeholder.attr["dtype"].type = output.dtype.as_datatype_enum
        names.append(f"{placeholder.name}:0")
    for node in graph_def.node:
        inputs = []
        for name in node.input:
            base, _, port = name.partition(":")
            if base == get_next.name:
                inputs.append(f"mxrec_iterator_output_{int(port or 0)}")
            elif name != f"^{get_next.name}":
                inputs.append(name)
        del node.input[:]
        node.input.extend(inputs)
    return graph_def, names


def _merged_store_call(group: _TableGroup, merged_ids, segment_sizes, remap: dict) -> None:
    first = group.records[0]
    table, is_train, step = first.table, first.is_train, first.step
    has_timestamp = step.has_timestamp

    def run(ids, sizes, step_value, stamp_value):
        result, step_used = call_store(table, ids, is_train=is_train, step=step_value,
                                       timestamp=stamp_value if has_timestamp else None, pad_to=step.pad_to)
        group.current = (result, np.concatenate([[0], np.cumsum(sizes)]), step_used)
        return np.int64(len(result.unique_keys))

    # the step and timestamp tensors may be outputs of the old iterator: read the new one's
    step_value, stamp_value = (remap.get(t.ref(), t) for t in (step.step, step.stamp))
    token = tf.numpy_function(run, [merged_ids, segment_sizes, step_value, stamp_value], tf.int64, stateful=True,
                              name=f"{table.table_name}_merged_store_lookup")
    for segment, record in enumerate(group.records):
        record.step.share.source = group
        record.step.share.segment = segment
        add_control_inputs(record.step.op, [token.op])
    # SHARD-12: the merged call runs the table's collectives; it takes the collective chain's place of the
    # table's first lookup, so every rank runs the merged calls of its tables in one order
    ordered_before(token.op, first.step.op)


class GraphModifierHook(tf.compat.v1.train.SessionRunHook):
    """Modifies the graph in ``begin`` (before MonitoredTrainingSession finalizes
    it) and runs the new iterators' initializers once the session exists."""

    def __init__(self, dump_graph=False, modify_graph=True):
        self.dump_graph, self.modify_graph = dump_graph, modify_graph

    def begin(self):
        if self.modify_graph:
            modify_graph_and_start_emb_cache(dump_graph=self.dump_graph)
        self._initializers = tf.compat.v1.get_collection(ASCEND_CUTTING_POINT_INITIALIZER)

    def after_create_session(self, session, coord):
        if self._initializers:
            session.run(self._initializers)


class LookupSubgraphSlicerHook(tf.compat.v1.train.SessionRunHook):
    """mxRec moves ops of ``op_types`` (e.g. ``StringToNumber``) feeding a lookup out
    of the NPU graph into the host pipeline.  Here every op already runs on the CPU
    and the rewrite re-imports the whole id sub-graph (GRAPH-1): accepted, logged."""

    def __init__(self, op_types=None):
        self.op_types = list(op_types or [])
        log_once("hook:LookupSubgraphSlicerHook", "LookupSubgraphSlicerHook is accepted and ignored: every op runs on "
                 "the CPU, and the graph modifier moves the whole id sub-graph into the input pipeline")


class OrphanLookupKeySlicerHook(tf.compat.v1.train.SessionRunHook):
    """mxRec slices lookup ids that do not come from a dataset out of the device
    graph.  Here such a lookup already works unmodified (one store call per lookup,
    GRAPH-1); the rewrite still needs ids from an iterator (GRAPH-2)."""

    def __init__(self):
        log_once("hook:OrphanLookupKeySlicerHook", "OrphanLookupKeySlicerHook is accepted and ignored: a lookup whose "
                 "ids come from no dataset runs as it is (one store call per lookup); only iterator ids are moved")


class ACGPushOpsToDatasetHook(tf.compat.v1.train.SessionRunHook):
    """mxRec (``mx_rec.graph.acg_push_ops``) moves string ops (``StringSplit``, ``StringToNumber``)
    between the iterator and the model out of the NPU graph into the dataset's ``map``.  Here every
    op runs on the CPU where it is, so there is nothing to move: accepted, logged."""

    def __init__(self, dump_graph=False):
        if not isinstance(dump_graph, bool):
            raise TypeError(f"ACGPushOpsToDatasetHook: dump_graph: must be a bool, got {type(dump_graph).__name__}")
        self.dump_graph = dump_graph
        log_once("hook:ACGPushOpsToDatasetHook", "ACGPushOpsToDatasetHook is accepted and ignored: every op runs on "
                 "the CPU, so string ops need not move into the input pipeline")


def session_run(self, fetches, feed_dict=None, options=None, run_metadata=None):
    """``mx_rec.graph.run``: the ``Session.run`` mxRec installs to wake its host key-processing
    threads per step.  Here the store is called from inside the step, so it is the plain run."""
    return tf.compat.v1.Session.run(self, fetches, feed_dict=feed_dict, options=options, run_metadata=run_metadata)


def do_merge_lookup(is_train: bool = True):
    """mxRec merges the lookups of one table before the rewrite (its patched
    ``compute_gradients`` calls this).  The rewrite merges them itself (GRAPH-1)."""
    log_once("graph:do_merge_lookup", "do_merge_lookup is accepted and does nothing: "
             "modify_graph_and_start_emb_cache merges the lookups of each table")
