"""Counter-based initial values: a key's first row depends only on
(initializer seed, key, column), never on call order or backend (INIT-1).

The generator is SplitMix64's finaliser applied twice to a counter built from
the seed, the key, the column and the redraw attempt.  The integer mixing is
the hot part; it exists twice, here in numpy (``mix_bits``) and in the fast
path (``mxrec_ref._fast.mix_bits``, called through ``mxrec_ref.fast.initializers.mix_bits``),
and a property test holds them to identical bits.  Everything after the integers -- scaling, the Box-Muller transcendentals
-- is this module's numpy code, shared by both backends, so new rows are
bit-identical by construction.
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
_MAX_ATTEMPTS = 64  # P(64 straight rejections) ~ 0.0455**64: never in practice
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
        values = init.mean + init.stddev * _truncated_normal(init.seed, keys, dim, mix)
    return (values * config.init_param).astype(np.float32)


def _truncated_normal(seed: int, keys: np.ndarray, dim: int, mix: MixBits) -> np.ndarray:
    """Box-Muller normals; an element beyond two standard deviations is redrawn
    from the next attempt counter of its own (key, column), so the result stays
    a pure function of (seed, key, column) and only rejected elements are redrawn."""
    out = np.zeros(keys.size * dim, dtype=np.float64)
    todo_keys = np.repeat(keys, dim)
    todo_cols = np.tile(np.arange(dim, dtype=np.int64), keys.size)
    todo = np.arange(out.size)
    for attempt in range(_MAX_ATTEMPTS):
        if todo.size == 0:
            break
        u1 = uniform_at(seed, todo_keys, todo_cols, attempt, stream=1, mix=mix)
        u2 = uniform_at(seed, todo_keys, todo_cols, attempt, stream=2, mix=mix)
        z = np.sqrt(-2.0 * np.log1p(-u1)) * np.cos(2.0 * np.pi * u2)
        accept = np.abs(z) <= _TRUNCATION
        out[todo[accept]] = z[accept]
        reject = ~accept
        todo, todo_keys, todo_cols = todo[reject], todo_keys[reject], todo_cols[reject]
    return out.reshape(keys.size, dim)  # elements never accepted stay 0: unreachable in practice
