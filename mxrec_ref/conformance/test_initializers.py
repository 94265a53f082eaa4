"""Initial values (spec/initializers.md)."""
import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from mxrec_ref import Adagrad, Ftrl, Initializer, LazyAdam, TableConfig, initializers

from .checks import keys, make_store


def test_init_1_first_row_independent_of_order_and_store(backend):
    a = make_store(backend, device_vocabulary_size=16, dim=8)
    b = make_store("ref", device_vocabulary_size=16, dim=8)
    ra = a.lookup(keys(1, 2, 3, 2**62), step=0)
    b.lookup(keys(5), step=0)
    rb = b.lookup(keys(2**62, 3, 2, 1), step=1)
    assert np.array_equal(ra.rows, rb.rows[::-1])


def test_init_2_generator_is_a_pure_function_of_seed_key_column():
    config = TableConfig("t", dim=3, initializer=Initializer(kind="uniform", minval=0, maxval=1, seed=7))
    whole = initializers.initial_rows(config, keys(1, 2, 3))
    single = initializers.initial_rows(config, keys(2))
    assert np.array_equal(whole[1], single[0])
    u = initializers.uniform_bits(7, keys(2), 3)
    assert np.all((u >= 0) & (u < 1))
    assert len(set(whole.ravel().tolist())) == 9     # columns and keys draw different numbers


def test_init_3_kinds_and_init_param():
    constant = TableConfig("t", dim=2, initializer=Initializer(kind="constant", value=0.5), init_param=2.0)
    assert initializers.initial_rows(constant, keys(1, 9)).tolist() == [[1.0, 1.0]] * 2
    uniform = TableConfig("t", dim=64, initializer=Initializer(kind="uniform", minval=-1, maxval=3))
    u = initializers.initial_rows(uniform, np.arange(2000))
    assert u.min() >= -1 and u.max() < 3 and abs(u.mean() - 1.0) < 0.05
    normal = TableConfig("t", dim=64, initializer=Initializer(mean=1.0, stddev=0.5), init_param=1.0)
    z = initializers.initial_rows(normal, np.arange(2000))
    assert z.min() >= 1.0 - 1.0 and z.max() <= 1.0 + 1.0        # truncated at 2 stddevs
    assert abs(z.mean() - 1.0) < 0.01
    assert 0.40 < z.std() < 0.46                                 # 0.5 * 0.8796 for a 2-sigma truncation
    assert z.dtype == np.float32


def _normal_cdf(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def test_init_6_truncated_normal_is_the_quantile_of_the_two_sigma_normal():
    """INIT-6: z = Phi^-1(Phi(-2) + u * (Phi(2) - Phi(-2))) to double precision, for uniforms across [0, 1)
    including the central/tail border (|q| = 0.425) and both ends; never outside [-2, 2], odd about u = 1/2."""
    border = 0.5 + 0.425 / initializers.NORMAL_MASS_WITHIN_2
    u = np.concatenate([np.linspace(0.0, 1.0, 4001)[:-1], [1.0 - 2.0**-53, border, 1.0 - border],
                        np.nextafter(border, [0.0, 1.0]), np.nextafter(1.0 - border, [0.0, 1.0])])
    z = initializers.truncated_normal_z(u)
    p = _normal_cdf(-2.0) + u * (_normal_cdf(2.0) - _normal_cdf(-2.0))
    assert max(abs(_normal_cdf(zi) - pi) for zi, pi in zip(z, p)) < 1e-14
    assert z.min() == -2.0 and z.max() <= 2.0 and np.all(np.diff(z[:4000]) > 0)
    x = np.geomspace(0.02, 1.0, 500)
    assert np.max(np.abs(initializers.fixed_log(x) - np.log(x))) < 1e-15


def test_init_6_truncated_normal_statistics(backend):
    """Mean 0, standard deviation 0.8796 (the 2-sigma truncated normal's), all within 2 sigma: checked on rows
    the backend's store makes, so the C kernel's values are held to the distribution too."""
    store = make_store(backend, device_vocabulary_size=20000, dim=16,
                       initializer=Initializer(mean=0.0, stddev=1.0, seed=11))
    rows = store.lookup(np.arange(20000, dtype=np.int64), step=0).rows.astype(np.float64)
    assert rows.min() >= -2.0 and rows.max() <= 2.0 and rows.min() < -1.99 and rows.max() > 1.99
    assert abs(rows.mean()) < 0.008                              # 5 standard errors at n = 320k
    assert abs(rows.std() - 0.8796) < 0.004
    assert abs(np.mean(np.abs(rows) > 1.0) - 0.2866) < 0.005   # P(|z|>1 | |z|<=2) = (0.3173-0.0455)/0.9545


def test_init_4_seeds_differ():
    a = TableConfig("t", dim=8, initializer=Initializer(seed=1))
    b = TableConfig("t", dim=8, initializer=Initializer(seed=2))
    assert not np.array_equal(initializers.initial_rows(a, keys(1)), initializers.initial_rows(b, keys(1)))


@pytest.mark.parametrize("optimizer,expected", [
    (Adagrad(initial_accumulator_value=0.3), {"accumulator": 0.3}),
    (LazyAdam(), {"momentum": 0.0, "velocity": 0.0}),
    (Ftrl(initial_accumulator_value=0.2), {"accum": 0.2, "linear": 0.0}),
])
def test_init_5_slot_initial_values(backend, optimizer, expected):
    store = make_store(backend, optimizer, device_vocabulary_size=4)
    store.lookup(keys(1, 2), step=0)
    slots = store.export().slots
    assert sorted(slots) == sorted(expected)
    for name, value in expected.items():
        assert np.all(slots[name] == np.float32(value))


@given(seed=st.integers(0, 2**63 - 1), attempt=st.integers(0, 63), stream=st.integers(0, 2),
       keys=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=40))
def test_init_2_fast_integer_kernel_matches_numpy(fast_backend, seed, attempt, stream, keys):
    """The fast path's C mix_bits gives the numpy kernel's bits exactly."""
    from mxrec_ref.fast.initializers import mix_bits as _mix_bits   # local: the fast path may not be built (fast_backend skips first)

    keys = np.array(keys, dtype=np.int64)
    cols = np.arange(keys.size, dtype=np.int64) % 7
    base = initializers.counter_base(seed, attempt, stream)
    assert np.array_equal(initializers.mix_bits(base, keys, cols), _mix_bits(base, keys, cols))


@given(seed=st.integers(0, 2**63 - 1), minval=st.floats(-5, 0), width=st.floats(1e-3, 7),
       scale=st.sampled_from([1.0, 0.5, -3.0, 10.0]), dim=st.integers(1, 9),
       keys=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=30))
def test_init_3_fast_uniform_rows_match_numpy(fast_backend, seed, minval, width, scale, dim, keys):
    """The fast path's one-pass C uniform rows equal the shared numpy formula bit for bit."""
    from mxrec_ref.fast.initializers import initial_rows as _initial_rows   # local: the fast path may not be built

    config = TableConfig("t", dim=dim, init_param=scale,
                         initializer=Initializer(kind="uniform", minval=minval, maxval=minval + width, seed=seed))
    keys = np.array(keys, dtype=np.int64)
    expected = initializers.initial_rows(config, keys)
    assert np.array_equal(_initial_rows(config, keys).view(np.uint32), expected.view(np.uint32))
