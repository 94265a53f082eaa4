"""The NPU adapter's optimizer wrappers (TF-29): the all-reduce wrapper is the optimizer itself on
one process; loss scaling multiplies the loss, divides the gradients back and skips a step whose
gradients are not finite, as NPULossScaleOptimizer does."""
from __future__ import annotations

import tensorflow as tf

from .notes import npu_only


class NPUDistributedOptimizer(tf.compat.v1.train.Optimizer):
    """All-reduces the gradients over the ranks, then applies them with ``optimizer``.  One process
    is all the ranks: the gradients pass unchanged."""

    def __init__(self, optimizer, is_weight_update_sharding=False, name=None, use_locking=False):
        if not isinstance(optimizer, tf.compat.v1.train.Optimizer):
            raise TypeError(f"NPUDistributedOptimizer: optimizer: must be a tf.compat.v1.train.Optimizer, "
                            f"got {type(optimizer).__name__}")
        super().__init__(use_locking=use_locking, name=name or f"NPUDistributed{optimizer.get_name()}")
        npu_only("NPUDistributedOptimizer", "one process: the gradient all-reduce over ranks is the identity")
        self._optimizer = optimizer
        self._is_weight_update_sharding = is_weight_update_sharding

    def compute_gradients(self, *args, **kwargs):
        return self._optimizer.compute_gradients(*args, **kwargs)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        return self._optimizer.apply_gradients(grads_and_vars, global_step=global_step, name=name)

    def get_slot(self, *args, **kwargs):
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self):
        return self._optimizer.variables()


def npu_distributed_optimizer_wrapper(optimizer):
    """The migration tool's wrapper: the optimizer itself on one process."""
    npu_only("npu_distributed_optimizer_wrapper", "one process: the gradient all-reduce over ranks is the identity")
    return optimizer


class FixedLossScaleManager:
    def __init__(self, loss_scale, enable_overflow_check=True):
        if isinstance(loss_scale, bool) or not isinstance(loss_scale, (int, float)) or loss_scale < 1:
            raise ValueError(f"FixedLossScaleManager: loss_scale: must be a number >= 1, got {loss_scale!r}")
        self._loss_scale = float(loss_scale)
        self._enable_overflow_check = enable_overflow_check

    def get_loss_scale(self):
        return tf.constant(self._loss_scale, tf.float32)

    def update_loss_scale(self, finite_grads):
        return tf.no_op()

    def get_enable_overflow_check(self):
        return self._enable_overflow_check


class ExponentialUpdateLossScaleManager:
    """The loss scale grows by ``incr_ratio`` after ``incr_every_n_steps`` finite steps in a row and
    shrinks by ``decr_ratio`` (to at least 1) after ``decr_every_n_nan_or_inf`` steps with INF/NaN."""

    def __init__(self, init_loss_scale, incr_every_n_steps, decr_every_n_nan_or_inf=2, incr_ratio=2,
                 decr_ratio=0.8):
        for name, value, low in (("init_loss_scale", init_loss_scale, 1), ("incr_every_n_steps", incr_every_n_steps, 1),
                                 ("decr_every_n_nan_or_inf", decr_every_n_nan_or_inf, 1), ("incr_ratio", incr_ratio, 1)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < low:
                raise ValueError(f"ExponentialUpdateLossScaleManager: {name}: must be a number >= {low}, got {value!r}")
        if isinstance(decr_ratio, bool) or not isinstance(decr_ratio, (int, float)) or not 0 < decr_ratio <= 1:
            raise ValueError(f"ExponentialUpdateLossScaleManager: decr_ratio: must be in (0, 1], got {decr_ratio!r}")
        self._incr_every_n_steps, self._decr_every_n = int(incr_every_n_steps), int(decr_every_n_nan_or_inf)
        self._incr_ratio, self._decr_ratio = float(incr_ratio), float(decr_ratio)
        with tf.compat.v1.variable_scope("loss_scale_manager", reuse=tf.compat.v1.AUTO_REUSE):
            self._loss_scale = tf.compat.v1.get_variable(
                "loss_scale", initializer=tf.constant(float(init_loss_scale)), trainable=False,
                collections=[tf.compat.v1.GraphKeys.GLOBAL_VARIABLES])
            self._good_steps = tf.compat.v1.get_variable("good_steps", initializer=tf.constant(0), trainable=False)
            self._bad_steps = tf.compat.v1.get_variable("bad_steps", initializer=tf.constant(0), trainable=False)

    def get_loss_scale(self):
        return tf.identity(self._loss_scale)

    def update_loss_scale(self, finite_grads):
        def finite():
            good = self._good_steps + 1
            grow = good >= self._incr_every_n_steps
            return tf.group(
                tf.compat.v1.assign(self._loss_scale, tf.where(grow, self._loss_scale * self._incr_ratio,
                                                               self._loss_scale)),
                tf.compat.v1.assign(self._good_steps, tf.where(grow, 0, good)),
                tf.compat.v1.assign(self._bad_steps, 0))

        def overflow():
            bad = self._bad_steps + 1
            shrink = bad >= self._decr_every_n
            return tf.group(
                tf.compat.v1.assign(self._loss_scale, tf.where(
                    shrink, tf.maximum(1.0, self._loss_scale * self._decr_ratio), self._loss_scale)),
                tf.compat.v1.assign(self._bad_steps, tf.where(shrink, 0, bad)),
                tf.compat.v1.assign(self._good_steps, 0))

        return tf.cond(finite_grads, finite, overflow)

    def get_enable_overflow_check(self):
        return True


class NPULossScaleOptimizer(tf.compat.v1.train.Optimizer):
    """``compute_gradients`` differentiates ``loss * scale`` and divides the gradients by ``scale``
    (a power of two changes no float32 bit); ``apply_gradients`` applies them only when all are
    finite and updates the manager's scale."""

    def __init__(self, opt, loss_scale_manager, is_distributed=False):
        if not isinstance(opt, tf.compat.v1.train.Optimizer):
            raise TypeError(f"NPULossScaleOptimizer: opt: must be a tf.compat.v1.train.Optimizer, "
                            f"got {type(opt).__name__}")
        super().__init__(use_locking=False, name=f"NPULossScale{opt.get_name()}")
        self._opt, self._manager = opt, loss_scale_manager
        if is_distributed:
            npu_only("NPULossScaleOptimizer(is_distributed=True)", "one process: no overflow status to all-reduce")

    def compute_gradients(self, loss, var_list=None, **kwargs):
        scale = self._manager.get_loss_scale()
        pairs = self._opt.compute_gradients(loss * scale, var_list=var_list, **kwargs)
        return [(None if g is None else _scaled(g, 1.0 / scale), v) for g, v in pairs]

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        grads_and_vars = list(grads_and_vars)
        grads = [g for g, _ in grads_and_vars if g is not None]
        finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g.values if isinstance(g, tf.IndexedSlices) else g))
                                for g in grads]) if grads else tf.constant(True)
        if not self._manager.get_enable_overflow_check():
            return self._opt.apply_gradients(grads_and_vars, global_step=global_step, name=name)
        update_scale = self._manager.update_loss_scale(finite)

        def apply():
            return tf.group(self._opt.apply_gradients(grads_and_vars, global_step=global_step, name=name))

        def skip():
            return tf.group(tf.compat.v1.assign_add(global_step, 1)) if global_step is not None else tf.no_op()

        with tf.control_dependencies([update_scale]):
            return tf.cond(finite, apply, skip)

    def get_slot(self, *args, **kwargs):
        return self._opt.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._opt.get_slot_names(*args, **kwargs)

    def variables(self):
        return self._opt.variables()


def _scaled(gradient, factor):
    if isinstance(gradient, tf.IndexedSlices):
        return tf.IndexedSlices(gradient.values * tf.cast(factor, gradient.values.dtype), gradient.indices,
                                gradient.dense_shape)
    return gradient * tf.cast(factor, gradient.dtype)
