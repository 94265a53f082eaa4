"""Beyond mxRec: convert a plain TF1 script's embedding variables into
dynamic tables (spec/graph.md, GRAPH-5).

The script keeps ``tf.compat.v1.nn.embedding_lookup(variable, ids)`` and its
usual optimizer; after it has built its train op, ``convert_embedding_variables``
names the variables to convert.  For each one, every gather from it becomes a
lookup of a new table on the same ids, and every sparse update of it (the
optimizer's ``ResourceSparseApply*`` / ``ResourceScatter*`` op) is replaced by
the store's apply with the same gradient rows and indices -- the indices of an
embedding lookup are the ids, which are the table's keys.
"""
from __future__ import annotations

import tensorflow as tf

from ..optimizers import SparseOptimizer
from .config_initializer import ConfigInitializer
from .graph_edit import replace_control_input, rewire_consumers
from .lookup import sparse_lookup
from .optimizers.base import HashOptimizer, apply_op, table_apply
from .table import create_table

_GATHERS = ("ResourceGather",)
_TABLE_FIELDS = {"table_name", "device_vocabulary_size", "host_vocabulary_size", "ssd_vocabulary_size",
                 "ssd_data_path", "access_threshold", "eviction_threshold", "faae_coefficient", "emb_initializer",
                 "init_param", "is_save"}


def convert_embedding_variables(variables: dict, optimizer: SparseOptimizer, graph=None) -> dict:
    """``variables``: {variable name: {"table_name": ..., thresholds, vocabulary sizes, ...}}.
    ``optimizer``: the store optimizer for the converted tables.  Returns {variable name: table}."""
    graph = graph or tf.compat.v1.get_default_graph()
    if graph.finalized:
        raise RuntimeError("convert_embedding_variables: the graph is finalized; convert before the session starts")
    if not isinstance(optimizer, SparseOptimizer):
        raise TypeError("convert_embedding_variables: optimizer: must be an mxrec_ref sparse optimizer "
                        "(SGD, Adagrad, LazyAdam or Ftrl)")
    by_name = {v.op.name: v for v in tf.compat.v1.global_variables()}
    plans = []
    for name, settings in variables.items():          # everything is checked before the graph changes
        if name not in by_name:
            raise ValueError(f"convert_embedding_variables: no variable {name!r} in the graph")
        unknown = sorted(set(settings) - _TABLE_FIELDS)
        if unknown:
            raise ValueError(f"convert_embedding_variables: variable {name!r}: unknown settings {unknown}")
        variable = by_name[name]
        if variable.shape.rank != 2 or not variable.shape.is_fully_defined():
            raise ValueError(f"convert_embedding_variables: variable {name!r}: needs a known 2-D shape, "
                             f"got {variable.shape}")
        handle = variable.handle
        gathers = [op for op in handle.consumers() if op.type in _GATHERS]
        if not gathers:
            raise ValueError(f"convert_embedding_variables: variable {name!r}: no embedding_lookup reads it")
        updates = [op for op in handle.consumers()
                   if op.type.startswith("ResourceSparseApply") or op.type.startswith("ResourceScatter")]
        plans.append((name, variable, settings, gathers, updates))
    with graph.as_default():
        if ConfigInitializer.get_instance().optimizer_instance is None:
            HashOptimizer(optimizer, "converted")
        tables = {}
        for name, variable, settings, gathers, updates in plans:
            settings = dict(settings)
            table_name = settings.pop("table_name", name.replace("/", "_"))
            thresholds = {k: settings.pop(k) for k in ("access_threshold", "eviction_threshold", "faae_coefficient")
                          if k in settings}
            initializer = settings.pop("emb_initializer", tf.compat.v1.truncated_normal_initializer(stddev=0.05))
            settings.setdefault("device_vocabulary_size", int(variable.shape[0]))
            table = create_table(tf.int64, int(variable.shape[1]), table_name, initializer, **settings)
            config = ({"access_threshold": thresholds.get("access_threshold"),
                       "eviction_threshold": thresholds.get("eviction_threshold"),
                       "faae_coefficient": thresholds.get("faae_coefficient", 1)} if thresholds else None)
            for gather in gathers:
                ids = gather.inputs[1]
                embeddings = sparse_lookup(table, ids, modify_graph=True, access_and_evict_config=config)
                rewire_consumers(gather.outputs[0], embeddings)
            for update in updates:
                _replace_update(graph, table, update)
            tables[name] = table
    return tables


def _replace_update(graph, table, update) -> None:
    """Swap the optimizer's sparse update of the variable for the store's apply,
    wherever the update was a (control) dependency."""
    names = [arg.name for arg in update.op_def.input_arg]
    values = update.inputs[names.index("grad") if "grad" in names else names.index("updates")]
    indices = update.inputs[names.index("indices")]
    apply = apply_op([table_apply(table, indices, values)]).op
    for op in graph.get_operations():
        if update in op.control_inputs:
            replace_control_input(op, update, apply)
