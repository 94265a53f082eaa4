"""Hypothesis strategies shared by the property and differential tests."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from mxrec_ref import SGD, Adagrad, Ftrl, Initializer, LazyAdam, TableConfig

EXTREME_KEYS = [2**63 - 1, -(2**63), 2**62, -(2**31), 2**31 - 1, -2]


def key_values(key_dtype: str = "int64"):
    """Mostly a small key space (so keys repeat, get admitted and evicted),
    with padding and extreme keys mixed in."""
    extremes = [k for k in EXTREME_KEYS if key_dtype == "int64" or -(2**31) <= k < 2**31]
    return st.one_of(st.integers(0, 24), st.just(-1), st.sampled_from(extremes))


def key_batches(key_dtype: str = "int64", max_size: int = 24):
    return st.lists(key_values(key_dtype), max_size=max_size).map(lambda ks: np.array(ks, dtype=np.int64))


optimizers = st.one_of(
    st.builds(SGD, learning_rate=st.sampled_from([0.01, 0.5]), weight_decay=st.sampled_from([None, 1e-3])),
    st.builds(Adagrad, learning_rate=st.sampled_from([0.05, 1.0]),
              initial_accumulator_value=st.sampled_from([0.1, 0.9])),
    st.builds(LazyAdam, learning_rate=st.sampled_from([0.001, 0.1]), beta1=st.sampled_from([0.9, 0.5]),
              beta2=st.sampled_from([0.999, 0.9]), epsilon=st.sampled_from([1e-8, 1e-3])),
    st.builds(Ftrl, learning_rate=st.sampled_from([0.05, 0.5]), learning_rate_power=st.sampled_from([-0.5, -0.7]),
              l1_regularization_strength=st.sampled_from([0.0, 0.01]),
              l2_regularization_strength=st.sampled_from([0.0, 0.1]),
              l2_shrinkage_regularization_strength=st.sampled_from([0.0, 0.05])),
)

initializers = st.one_of(
    st.builds(Initializer, kind=st.just("truncated_normal"), stddev=st.sampled_from([0.05, 1.0]),
              seed=st.integers(0, 2**63 - 1)),
    st.builds(Initializer, kind=st.just("uniform"), minval=st.just(-0.5), maxval=st.just(0.5),
              seed=st.integers(0, 3)),
    st.builds(Initializer, kind=st.just("constant"), value=st.sampled_from([0.0, 0.25])),
)


@st.composite
def table_configs(draw):
    admission = draw(st.sampled_from([None, 0, 1, 2, 3]))
    eviction = draw(st.sampled_from([None, -1, 0, 1, 3])) if admission is not None else None
    return TableConfig(
        name="t",
        dim=draw(st.integers(1, 5)),
        key_dtype=draw(st.sampled_from(["int64", "int64", "int32"])),
        device_vocabulary_size=draw(st.integers(1, 12)),
        dynamic_expansion=draw(st.booleans()),
        access_threshold=admission,
        eviction_threshold=eviction,
        faae_coefficient=draw(st.integers(1, 3)),
        initializer=draw(initializers),
        init_param=draw(st.sampled_from([1.0, 0.5])),
        serving_default_value=draw(st.sampled_from([None, 0.5])),
    )


def gradients(n: int, dim: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(scale=0.5, size=(n, dim)).astype(np.float32)
