"""The reference's optimizer rules (spec/optimizers.md): which rows an apply updates, the four
sparse optimizer updates in numpy float32 (OPT-2..OPT-7) and the overflow check.

Every operation is an IEEE float32 operation in a fixed order: the fast path
(mxrec_ref/fast/optimizers.py, cext/_optimizers.pxi, same function names) repeats the same
operations element by element, and the differential tests hold the two to bit-identical
results.  Scalars are ``np.float32`` so numpy never promotes to float64.
"""
from __future__ import annotations

import numpy as np

from ..optimizers import SGD, Adagrad, Ftrl, LazyAdam, SparseOptimizer
from .table import Table

F32 = np.float32


def resolve_rows(table: Table, keys: np.ndarray, mask: np.ndarray) -> tuple[list[int], np.ndarray]:
    """(positions, rows) of the gradient rows that update a row: re-resolved by key, so keys
    evicted since the lookup, pending keys and padding drop (OPT-2, ADM-4).  A LookupResult's
    keys too: the fast core's row handles are a checked shortcut to these same rows (OPT-9)."""
    positions, rows = [], []
    for i, key in enumerate(keys.tolist()):
        if mask[i] and key in table.row_of:
            positions.append(i)
            rows.append(table.row_of[key])
    return positions, np.array(rows, dtype=np.int64)


def first_nonfinite(weights: np.ndarray, slots: dict[str, np.ndarray]) -> int:
    """The first updated row holding NaN or Inf in its values or a slot, -1 if none (OPT-3)."""
    finite = np.isfinite(weights).all(axis=1)
    for array in slots.values():
        finite &= np.isfinite(array).all(axis=1)
    return -1 if finite.all() else int(np.argmin(finite))


def apply_update(optimizer: SparseOptimizer, weights: np.ndarray, slots: dict[str, np.ndarray],
                 grads: np.ndarray, step: int) -> None:
    """Update ``weights`` and ``slots`` (float32 [n, dim] gathered copies) in place."""
    if isinstance(optimizer, SGD):
        sgd(optimizer, weights, grads)
    elif isinstance(optimizer, Adagrad):
        adagrad(optimizer, weights, slots["accumulator"], grads)
    elif isinstance(optimizer, LazyAdam):
        lazy_adam(optimizer, weights, slots["momentum"], slots["velocity"], grads, step)
    elif isinstance(optimizer, Ftrl):
        ftrl(optimizer, weights, slots["accum"], slots["linear"], grads)
    else:  # pragma: no cover - the store rejects other optimizer types
        raise TypeError(f"unknown optimizer {optimizer!r}")


def sgd(opt: SGD, w, g):
    """OPT-4."""
    lr = F32(opt.learning_rate)
    if opt.weight_decay is not None:
        g = g + F32(opt.weight_decay) * w
    w -= lr * g


def adagrad(opt: Adagrad, w, acc, g):
    """Adagrad: acc += g*g; w -= lr*g / sqrt(acc)."""
    lr = F32(opt.learning_rate)
    acc += g * g
    w -= (lr * g) / np.sqrt(acc)


def lazy_adam(opt: LazyAdam, w, m, v, g, step):
    """OPT-5, on the rows a batch touches only."""
    b1, b2 = F32(opt.beta1), F32(opt.beta2)
    one = F32(1.0)
    lr_t = opt.step_learning_rate(step)
    eps = F32(opt.epsilon)
    m[...] = b1 * m + (one - b1) * g
    v[...] = b2 * v + (one - b2) * (g * g)
    w -= (lr_t * m) / (np.sqrt(v) + eps)


def ftrl(opt: Ftrl, w, acc, linear, g):
    """TensorFlow's ApplyFtrlV2, element-wise (OPT-6)."""
    lr = F32(opt.learning_rate)
    l1 = F32(opt.l1_regularization_strength)
    l2 = F32(opt.l2_regularization_strength)
    l2s = F32(opt.l2_shrinkage_regularization_strength)
    two = F32(2.0)
    acc_new = acc + g * g
    g_shrunk = g + two * l2s * w if l2s > 0 else g
    if opt.uses_sqrt:
        sigma = (np.sqrt(acc_new) - np.sqrt(acc)) / lr
        quadratic = np.sqrt(acc_new) / lr + two * l2
    else:
        power = F32(-opt.learning_rate_power)
        sigma = (np.power(acc_new, power) - np.power(acc, power)) / lr
        quadratic = np.power(acc_new, power) / lr + two * l2
    linear += g_shrunk - sigma * w
    sign_l1 = np.where(linear > 0, l1, -l1).astype(F32)
    w[...] = np.where(np.abs(linear) > l1, (sign_l1 - linear) / quadratic, F32(0.0)).astype(F32)
    acc[...] = acc_new
