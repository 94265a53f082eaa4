"""The fast path's optimizer rules (spec/optimizers.md): the twins of mxrec_ref/ref/optimizers.py.

The update loops are cext/_optimizers.pxi's, named as the reference's functions; here, the
optimizer's scalar hyper-parameters are rounded to float32 exactly as the reference rounds them
(OPT-7) and passed down.
"""
from __future__ import annotations

import numpy as np

from ..optimizers import SGD, Adagrad, Ftrl, LazyAdam, SparseOptimizer

F32 = np.float32


def resolve_rows(core, keys: np.ndarray, mask: np.ndarray):
    """(positions, rows) of the gradient rows that update a row: re-resolved by key, so keys
    evicted since the lookup, pending keys and padding drop (OPT-2, ADM-4)."""
    return core.resolve_rows(keys, mask)


def first_nonfinite(core, rows: np.ndarray) -> int:
    """The first updated row holding NaN or Inf in its values or a slot, -1 if none (OPT-3)."""
    return core.first_nonfinite(rows)


def apply_update(optimizer: SparseOptimizer, core, slot: dict[str, int], rows, positions, grads, step) -> None:
    """One optimizer step on ``rows``, in place (OPT-4..OPT-7)."""
    opt = optimizer
    if isinstance(opt, SGD):                                  # OPT-4
        decay = opt.weight_decay is not None
        core.sgd(rows, positions, grads, F32(opt.learning_rate), decay,
                 F32(opt.weight_decay) if decay else F32(0.0))
    elif isinstance(opt, Adagrad):
        core.adagrad(rows, positions, grads, F32(opt.learning_rate), slot["accumulator"])
    elif isinstance(opt, LazyAdam):                           # OPT-5
        b1, b2, one = F32(opt.beta1), F32(opt.beta2), F32(1.0)
        core.lazy_adam(rows, positions, grads, b1, one - b1, b2, one - b2,
                       opt.step_learning_rate(step), F32(opt.epsilon), slot["momentum"], slot["velocity"])
    elif isinstance(opt, Ftrl):
        ftrl(opt, core, slot, rows, positions, grads)
    else:  # the reference raises the same, from apply_update
        raise TypeError(f"unknown optimizer {opt!r}")


def ftrl(opt: Ftrl, core, slot: dict[str, int], rows, positions, grads) -> None:
    """TensorFlow's ApplyFtrlV2, element-wise (OPT-6)."""
    scalars = (F32(opt.learning_rate), F32(opt.l1_regularization_strength),
               F32(opt.l2_regularization_strength), F32(opt.l2_shrinkage_regularization_strength))
    if opt.uses_sqrt:
        core.ftrl_sqrt(rows, positions, grads, *scalars, slot["accum"], slot["linear"])
        return
    # acc^-power comes from numpy, the function the reference calls: its
    # SIMD power differs from libm's powf in the last bit (see cext/_optimizers.pxi).
    acc, acc_new = core.ftrl_accumulate(rows, positions, grads, slot["accum"])
    power = F32(-opt.learning_rate_power)
    core.ftrl_power(rows, positions, grads, acc_new, np.power(acc_new, power), np.power(acc, power),
                    *scalars, slot["accum"], slot["linear"])
