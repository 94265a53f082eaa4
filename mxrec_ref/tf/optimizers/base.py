"""The sparse optimizer object behind mxRec's `create_hash_optimizer` factories.

As in mxRec, it is a ``tf.compat.v1.train.Optimizer`` (each factory's class subclasses the
matching TF optimizer, TF-31), so scripts schedule its learning rate with a Tensor and wrap it
in loss-scale optimizers that read and scale ``_lr`` / ``_learning_rate``.  The learning rate
is read when ``apply_gradients`` builds the op and its value reaches the store at every step
(TF-34).

``apply_gradients(grads_and_vars)`` accepts the two pairings mxRec scripts use:
(IndexedSlices gradient, table.variable), from ``tf.gradients(loss,
sparse_variables)``; and (gradient of a local embedding, its
ASCEND_SPARSE_LOOKUP_ID_OFFSET tensor), the dynamic-expansion recipe.  Either
way each table's store receives its gradient rows with the lookup's own result
when the gradient's keys are one lookup's unique keys (TF-18), else with the
keys; all tables of one ``apply_gradients`` call are applied by one op (TF-19),
in table-name order.
"""
from __future__ import annotations

import dataclasses
import functools
import itertools
import logging
from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from ...errors import ConfigError, MxrecError
from ...optimizers import SparseOptimizer
from .. import fatal
from ..config_initializer import ConfigInitializer, log_once
from ..distributed import each_table, ordered
from ..lookup import handed_forward, table_of_keys
from ..store_call import apply_gradient
from ..table import NO_RESULT, SparseTable

_names = itertools.count()

# The store optimizer's configured learning rate when the script gives a Tensor, a Variable or a
# callable: a placeholder never used for an update, since every apply passes the step's value (TF-34).
SCHEDULED_PLACEHOLDER = 0.001


def store_learning_rate(optimizer: str, learning_rate):
    """The learning rate the store optimizer is configured with: a Python number as given
    (validated by the store optimizer), else the placeholder; anything else is a TypeError."""
    if _is_number(learning_rate):
        return learning_rate
    if isinstance(learning_rate, (tf.Tensor, tf.Variable)) or callable(learning_rate):
        return SCHEDULED_PLACEHOLDER
    raise TypeError(f"optimizer {optimizer!r}: learning_rate: must be a number, a Tensor, a Variable or a callable "
                    f"returning one, got {type(learning_rate).__name__}")


def _is_number(value) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


class HashOptimizer(tf.compat.v1.train.Optimizer):
    """A ``tf.compat.v1.train.Optimizer`` whose ``apply_gradients`` updates the tables' stores.
    ``tf_init(unique_name)`` runs the TF optimizer class's own ``__init__`` (the factories'
    classes pass theirs); by default the plain ``Optimizer``'s."""

    def __init__(self, store_optimizer: SparseOptimizer, name: str, by_address: bool = False, *,
                 learning_rate=None, tf_init=None):
        if not isinstance(name, str) or not 1 <= len(name) <= 200:
            raise ValueError(f"optimizer {name!r}: name: must be 1..200 characters")
        self.store_optimizer = store_optimizer
        self.by_address = by_address
        instance = ConfigInitializer.get_instance()
        if instance.use_dynamic_expansion and not by_address:
            log_once("optimizer:not-by-address",
                     f"optimizer {name!r}: mxRec requires a *_by_addr optimizer with dynamic expansion; mxrec-ref "
                     f"accepts this one (both are the same store-side update on a CPU)", logging.WARNING)
        started = [t for t in instance.tables.values() if t.opened_store is not None]
        if started:
            bind_to_running(instance.optimizer_instance, self, name, started)     # TF-23
        unique_name = f"{name}_{next(_names)}"
        if tf_init is None:
            tf.compat.v1.train.Optimizer.__init__(self, use_locking=False, name=unique_name)
        else:
            tf_init(unique_name)
        self._hash_learning_rate = store_optimizer.learning_rate if learning_rate is None else learning_rate
        instance.optimizer_instance = self

    @property
    def name(self) -> str:
        return self._name

    # TF1's AdamOptimizer keeps its learning rate in ``_lr``; loss-scale wrappers read and replace it.
    @property
    def _lr(self):
        return self._hash_learning_rate

    @_lr.setter
    def _lr(self, value) -> None:
        self._hash_learning_rate = value

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
            updates.append(table_apply(table, keys, values))
        updates = [apply_op(updates, self._step_learning_rate(), self._check_learning_rate)] if updates else []
        with tf.control_dependencies(updates):
            if global_step is not None:
                return tf.compat.v1.assign_add(global_step, 1, name=name)
            return tf.no_op(name=name or self._name)

    def _step_learning_rate(self):
        """TF-34: the learning rate as a float64 scalar tensor, read now from ``_lr`` (a wrapper may
        have replaced it): a number is checked now, a Tensor or Variable is read at every step.  None:
        the store optimizer's own learning rate."""
        rate = self._lr
        if callable(rate) and not isinstance(rate, (tf.Tensor, tf.Variable)):
            rate = rate()
        if _is_number(rate):
            self._check_learning_rate(rate)
            if float(rate) == float(self.store_optimizer.learning_rate):
                return None                    # the store's own: no input to feed
            return tf.constant(float(rate), tf.float64)
        if not isinstance(rate, (tf.Tensor, tf.Variable)):
            raise TypeError(f"optimizer {self._name!r}: learning_rate: must be a number, a Tensor, a Variable or a "
                            f"callable returning one, got {type(rate).__name__}")
        rate = tf.convert_to_tensor(rate)
        if not (rate.dtype.is_floating or rate.dtype.is_integer):
            raise TypeError(f"optimizer {self._name!r}: learning_rate: must be a number tensor, got {rate.dtype.name}")
        if rate.shape.rank not in (None, 0):
            raise ValueError(f"optimizer {self._name!r}: learning_rate: must be a scalar, got shape {rate.shape}")
        return tf.cast(rate, tf.float64)

    def _check_learning_rate(self, rate) -> float:
        """The store optimizer's own check of one learning rate, as a ConfigError naming this
        optimizer and the parameter; raised before any table changes."""
        value = np.asarray(rate)
        if value.ndim != 0:
            raise ConfigError(f"optimizer {self._name!r}: learning_rate: must be a scalar, got shape {value.shape}")
        value = float(value)
        try:
            dataclasses.replace(self.store_optimizer, learning_rate=value)
        except ConfigError as error:
            raise ConfigError(f"optimizer {self._name!r}: learning_rate: {value!r} for this step is invalid "
                              f"({error})") from None
        return value


class LearningRateAttribute:
    """TF1's GradientDescent, Adagrad and Ftrl optimizers keep their learning rate in
    ``_learning_rate``: the same value as ``_lr`` here, so a wrapper may scale either."""

    @property
    def _learning_rate(self):
        return self._hash_learning_rate

    @_learning_rate.setter
    def _learning_rate(self, value) -> None:
        self._hash_learning_rate = value


class CustomizedOptimizer:
    """mxRec's base of its sparse optimizers (``mx_rec.optimizers.base``), which model-zoo scripts
    subclass to write their own update in TF ops on the device table (e.g. WideDeep's
    ``gradient_descent_w``).  Here a table's rows live in the store and are updated inside it, so
    such an update has nothing to act on: constructing a subclass raises, naming the factory that
    computes the same update in the store (rejected, TF-32)."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError(self._rejection())

    def _get_name(self, name="CustomizedOptimizer"):
        raise NotImplementedError(self._rejection())

    @classmethod
    def _rejection(cls) -> str:
        return (f"optimizer class {cls.__name__!r}: a sparse optimizer written on mx_rec.optimizers.base."
                f"CustomizedOptimizer updates the device table with its own TF ops; mxrec-ref's tables are "
                f"updated inside the store, so use one of the mx_rec.optimizers factories (lazy_adam, adagrad, "
                f"ftrl, gradient_descent with weight_decay=, and their *_by_addr forms)")


def bind_to_running(running, optimizer: HashOptimizer, name: str, started_tables: list) -> None:
    """A sparse optimizer created once the stores run: the same optimizer again, as an Estimator's
    next graph creates it (TF-23) -- or the one a restore opened the stores with (TF-21) -- binds to
    the stores; any other is refused before anything changes, naming the first parameter that differs."""
    started = [t.table_name for t in started_tables]
    have = running.store_optimizer if running is not None else started_tables[0].store_optimizer
    if have is None or any(t.store_optimizer != have for t in started_tables):
        raise RuntimeError(f"optimizer {name!r}: create the sparse optimizer before the first lookup runs "
                           f"(tables already running without one: {started})")
    wanted = optimizer.store_optimizer
    by_address = running.by_address if running is not None else optimizer.by_address
    if type(have) is not type(wanted) or by_address != optimizer.by_address:
        raise ValueError(f"optimizer {name!r}: optimizer: the tables {started} already run with "
                         f"{type(have).__name__}{' by address' if by_address else ''}; a sparse optimizer "
                         f"created again in a new graph must be the same, got {type(wanted).__name__}"
                         f"{' by address' if optimizer.by_address else ''}")
    for field in dataclasses.fields(have):
        if getattr(have, field.name) != getattr(wanted, field.name):
            raise ValueError(f"optimizer {name!r}: {field.name}: the tables {started} already run with "
                             f"{getattr(have, field.name)!r}; a sparse optimizer created again in a new graph "
                             f"must be the same, got {getattr(wanted, field.name)!r}")


def note_ignored_options(optimizer: str, **options) -> None:
    """use_locking / use_fusion_optim: TF-kernel and NPU fused-kernel choices; the
    store applies each table's update in one call, so they change nothing."""
    for option, value in options.items():
        if value:
            log_once(f"optimizer:{option}", f"optimizer {optimizer!r}: {option}=True is accepted and ignored: the "
                     f"store applies each table's update in one locked call, with no fused NPU kernel")


@dataclass
class TableApply:
    """One (gradient, table) pair of an apply_gradients call, as graph tensors."""
    table: SparseTable
    keys: object            # the gradient's keys: int64 [u]
    values: object          # its rows: float32 [u, dim]
    step: object            # the step of the lookups it comes from (``lookup.handed_forward``)
    token: object | None    # the lookup's result token when ``keys`` are one lookup's unique keys (TF-18)


def table_apply(table: SparseTable, keys, values) -> TableApply:
    """One pair of an apply, with the step and the result token its lookups handed forward (TF-18)."""
    step, token = handed_forward(table, keys)
    return TableApply(table, keys, values, step, token)


def apply_op(applies: list[TableApply], learning_rate=None, check_learning_rate=None):
    """One store call (one numpy_function) for every table's update of the step (TF-19): side by
    side on one rank, in table-name order on several, so a sharded store's collectives run in one
    order on every rank (SHARD-12); pairs of one table keep the caller's order.  Each ``step`` is a
    graph input from the lookups the gradient comes from, so lookup and apply of one step agree by
    data flow.  ``learning_rate`` (a float64 scalar tensor, or None: the stores' own) is the step's
    value, checked by ``check_learning_rate`` before any table changes and given to every store
    (TF-34).  Returns the rows each pair updated, int64 [pairs]."""
    applies = sorted(applies, key=lambda a: a.table.table_name)
    scheduled = learning_rate is not None
    inputs = [learning_rate] if scheduled else []
    for entry in applies:
        token = entry.token if entry.token is not None else tf.constant(NO_RESULT, tf.int64)
        inputs += [tf.cast(entry.keys, tf.int64), tf.cast(entry.values, tf.float32), entry.step, token]

    # one task per table, its pairs in order: two applies to one table never run side by side
    tables = [list(group) for _, group in itertools.groupby(range(len(applies)),
                                                             key=lambda i: applies[i].table.table_name)]

    def apply_pairs(pairs, values, rate) -> list[int]:
        return [_apply_table(applies[i].table, *values[4 * i:4 * i + 4], rate) for i in pairs]

    def apply(*values):
        rate = None
        if scheduled:
            try:
                rate = check_learning_rate(values[0])
            except MxrecError as error:
                fatal.note(error)
                raise
            values = values[1:]
        applied = each_table([functools.partial(apply_pairs, pairs, values, rate) for pairs in tables])
        return np.array([count for counts in applied for count in counts], dtype=np.int64)

    applied = tf.numpy_function(apply, inputs, tf.int64, stateful=True, name="sparse_apply")
    applied.set_shape([len(applies)])
    ordered(applied, "train")      # SHARD-12: the owners' exchange runs in one order on every rank
    return applied


def _apply_table(table: SparseTable, keys, values, step, token, learning_rate=None) -> int:
    """One table's store apply: with the lookup's result when its token still names one whose unique
    keys these are (TF-18: no second dedup, the lookup's row handles), else with the keys; both give
    the same state bit for bit (OPT-9); with the step's learning rate when one is given (OPT-10)."""
    try:
        rate = {} if learning_rate is None else {"learning_rate": learning_rate}
        return apply_gradient(table, keys, values, step, token, **rate)
    except MxrecError as error:
        fatal.note(error)
        raise
