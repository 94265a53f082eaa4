"""The sparse optimizer object behind mxRec's `create_hash_optimizer` factories.

``apply_gradients(grads_and_vars)`` accepts the two pairings mxRec scripts use:
(IndexedSlices gradient, table.variable), from ``tf.gradients(loss,
sparse_variables)``; and (gradient of a local embedding, its
ASCEND_SPARSE_LOOKUP_ID_OFFSET tensor), the dynamic-expansion recipe.  Either
way the store receives (keys, gradient rows) in one call per table.
"""
from __future__ import annotations

import itertools
import logging

import numpy as np
import tensorflow as tf

from ...errors import MxrecError
from ...optimizers import SparseOptimizer
from .. import fatal
from ..config_initializer import ConfigInitializer, log_once
from ..distributed import ordered
from ..lookup import table_of_keys, train_step_of

_names = itertools.count()


class HashOptimizer:
    def __init__(self, store_optimizer: SparseOptimizer, name: str, by_address: bool = False):
        if not isinstance(name, str) or not 1 <= len(name) <= 200:
            raise ValueError(f"optimizer {name!r}: name: must be 1..200 characters")
        self.store_optimizer = store_optimizer
        self.by_address = by_address
        self._name = f"{name}_{next(_names)}"
        instance = ConfigInitializer.get_instance()
        if instance.use_dynamic_expansion and not by_address:
            log_once("optimizer:not-by-address",
                     f"optimizer {name!r}: mxRec requires a *_by_addr optimizer with dynamic expansion; mxrec-ref "
                     f"accepts this one (both are the same store-side update on a CPU)", logging.WARNING)
        started = [t.table_name for t in instance.tables.values() if t._store is not None]
        if started:
            raise RuntimeError(f"optimizer {name!r}: create the sparse optimizer before the first lookup runs "
                               f"(tables already running: {started})")
        instance.optimizer_instance = self

    @property
    def name(self) -> str:
        return self._name

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        tables_by_variable = {t.variable.ref(): t for t in ConfigInitializer.get_instance().tables.values()}
        updates = []
        for grad, var in grads_and_vars:
            if grad is None:
                continue
            if isinstance(var, tf.Variable) and var.ref() in tables_by_variable:
                table = tables_by_variable[var.ref()]
                if not isinstance(grad, tf.IndexedSlices):
                    raise TypeError(f"table {table.table_name!r}: grad: expected the IndexedSlices that "
                                    f"tf.gradients returns for a table variable, got {type(grad).__name__}")
                keys, values = grad.indices, grad.values
            elif isinstance(var, tf.Tensor) and table_of_keys(var) is not None:
                table = table_of_keys(var)
                keys, values = var, tf.convert_to_tensor(grad)
            else:
                raise TypeError(f"optimizer {self._name!r}: var: {getattr(var, 'name', var)!r} is not a sparse "
                                f"table variable or lookup id offset; train dense variables with a TF optimizer")
            updates.append(_apply_op(table, keys, values, train_step_of(table, keys)))
        with tf.control_dependencies(updates):
            if global_step is not None:
                return tf.compat.v1.assign_add(global_step, 1, name=name)
            return tf.no_op(name=name or self._name)


def note_ignored_options(optimizer: str, **options) -> None:
    """use_locking / use_fusion_optim: TF-kernel and NPU fused-kernel choices; the
    store applies each table's update in one call, so they change nothing."""
    for option, value in options.items():
        if value:
            log_once(f"optimizer:{option}", f"optimizer {optimizer!r}: {option}=True is accepted and ignored: the "
                     f"store applies each table's update in one locked call, with no fused NPU kernel")


def _apply_op(table, keys, values, step):
    """The store's apply for (keys, gradient rows); ``step`` is the step tensor
    of the lookups the gradient comes from (``lookup.train_step_of``), a graph
    input, so lookup and apply of one step agree by data flow."""
    def apply(keys_value, values_value, step_value):
        try:
            return np.int64(table.store.apply_gradients(keys_value, values_value, step=int(step_value)))
        except MxrecError as error:
            fatal.note(error)
            raise

    applied = tf.numpy_function(apply, [tf.cast(keys, tf.int64), tf.cast(values, tf.float32), step], tf.int64,
                                stateful=True, name=f"{table.table_name}_sparse_apply")
    ordered(applied, "train")      # SHARD-12: the owners' exchange runs in one order on every rank
    return applied
