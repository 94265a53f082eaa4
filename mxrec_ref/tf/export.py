"""Serving export (spec/keras.md, KERAS-9): a SavedModel in which every
table is a ``tf.lookup.StaticHashTable`` of its admitted keys -> row index and a
``tf.Variable`` of those rows plus one default row, so the model serves with
TensorFlow alone -- no mxrec-ref import and no ``PyFunc`` op.

``export_saved_model(session, inputs, outputs, path)`` exports a TF1 graph built
with ``sparse_lookup``: the graph is rebuilt with each table's store call
replaced by the static lookup.  The Keras export (``mxrec_ref.keras``) uses
``serving_table`` for its layers.
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf
from tensorflow.python.eager.context import eager_mode   # no public API enters eager mode inside a graph

from ..errors import UsageError
from ..serving.delta import ServedTable, ServingBase, register
from ..serving.signature import apply_delta_function
from ..serving.table import DEFAULT_ROW, UpdatableTable, check_spare_rows
from ..state import PADDING_KEY, TableState
from .lookup import step_ops
from .table import NO_RESULT

# the training graph's custom gradients capture its store calls; a serving model needs no gradient
SAVE_OPTIONS = tf.saved_model.SaveOptions(experimental_custom_gradients=False)
PYFUNC_OPS = ("PyFunc", "PyFuncStateless", "EagerPyFunc")


def serving_arrays(state: TableState, default_row) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(keys, row index of each key, rows): the admitted keys in key order, their
    rows, and last the default row that every other key gets (KERAS-9)."""
    keys = np.asarray(state.keys, dtype=np.int64)
    rows = np.concatenate([np.asarray(state.values, dtype=np.float32),
                           np.asarray(default_row, dtype=np.float32).reshape(1, -1)], axis=0)
    index = np.arange(len(keys), dtype=np.int64)
    if not len(keys):     # a hash table cannot be empty: the padding key, which gets the default row anyway (ADM-5)
        keys, index = np.array([PADDING_KEY], dtype=np.int64), np.zeros(1, dtype=np.int64)
    return keys, index, rows


def serving_table(name: str, state: TableState, default_row):
    """(StaticHashTable keys -> row index, default len(keys); tf.Variable of the rows)."""
    keys, index, rows = serving_arrays(state, default_row)
    table = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(tf.constant(keys, tf.int64), tf.constant(index, tf.int64)),
        default_value=tf.constant(len(rows) - 1, tf.int64), name=f"{name}_serving_keys")
    variable = tf.Variable(rows, trainable=False, name=f"{name}_serving_rows")
    return table, variable


def check_no_pyfunc(graph_def, where: str) -> None:
    """Raise if a PyFunc op is left in ``graph_def`` or its functions (KERAS-9)."""
    nodes = list(graph_def.node) + [n for f in graph_def.library.function for n in f.node_def]
    left = sorted({n.name for n in nodes if n.op in PYFUNC_OPS})
    if left:
        raise RuntimeError(f"{where}: the serving graph still holds Python ops {left[:5]}; they cannot load "
                           f"without this process")


def export_saved_model(session, inputs: dict, outputs: dict, path, *, updatable: bool = False,
                       spare_rows: int | None = None) -> str:
    """Write the TF1 graph of ``session`` as a SavedModel at ``path`` (KERAS-10):
    signature ``serving_default`` feeds ``inputs`` ({name: tensor}) and returns
    ``outputs`` ({name: tensor}).  Dense variables are frozen to constants with
    their values in ``session``; every ``sparse_lookup`` store call the outputs
    depend on becomes its table's static lookup (``serving_table``), the
    ``tf.Variable`` of rows holding the table as it is now.  ``updatable`` (SERVE-1): the tables take
    fresh rows through an ``apply_delta`` signature and the dense (resource) variables stay variables;
    ``mxrec_ref.serving.export_delta(path, ...)`` then writes deltas while ``session`` is open."""
    if not isinstance(updatable, bool):
        raise UsageError(f"export_saved_model: updatable: must be True or False, got {updatable!r}")
    check_spare_rows(spare_rows, updatable)
    with eager_mode():       # called with the session's graph as default: the export itself is TF2 code
        return _export(session, inputs, outputs, path, updatable, spare_rows)


def _export(session, inputs, outputs, path, updatable=False, spare_rows=None) -> str:
    graph = session.graph
    if not isinstance(inputs, dict) or not isinstance(outputs, dict) or not inputs or not outputs:
        raise TypeError("export_saved_model: inputs, outputs: must be non-empty dicts {name: tensor}")
    for where, tensors in (("inputs", inputs), ("outputs", outputs)):
        for name, tensor in tensors.items():
            if not isinstance(tensor, tf.Tensor) or tensor.graph is not graph:
                raise TypeError(f"export_saved_model: {where}[{name!r}]: must be a tensor of the session's graph")
    # each store lookup by the op of its first output: its own numpy_function, or the Identity a
    # fused lookup's graph reads (TF-20)
    lookups = {s.outputs[0].op.name: s for s in step_ops(graph)}
    output_nodes = sorted({t.op.name for t in outputs.values()})
    # the tables' one-row proxies are never initialised (TF-1): not frozen, mapped to stand-ins below
    proxies = {t.variable.op.name: t for t in {id(s.table): s.table for s in lookups.values()}.values()}
    # an updatable export keeps the dense variables as variables, which its deltas assign (SERVE-1)
    dense = {} if not updatable else {v.op.name: v for v in graph.get_collection(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES)
                                      if v.op.name not in proxies}
    frozen = tf.compat.v1.graph_util.convert_variables_to_constants(
        session, graph.as_graph_def(), output_nodes, variable_names_blacklist=sorted(proxies) + sorted(dense))
    present = {n.name for n in frozen.node}
    if updatable:
        ref_variables = sorted(n.name for n in frozen.node if n.op in ("VariableV2", "Variable"))
        if ref_variables:
            raise UsageError(f"export_saved_model: updatable: the outputs read TF1 reference variables "
                             f"{ref_variables[:5]}; an updatable export assigns resource variables only "
                             f"(tf.compat.v1.enable_resource_variables(), TF2's default)")
    used = [name for name in sorted(lookups) if name in present]      # the store calls the outputs depend on
    tables, states = {}, {}
    for name in used:
        table = lookups[name].table
        if table.table_name not in tables:
            state = states[table.table_name] = table.store.export()
            tables[table.table_name] = (
                _updatable(table.table_name, state, table.config.default_row(), spare_rows) if updatable else
                serving_table(table.table_name, state, table.config.default_row()))
    stand_ins = {name: tf.Variable(tf.zeros([1, table.emb_size]), trainable=False, name=f"{table.table_name}_proxy")
                 for name, table in proxies.items() if name in present}
    dense = {name: variable for name, variable in sorted(dense.items()) if name in present}
    dense_copies = {name: tf.Variable(session.run(variable), trainable=False, name=name.replace("/", "_"))
                    for name, variable in dense.items()}

    def rebuilt():
        """Copy A computes each lookup's ids; copy B, the outputs, reads the static
        lookups instead of the store calls (its PyFunc ops are left unconnected
        and pruned below)."""
        copy = tf.compat.v1.get_default_graph()
        tf.compat.v1.import_graph_def(frozen, name="a")
        mapping = {t.name: copy.get_tensor_by_name(f"a/{t.name}") for t in inputs.values()}
        for name in used:
            lookup = lookups[name]
            ids = lookup.op.inputs[0] if lookup.op is not None else lookup.merged    # rewired by GRAPH-1
            keys = tf.cast(copy.get_tensor_by_name(f"a/{ids.name}"), tf.int64)
            hash_table, rows = tables[lookups[name].table.table_name]
            positions = hash_table.lookup(keys)
            admitted = (positions != DEFAULT_ROW if updatable else
                        positions < tf.shape(rows, out_type=tf.int64)[0] - 1)
            replaced = (keys, tf.gather(rows, positions), tf.range(tf.size(keys, out_type=tf.int64)),
                        admitted, tf.constant(-1, tf.int64),
                        tf.constant(NO_RESULT, tf.int64))      # outputs of lookup.py's store_lookup, in order
            mapping.update({output.name: tensor for output, tensor in zip(lookup.outputs, replaced)})
        mapping.update({f"{name}:0": tf.identity(variable.handle)
                        for name, variable in [*stand_ins.items(), *dense_copies.items()]})
        tf.compat.v1.import_graph_def(frozen, input_map=mapping, name="b")

    wrapped = tf.compat.v1.wrap_function(rebuilt, [])
    feeds = [wrapped.graph.get_tensor_by_name(f"a/{t.name}") for t in inputs.values()]
    fetches = {name: wrapped.graph.get_tensor_by_name(f"b/{t.name}") for name, t in outputs.items()}
    pruned = wrapped.prune(feeds, fetches)
    check_no_pyfunc(pruned.graph.as_graph_def(), "export_saved_model")
    specs = [tf.TensorSpec(t.shape, t.dtype, name=name) for name, t in inputs.items()]

    @tf.function(input_signature=specs)
    def serve(*args):
        return pruned(*args)

    module = tf.Module()
    module.tables = [table for table, _ in tables.values()]
    module.rows = [rows for _, rows in tables.values()]
    module.proxies = list(stand_ins.values())
    module.dense_variables = list(dense_copies.values())
    module.serve = serve
    concrete = serve.get_concrete_function()
    check_no_pyfunc(concrete.graph.as_graph_def(), "export_saved_model")
    signatures = {"serving_default": concrete}
    if updatable:
        module.apply_delta = apply_delta_function(module, module.tables, module.dense_variables)
        signatures["apply_delta"] = module.apply_delta.get_concrete_function()
        check_no_pyfunc(signatures["apply_delta"].graph.as_graph_def(), "export_saved_model")
    tf.saved_model.save(module, str(path), signatures=signatures, options=SAVE_OPTIONS)
    if updatable:
        stores = {s.table.table_name: s.table.store for s in lookups.values()}
        register(ServingBase(str(path), [ServedTable(name, stores[name], states[name].keys) for name in tables],
                             dense=[_reader(session, variable) for variable in dense.values()]))
    return str(path)


def _updatable(name: str, state: TableState, default_row, spare_rows):
    """(the updatable table, its rows variable): what ``serving_table`` gives, for SERVE-1."""
    table = UpdatableTable(name, np.asarray(state.keys, np.int64), np.asarray(state.values, np.float32),
                           default_row, spare_rows)
    return table, table.rows


def _reader(session, variable):
    """The dense variable's value in ``session`` when a delta is written (the session must be open)."""
    return lambda: session.run(variable)
