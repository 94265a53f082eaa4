"""The fast path's initializer kernels (spec/initializers.md): mxrec_ref/initializers.py's
``initial_rows`` and ``mix_bits`` with the integer work in C (cext/_initializers.pxi), the same
float operations in the same order, so new rows are bit-identical (INIT-1, INIT-2, INIT-3, INIT-6)."""
from __future__ import annotations

import numpy as np

from .. import initializers as shared
from .._fast import mix_bits as _c_mix_bits, truncated_normal_rows, uniform_rows
from ..config import TableConfig


def initial_rows(config: TableConfig, keys: np.ndarray) -> np.ndarray:
    """initializers.initial_rows with uniform and truncated-normal rows entirely in C."""
    init = config.initializer
    if init.kind == "truncated_normal":
        return truncated_normal_rows(shared.counter_base(init.seed, 0, 1), np.ascontiguousarray(keys, dtype=np.int64),
                                     config.dim, float(init.mean), float(init.stddev), float(config.init_param))
    if init.kind == "uniform":
        return uniform_rows(shared.counter_base(init.seed, 0, 0), np.ascontiguousarray(keys, dtype=np.int64),
                            config.dim, float(init.minval), float(init.maxval) - float(init.minval),
                            float(config.init_param))
    return np.ascontiguousarray(shared.initial_rows(config, keys, mix=mix_bits), dtype=np.float32)


def mix_bits(base: int, keys: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """The initializer's integer kernel in C (INIT-2): same bits as initializers.mix_bits."""
    return _c_mix_bits(base, np.ascontiguousarray(keys, dtype=np.int64), np.ascontiguousarray(cols, dtype=np.int64))
