"""``export_saved_model(model, path)``: a SavedModel of a Keras model whose
``Embedding`` tables are static TF lookups (KERAS-9).

Each layer is switched to serving mode while the serving function is traced:
its lookup becomes ``tf.gather(rows, table.lookup(keys))`` with the table and
rows of ``tf.export.serving_table`` (admitted keys -> rows; any other key ->
the table's ``serving_default_value``, zeros when unset), assembled by the same
ops as training and evaluation, so the export answers what ``model.predict``
answers.  The signature ``serving_default`` takes the model's inputs by name.
"""
from __future__ import annotations

import tensorflow as tf

from ..errors import UsageError
from ..serving.delta import ServedTable, ServingBase, register
from ..serving.signature import apply_delta_function
from ..serving.table import UpdatableTable, check_spare_rows
from ..tf.export import SAVE_OPTIONS, check_no_pyfunc, serving_table
from .layer import Embedding


def embedding_layers(model) -> list[Embedding]:
    """The model's Embedding layers, each once, in model order."""
    found, seen = [], set()
    # noqa: SLF001 -- Keras 3 has no public recursive walk over nested layers (Model.layers is one level)
    for layer in model._flatten_layers(include_self=False, recursive=True):
        if isinstance(layer, Embedding) and id(layer) not in seen:
            seen.add(id(layer))
            found.append(layer)
    return found


def _inputs(model):
    """(the structure of the model's symbolic inputs, the signature's named TensorSpecs, a function that
    rebuilds the inputs from the signature's tensors).  A SavedModel signature takes dense tensors only: a
    sparse input ``x`` is fed as ``x_indices``, ``x_values``, ``x_dense_shape``; a ragged one (ragged rank 1)
    as ``x_values``, ``x_row_lengths``."""
    try:
        structure = model.input
    except (AttributeError, ValueError):
        structure = None
    if structure is None:
        raise UsageError("export_saved_model: model: the model has no symbolic inputs; build it with "
                         "keras.Input (functional or Sequential with an Input)")
    specs, kinds = [], []
    for tensor in tf.nest.flatten(structure):
        name, dtype, rank = tensor.name, tf.as_dtype(tensor.dtype), len(tensor.shape)
        if getattr(tensor, "sparse", False):
            kinds.append("sparse")
            specs += [tf.TensorSpec([None, rank], tf.int64, name=f"{name}_indices"),
                      tf.TensorSpec([None], dtype, name=f"{name}_values"),
                      tf.TensorSpec([rank], tf.int64, name=f"{name}_dense_shape")]
        elif getattr(tensor, "ragged", False):
            if rank != 2:
                raise UsageError(f"export_saved_model: input {name!r}: a ragged input must be [batch, (k)]")
            kinds.append("ragged")
            specs += [tf.TensorSpec([None], dtype, name=f"{name}_values"),
                      tf.TensorSpec([None], tf.int64, name=f"{name}_row_lengths")]
        else:
            kinds.append("dense")
            specs.append(tf.TensorSpec(tensor.shape, dtype, name=name))

    def rebuild(flat):
        flat, inputs = list(flat), []
        for kind in kinds:
            if kind == "sparse":
                inputs.append(tf.SparseTensor(flat.pop(0), flat.pop(0), flat.pop(0)))
            elif kind == "ragged":
                inputs.append(tf.RaggedTensor.from_row_lengths(flat.pop(0), flat.pop(0)))
            else:
                inputs.append(flat.pop(0))
        return tf.nest.pack_sequence_as(structure, inputs)

    return specs, rebuild


def export_saved_model(model, path, *, updatable: bool = False, spare_rows: int | None = None) -> str:
    """Write ``model`` as a SavedModel at ``path`` that serves without mxrec-ref (KERAS-9).  ``updatable``:
    its tables take fresh rows through an ``apply_delta`` signature, ``spare_rows`` free rows per table
    written with them (SERVE-1); ``mxrec_ref.serving.export_delta(path, ...)`` then writes the deltas."""
    if not isinstance(updatable, bool):
        raise UsageError(f"export_saved_model: updatable: must be True or False, got {updatable!r}")
    check_spare_rows(spare_rows, updatable)
    layers = embedding_layers(model)
    states = [layer.store.export() for layer in layers]
    module = tf.Module()
    module.tables, module.rows = [], []
    for layer, state in zip(layers, states):
        if updatable:
            table = UpdatableTable(layer.table_name, state.keys, state.values, layer.config.default_row(),
                                   spare_rows)
            rows = table.rows
        else:
            table, rows = serving_table(layer.table_name, state, layer.config.default_row())
        module.tables.append(table)
        module.rows.append(rows)
    dense = list({id(v): getattr(v, "value", v) for v in model.variables}.values())
    module.dense_variables = dense
    specs, rebuild = _inputs(model)

    @tf.function(input_signature=specs)
    def serve(*inputs):
        outputs = model(rebuild(inputs), training=False)
        if isinstance(outputs, dict):
            return outputs
        outputs = tf.nest.flatten(outputs)
        return {f"output_{i}": output for i, output in enumerate(outputs)}

    for layer, table, rows in zip(layers, module.tables, module.rows):
        layer.serving = (table, rows)
    try:
        concrete = serve.get_concrete_function()
    finally:
        for layer in layers:
            layer.serving = None
    check_no_pyfunc(concrete.graph.as_graph_def(), "export_saved_model")
    module.serve = concrete
    signatures = {"serving_default": concrete}
    if updatable:
        module.apply_delta = apply_delta_function(module, module.tables, dense)
        signatures["apply_delta"] = module.apply_delta.get_concrete_function()
        check_no_pyfunc(signatures["apply_delta"].graph.as_graph_def(), "export_saved_model")
    tf.saved_model.save(module, str(path), signatures=signatures, options=SAVE_OPTIONS)
    if updatable:
        register(ServingBase(str(path), [ServedTable(layer.table_name, layer.store, state.keys)
                                         for layer, state in zip(layers, states)],
                             dense=[variable.numpy for variable in dense]))
    return str(path)


__all__ = ["export_saved_model", "embedding_layers"]
