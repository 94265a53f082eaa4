"""Counter-based initial values: a key's first row depends only on
(initializer seed, key, column), never on call order or backend (INIT-1).

The generator is SplitMix64's finaliser applied twice to a counter built from
the seed, the key, the column and the redraw attempt.  The integer mixing is
the hot part; it exists twice, here in numpy (``mix_bits``) and in the fast
path (``mxrec_ref._fast.mix_bits``, called through ``mxrec_ref.fast.initializers.mix_bits``),
and a property test holds them to identical bits.  The truncated normal's float
work (INIT-6) is also written twice, ``truncated_normal_rows`` here and in
cext/_initializers.pxi: a fixed sequence of IEEE + - * / and sqrt (each exactly
rounded in numpy and in C without FMA contraction), never a libm or SIMD
transcendental, so both give the same bits.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from .config import TableConfig

# The hashing constants (INIT-2), the Python side's only copy: cext/_fast_helpers.h holds the C
# side's, exported as mxrec_ref._fast.HASH_CONSTANTS, and a test holds the two equal.
HASH_CONSTANTS = {
    "mix1": 0xBF58476D1CE4E5B9,        # SplitMix64's finaliser
    "mix2": 0x94D049BB133111EB,
    "key_stride": 0xD6E8FEB86659FD93,  # counter += key * this
    "golden": 0x9E3779B97F4A7C15,      # counter += column * this (2^64 / phi); also seed * this
}
_ATTEMPT_STRIDE = 0xA0761D6478BD642F   # counter_base only, which runs in Python for both backends
_GOLDEN = HASH_CONSTANTS["golden"]
_MIX1 = np.uint64(HASH_CONSTANTS["mix1"])
_MIX2 = np.uint64(HASH_CONSTANTS["mix2"])
_KEY_STRIDE = np.uint64(HASH_CONSTANTS["key_stride"])
_TRUNCATION = 2.0  # stddevs, as tf.keras.initializers.TruncatedNormal
# INIT-6's constants; cext/_initializers.pxi repeats them digit for digit (a twin test holds the bits equal).
NORMAL_MASS_WITHIN_2 = 0.9544997361036416   # Phi(2) - Phi(-2) = erf(sqrt(2))
# Wichura's AS241 (PPND16) rational approximations of the normal quantile, highest degree first.
CENTRAL_NUM = (2.5090809287301226727e3, 3.3430575583588128105e4, 6.7265770927008700853e4,
                4.5921953931549871457e4, 1.3731693765509461125e4, 1.9715909503065514427e3,
                1.3314166789178437745e2, 3.3871328727963666080e0)
CENTRAL_DEN = (5.2264952788528545610e3, 2.8729085735721942674e4, 3.9307895800092710610e4,
                2.1213794301586595867e4, 5.3941960214247511077e3, 6.8718700749205790830e2,
                4.2313330701600911252e1, 1.0)
TAIL_NUM = (7.74545014278341407640e-4, 2.27238449892691845833e-2, 2.41780725177450611770e-1,
             1.27045825245236838258e0, 3.64784832476320460504e0, 5.76949722146069140550e0,
             4.63033784615654529590e0, 1.42343711074968357734e0)
TAIL_DEN = (1.05075007164441684324e-9, 5.47593808499534494600e-4, 1.51986665636164571966e-2,
             1.48103976427480074590e-1, 6.89767334985100004550e-1, 1.67638483018380384940e0,
             2.05319162663775882187e0, 1.0)
# log(m) = 2 atanh(s) = 2 s (1 + s^2/3 + s^4/5 + ...), s = (m-1)/(m+1), |s| <= 0.1716: 12 terms
# leave a relative error below 1e-17, far under float32's rounding of the final row.
_LOG_SERIES = tuple(1.0 / (2 * k + 1) for k in reversed(range(12)))   # highest degree first
_LN2 = 0.6931471805599453
_SQRT_HALF = 0.7071067811865476
_2_53 = 1.0 / 2**53

# mix_bits(base, keys, cols) -> uint64 [n]: the integer part, elementwise
MixBits = Callable[[int, np.ndarray, np.ndarray], np.ndarray]


def _mix64(x: np.ndarray) -> np.ndarray:
    x = (x ^ (x >> np.uint64(30))) * _MIX1
    x = (x ^ (x >> np.uint64(27))) * _MIX2
    return x ^ (x >> np.uint64(31))


def mix_bits(base: int, keys: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """mix64(mix64(base + key*K + col*phi)) mod 2**64, elementwise (INIT-2)."""
    counter = np.uint64(base) + keys.astype(np.int64).view(np.uint64) * _KEY_STRIDE \
        + cols.astype(np.uint64) * np.uint64(_GOLDEN)
    return _mix64(_mix64(counter))


def counter_base(seed: int, attempt: int, stream: int) -> int:
    # Python integers reduced mod 2**64: numpy warns on scalar uint64 overflow.
    return (seed * _GOLDEN + attempt * _ATTEMPT_STRIDE + stream) % 2**64


def uniform_at(seed: int, keys: np.ndarray, cols: np.ndarray, attempt: int = 0, stream: int = 0,
               mix: MixBits = mix_bits) -> np.ndarray:
    """Uniform doubles in [0, 1) with 53 random bits, one per (key, column) pair."""
    bits = mix(counter_base(seed, attempt, stream), keys, cols)
    return (bits >> np.uint64(11)).astype(np.float64) * _2_53


def uniform_bits(seed: int, keys: np.ndarray, dim: int, attempt: int = 0, stream: int = 0,
                 mix: MixBits = mix_bits) -> np.ndarray:
    """Uniform doubles in [0, 1), shape [len(keys), dim]."""
    keys = np.asarray(keys, dtype=np.int64).reshape(-1)
    grid_keys = np.repeat(keys, dim)
    grid_cols = np.tile(np.arange(dim, dtype=np.int64), keys.size)
    return uniform_at(seed, grid_keys, grid_cols, attempt, stream, mix).reshape(keys.size, dim)


def initial_rows(config: TableConfig, keys: np.ndarray, mix: MixBits = mix_bits) -> np.ndarray:
    """The first values of ``keys``' rows, float32 [len(keys), dim] (INIT-1..INIT-3).
    ``mix`` is the integer kernel: this module's numpy one or the fast path's."""
    keys = np.asarray(keys, dtype=np.int64).reshape(-1)
    init = config.initializer
    dim = config.dim
    if init.kind == "constant":
        values = np.full((keys.size, dim), init.value, dtype=np.float64)
    elif init.kind == "uniform":
        values = init.minval + (init.maxval - init.minval) * uniform_bits(init.seed, keys, dim, mix=mix)
    else:
        return truncated_normal_rows(counter_base(init.seed, 0, 1), keys, dim, float(init.mean), float(init.stddev),
                                     float(config.init_param), mix)
    return (values * config.init_param).astype(np.float32)


def _horner(coefficients: tuple, x: np.ndarray) -> np.ndarray:
    """((c0*x + c1)*x + c2)... : one multiply, then one add, per coefficient, in this order."""
    acc = np.full_like(x, coefficients[0])
    for c in coefficients[1:]:
        acc = acc * x + c
    return acc


def fixed_log(x: np.ndarray) -> np.ndarray:
    """Natural log of positive doubles in INIT-6's fixed arithmetic: x = m * 2**e exactly
    (frexp), m moved into [sqrt(1/2), sqrt(2)), then e*ln2 + 2s*P(s*s) with s = (m-1)/(m+1)."""
    m, e = np.frexp(x)
    low = m < _SQRT_HALF
    m = np.where(low, m * 2.0, m)                       # exact
    e = (e - low).astype(np.float64)
    s = (m - 1.0) / (m + 1.0)
    return e * _LN2 + (2.0 * s) * _horner(_LOG_SERIES, s * s)


def truncated_normal_z(u: np.ndarray) -> np.ndarray:
    """INIT-6: the standard normal truncated to [-2, 2] at the uniform u in [0, 1), by the
    inverse CDF (AS241) -- so no element is ever redrawn.  Float64, fixed operation order."""
    q = (u - 0.5) * NORMAL_MASS_WITHIN_2                # p - 1/2, with p = Phi(-2) + u * mass
    central = np.abs(q) <= 0.425
    z = np.empty_like(q)
    qc = q[central]
    r = 0.180625 - qc * qc
    z[central] = (qc * _horner(CENTRAL_NUM, r)) / _horner(CENTRAL_DEN, r)
    qt = q[~central]
    r = np.sqrt(-fixed_log(0.5 - np.abs(qt))) - 1.6
    tail = _horner(TAIL_NUM, r) / _horner(TAIL_DEN, r)
    z[~central] = np.where(qt < 0.0, -tail, tail)
    return np.minimum(np.maximum(z, -_TRUNCATION), _TRUNCATION)


def truncated_normal_rows(base: int, keys: np.ndarray, dim: int, mean: float, stddev: float, scale: float,
                          mix: MixBits = mix_bits) -> np.ndarray:
    """Truncated-normal initial rows (INIT-3, INIT-6): float32((mean + stddev * z) * scale), z from one
    uniform per (key, column) drawn on counter ``base``.  cext/_initializers.pxi has the C twin."""
    keys = np.asarray(keys, dtype=np.int64).reshape(-1)
    grid_keys = np.repeat(keys, dim)
    grid_cols = np.tile(np.arange(dim, dtype=np.int64), keys.size)
    bits = mix(base, grid_keys, grid_cols)
    z = truncated_normal_z((bits >> np.uint64(11)).astype(np.float64) * _2_53)
    return ((mean + stddev * z) * scale).astype(np.float32).reshape(keys.size, dim)
