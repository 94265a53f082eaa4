"""Counter-based initial values: a key's first row depends only on
(initializer seed, key, column), never on call order or backend (INIT-1).

The generator is SplitMix64's finaliser applied to a counter built from the
seed, the key, the column and the redraw attempt.  Both backends call this one
module, so new rows are bit-identical by construction; the differential tests
still compare them, which catches a backend that forgets to call it.
"""
from __future__ import annotations

import numpy as np

from .config import TableConfig

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_KEY_STRIDE = np.uint64(0xD6E8FEB86659FD93)
_ATTEMPT_STRIDE = np.uint64(0xA0761D6478BD642F)
_TRUNCATION = 2.0  # stddevs, as tf.keras.initializers.TruncatedNormal
_MAX_ATTEMPTS = 64  # P(64 straight rejections) ~ 0.0455**64: never in practice


def _mix64(x: np.ndarray) -> np.ndarray:
    x = (x ^ (x >> np.uint64(30))) * _MIX1
    x = (x ^ (x >> np.uint64(27))) * _MIX2
    return x ^ (x >> np.uint64(31))


def uniform_bits(seed: int, keys: np.ndarray, dim: int, attempt: int = 0, stream: int = 0) -> np.ndarray:
    """Uniform doubles in [0, 1), shape [len(keys), dim], 53 bits each."""
    keys_u = keys.astype(np.int64).view(np.uint64)[:, None]
    cols = np.arange(dim, dtype=np.uint64)[None, :]
    # Python integers, reduced mod 2**64: numpy warns on scalar uint64 overflow.
    base = np.uint64((seed * int(_GOLDEN) + attempt * int(_ATTEMPT_STRIDE) + stream) % 2**64)
    counter = base + keys_u * _KEY_STRIDE + cols * _GOLDEN
    return (_mix64(_mix64(counter)) >> np.uint64(11)).astype(np.float64) * (1.0 / 2**53)


def initial_rows(config: TableConfig, keys: np.ndarray) -> np.ndarray:
    """The first values of ``keys``' rows, float32 [len(keys), dim] (INIT-1..INIT-3)."""
    keys = np.asarray(keys, dtype=np.int64).reshape(-1)
    init = config.initializer
    dim = config.dim
    if init.kind == "constant":
        values = np.full((keys.size, dim), init.value, dtype=np.float64)
    elif init.kind == "uniform":
        values = init.minval + (init.maxval - init.minval) * uniform_bits(init.seed, keys, dim)
    else:
        values = _truncated_normal(init.seed, keys, dim)
        values = init.mean + init.stddev * values
    return (values * config.init_param).astype(np.float32)


def _truncated_normal(seed: int, keys: np.ndarray, dim: int) -> np.ndarray:
    """Box-Muller normals, each element redrawn (next attempt counter) until
    within two standard deviations: a per-element rejection loop that stays a
    pure function of (seed, key, column)."""
    out = np.empty((keys.size, dim), dtype=np.float64)
    todo = np.ones(out.shape, dtype=bool)
    for attempt in range(_MAX_ATTEMPTS):
        u1 = uniform_bits(seed, keys, dim, attempt, stream=1)
        u2 = uniform_bits(seed, keys, dim, attempt, stream=2)
        z = np.sqrt(-2.0 * np.log1p(-u1)) * np.cos(2.0 * np.pi * u2)
        accept = todo & (np.abs(z) <= _TRUNCATION)
        out[accept] = z[accept]
        todo &= ~accept
        if not todo.any():
            return out
    out[todo] = 0.0  # unreachable in practice; keeps the function total
    return out
