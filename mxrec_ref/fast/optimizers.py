"""The fast path's optimizer rules (spec/optimizers.md): the twins of mxrec_ref/ref/optimizers.py.

The update loops are cext/_optimizers.pxi's, named as the reference's functions (sgd, adagrad,
lazy_adam, and ftrl as ftrl_sqrt or ftrl_accumulate + ftrl_power); here, the
optimizer's scalar hyper-parameters are rounded to float32 exactly as the reference rounds them
(OPT-7) and passed down.
"""
from __future__ import annotations

import numpy as np

from .._fast import adagrad, ftrl_accumulate, ftrl_power, ftrl_sqrt, lazy_adam, resolve_rows, sgd
from ..optimizers import SGD, Adagrad, Ftrl, LazyAdam, SparseOptimizer

# resolve_rows: the gradient rows that update a row, re-resolved by key (OPT-2, ADM-4).
__all__ = ["apply_update", "first_nonfinite", "ftrl", "resolve_rows"]
F32 = np.float32


def first_nonfinite(optimizer: SparseOptimizer, core, slot: dict[str, int], rows, positions, grads, step) -> int:
    """The first j whose update would leave NaN or Inf in row ``rows[j]``'s values or a slot, -1 if none
    (OPT-3): the optimizer's kernel run without writing, so nothing changes."""
    return _kernel(optimizer, core, slot, rows, positions, grads, step, False)


def apply_update(optimizer: SparseOptimizer, core, slot: dict[str, int], rows, positions, grads, step) -> None:
    """One optimizer step on ``rows``, in place (OPT-4..OPT-7), after first_nonfinite found nothing."""
    _kernel(optimizer, core, slot, rows, positions, grads, step, True)


def _kernel(optimizer: SparseOptimizer, core, slot: dict[str, int], rows, positions, grads, step, write: bool) -> int:
    opt = optimizer
    if isinstance(opt, SGD):                                  # OPT-4
        decay = opt.weight_decay is not None
        return sgd(core, rows, positions, grads, F32(opt.learning_rate), decay,
                   F32(opt.weight_decay) if decay else F32(0.0), write)
    if isinstance(opt, Adagrad):
        return adagrad(core, rows, positions, grads, F32(opt.learning_rate), slot["accumulator"], write)
    if isinstance(opt, LazyAdam):                             # OPT-5
        b1, b2, one = F32(opt.beta1), F32(opt.beta2), F32(1.0)
        return lazy_adam(core, rows, positions, grads, b1, one - b1, b2, one - b2,
                         opt.step_learning_rate(step), F32(opt.epsilon), slot["momentum"], slot["velocity"], write)
    if isinstance(opt, Ftrl):
        return ftrl(opt, core, slot, rows, positions, grads, write)
    raise TypeError(f"unknown optimizer {opt!r}")  # the reference raises the same, from apply_update


def ftrl(opt: Ftrl, core, slot: dict[str, int], rows, positions, grads, write: bool) -> int:
    """TensorFlow's ApplyFtrlV2, element-wise (OPT-6); checks or writes as _kernel."""
    scalars = (F32(opt.learning_rate), F32(opt.l1_regularization_strength),
               F32(opt.l2_regularization_strength), F32(opt.l2_shrinkage_regularization_strength))
    if opt.uses_sqrt:
        return ftrl_sqrt(core, rows, positions, grads, *scalars, slot["accum"], slot["linear"], write)
    # acc^-power comes from numpy, the function the reference calls: its SIMD power differs from
    # libm's powf in the last bit (see cext/_optimizers.pxi).  The check and the update each compute
    # it (the same bits): this FTRL variant is the rare one.
    acc, acc_new = ftrl_accumulate(core, rows, positions, grads, slot["accum"])
    power = F32(-opt.learning_rate_power)
    return ftrl_power(core, rows, positions, grads, acc_new, np.power(acc_new, power), np.power(acc, power),
                      *scalars, slot["accum"], slot["linear"], write)
