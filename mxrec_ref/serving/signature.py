"""The ``apply_delta`` signature of an updatable export (SERVE-2).

Its inputs are named after what they change, one triple per table and one tensor per dense variable:
``<table>_keys`` int64 [n], ``<table>_rows`` float32 [n, dim], ``<table>_evicted`` int64 [m],
``dense_<i>`` (the i-th dense variable, its own dtype and shape) and ``sequence`` int64 (the delta's
number: exactly one more than the last applied, 0 being the export itself).  A delta file (delta.py) holds
exactly these inputs, so a server feeds them by name without knowing mxrec-ref.  Outputs: ``sequence`` and,
per table, ``<table>_rows_used`` and ``<table>_capacity``.
"""
from __future__ import annotations

import re

import tensorflow as tf

from ..errors import UsageError
from .table import UpdatableTable


def input_name(table: str, part: str) -> str:
    """A table's input of the signature: ``.`` is not allowed in a signature's argument names."""
    return f"{re.sub(r'[^A-Za-z0-9_]', '_', table)}_{part}"


def input_specs(tables: list[UpdatableTable], dense: list) -> list[tf.TensorSpec]:
    """The signature's inputs in order: sequence, each table's keys, rows and evicted keys, the dense
    variables.  Two tables whose names differ only by ``.`` and ``_`` would share inputs: refused."""
    specs = [tf.TensorSpec([], tf.int64, name="sequence")]
    for table in tables:
        specs += [tf.TensorSpec([None], tf.int64, name=input_name(table.table, "keys")),
                  tf.TensorSpec([None, table.dim], tf.float32, name=input_name(table.table, "rows")),
                  tf.TensorSpec([None], tf.int64, name=input_name(table.table, "evicted"))]
    specs += [tf.TensorSpec(variable.shape, variable.dtype, name=f"dense_{i}") for i, variable in enumerate(dense)]
    names = [spec.name for spec in specs]
    clash = sorted({name for name in names if names.count(name) > 1})
    if clash:
        raise UsageError(f"export_saved_model: updatable: tables {[t.table for t in tables]}: their names map to "
                         f"the same apply_delta inputs {clash}; rename one table")
    return specs


def apply_delta_function(module: tf.Module, tables: list[UpdatableTable], dense: list):
    """The ``tf.function`` behind ``apply_delta``; ``module.sequence`` counts the deltas applied."""
    module.sequence = tf.Variable(0, dtype=tf.int64, trainable=False, name="delta_sequence")

    @tf.function(input_signature=input_specs(tables, dense))
    def apply_delta(sequence, *inputs):
        checks = [tf.debugging.assert_equal(sequence, module.sequence + 1, message=(
            "apply_delta: sequence: deltas apply in order, each exactly one after the last applied "
            "(0: the export)"))]
        for i, table in enumerate(tables):
            checks += table.checks(*inputs[3 * i:3 * i + 3])
        outputs = {}
        with tf.control_dependencies(checks):     # every check passes before anything changes
            for i, table in enumerate(tables):
                used, capacity = table.apply(*inputs[3 * i:3 * i + 3])
                outputs[input_name(table.table, "rows_used")] = used
                outputs[input_name(table.table, "capacity")] = capacity
            for variable, value in zip(dense, inputs[3 * len(tables):]):
                variable.assign(value)
            module.sequence.assign(sequence)
        outputs["sequence"] = module.sequence.read_value()
        return outputs

    return apply_delta
