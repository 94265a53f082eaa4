"""Sparse optimizers (spec/optimizers.md)."""
import numpy as np
import pytest

from mxrec_ref import (SGD, Adagrad, ConfigError, Ftrl, GradientError, Initializer, LazyAdam, available_backends,
                       open_store)

from .checks import assert_unchanged, keys, make_store, snapshot

F32 = np.float32


def _constant_store(backend, optimizer, value=0.5, **extra):
    extra.setdefault("device_vocabulary_size", 16)
    return make_store(backend, optimizer, dim=3, initializer=Initializer(kind="constant", value=value), **extra)


def test_opt_1_raw_key_duplicates_are_summed(backend):
    store = _constant_store(backend, SGD(learning_rate=1.0))
    store.lookup(keys(1, 2), step=0)
    grads = np.array([[1, 0, 0], [0, 1, 0], [2, 0, 0]], dtype=np.float32)
    assert store.apply_gradients(keys(1, 2, 1), grads, step=0) == 2
    values = store.export().values
    assert values[0].tolist() == [0.5 - 3, 0.5, 0.5] and values[1].tolist() == [0.5, -0.5, 0.5]


def test_opt_2_dropped_rows(backend):
    store = _constant_store(backend, SGD(learning_rate=1.0), access_threshold=2, eviction_threshold=1)
    result = store.lookup(keys(1, 1, 2, -1), step=0, pad_to=4)     # 2 pending, -1 padding, one pad row
    store.lookup(keys(1, 1), step=1)
    store.evict()                                                   # forgets 2 (pending, last seen 0)
    applied = store.apply_gradients(result, np.ones((4, 3)), step=1)
    assert applied == 1
    stats = store.stats()
    assert (stats["grad_rows_applied"], stats["grad_rows_dropped"]) == (1, 3)
    evicted = _constant_store(backend, SGD(learning_rate=1.0), access_threshold=1, eviction_threshold=1)
    old = evicted.lookup(keys(5), step=0)
    evicted.lookup(keys(6), step=1)
    evicted.evict()
    assert evicted.apply_gradients(old, np.ones((1, 3)), step=1) == 0


@pytest.mark.parametrize("grads,match", [
    (np.ones((2, 2)), "shape must be"), (np.ones(3), "shape must be"),
    (np.array([[1, np.inf, 0]]), "NaN or Inf"), (np.array([[np.nan, 0, 0]]), "NaN or Inf"),
    ([["a", "b", "c"]], "float array"),
])
def test_opt_3_bad_gradients_change_nothing(backend, grads, match):
    store = _constant_store(backend, Adagrad())
    result = store.lookup(keys(1), step=0)
    before = snapshot(store)
    with pytest.raises(GradientError, match=match):
        store.apply_gradients(result, grads, step=0)
    assert_unchanged(store, before)


def _run(backend, optimizer, steps=3):
    store = _constant_store(backend, optimizer)
    rng = np.random.default_rng(0)
    grads = rng.normal(size=(steps, 2, 3)).astype(np.float32)
    for step in range(steps):
        result = store.lookup(keys(4, 9), step=step)
        store.apply_gradients(result, grads[step], step=step)
    return store.export(), grads


def test_opt_4_sgd_with_and_without_weight_decay(backend):
    state, grads = _run(backend, SGD(learning_rate=0.1))
    w = np.full((2, 3), 0.5, np.float32)
    for g in grads:
        w = w - F32(0.1) * g
    assert np.array_equal(state.values, w)
    state, grads = _run(backend, SGD(learning_rate=0.1, weight_decay=0.01))
    w = np.full((2, 3), 0.5, np.float32)
    for g in grads:
        w = w - F32(0.1) * (g + F32(0.01) * w)
    assert np.array_equal(state.values, w)


def test_opt_4_adagrad_matches_tensorflow(backend):
    """OPT-8: checked against TensorFlow's ApplyAdagrad kernel."""
    import tensorflow as tf

    state, grads = _run(backend, Adagrad(learning_rate=0.1, initial_accumulator_value=0.2))
    var = tf.Variable(np.full((2, 3), 0.5, np.float32))
    acc = tf.Variable(np.full((2, 3), 0.2, np.float32))
    for g in grads:
        tf.raw_ops.ResourceApplyAdagrad(var=var.handle, accum=acc.handle, lr=0.1, grad=g)
    np.testing.assert_allclose(state.values, var.numpy(), rtol=2e-6)
    np.testing.assert_allclose(state.slots["accumulator"], acc.numpy(), rtol=1e-6)


def test_opt_5_lazy_adam_bias_correction_by_step(backend):
    opt = LazyAdam(learning_rate=0.01, beta1=0.9, beta2=0.99, epsilon=1e-7)
    state, grads = _run(backend, opt)
    w = np.full((2, 3), 0.5, np.float64)
    m = np.zeros_like(w)
    v = np.zeros_like(w)
    for step, g in enumerate(grads):
        t = step + 1
        m = 0.9 * m + 0.1 * g
        v = 0.99 * v + 0.01 * g * g
        w = w - 0.01 * np.sqrt(1 - 0.99**t) / (1 - 0.9**t) * m / (np.sqrt(v) + 1e-7)
    np.testing.assert_allclose(state.values, w, rtol=1e-5)
    np.testing.assert_allclose(state.slots["momentum"], m, rtol=1e-5)


@pytest.mark.parametrize("power,l1,l2,shrink", [(-0.5, 0.0, 0.0, 0.0), (-0.5, 0.05, 0.1, 0.02),
                                                 (-0.7, 0.01, 0.0, 0.0)])
def test_opt_6_ftrl_matches_tensorflow(backend, power, l1, l2, shrink):
    """OPT-8: checked against TensorFlow's ApplyFtrlV2 kernel."""
    import tensorflow as tf

    opt = Ftrl(learning_rate=0.1, learning_rate_power=power, initial_accumulator_value=0.1,
               l1_regularization_strength=l1, l2_regularization_strength=l2,
               l2_shrinkage_regularization_strength=shrink)
    state, grads = _run(backend, opt)
    var = tf.Variable(np.full((2, 3), 0.5, np.float32))
    acc = tf.Variable(np.full((2, 3), 0.1, np.float32))
    lin = tf.Variable(np.zeros((2, 3), np.float32))
    for g in grads:
        tf.raw_ops.ResourceApplyFtrlV2(var=var.handle, accum=acc.handle, linear=lin.handle, grad=g, lr=0.1,
                                       l1=l1, l2=l2, l2_shrinkage=shrink, lr_power=power)
    np.testing.assert_allclose(state.values, var.numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(state.slots["linear"], lin.numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(state.slots["accum"], acc.numpy(), rtol=1e-6)


def test_opt_7_float32_bit_exact_against_reference_formula(backend):
    store = _constant_store(backend, Adagrad(learning_rate=0.3, initial_accumulator_value=0.7))
    result = store.lookup(keys(3), step=0)
    g = np.array([[0.1, -2.5, 1e-3]], np.float32)
    store.apply_gradients(result, g, step=0)
    acc = F32(0.7) + g * g
    w = F32(0.5) - (F32(0.3) * g) / np.sqrt(acc)
    assert store.export().values.view(np.uint32).tolist() == w.view(np.uint32).tolist()


@pytest.mark.parametrize("optimizer", [SGD(learning_rate=1.0), Adagrad(learning_rate=0.1), LazyAdam(), Ftrl()])
def test_opt_3_duplicate_rows_whose_sum_overflows_are_rejected(backend, optimizer):
    """Each row is finite, their sum for one key is not: checked after the merge."""
    store = _constant_store(backend, optimizer)
    store.lookup(keys(1, 2), step=0)
    before = snapshot(store)
    grads = np.array([[3e38, 0, 0], [1, 1, 1], [3e38, 0, 0]], dtype=np.float32)
    with pytest.raises(GradientError, match=r"table 't': grad_rows: key 1: the sum of its duplicate rows overflows"):
        store.apply_gradients(keys(1, 2, 1), grads, step=0)
    assert_unchanged(store, before)
    assert np.isfinite(store.export().values).all()


@pytest.mark.parametrize("optimizer", [SGD(learning_rate=10.0), Adagrad(learning_rate=0.1),
                                       LazyAdam(learning_rate=0.1), Ftrl(learning_rate=0.1)])
def test_opt_3_an_update_that_overflows_is_rejected_and_changes_nothing(backend, optimizer):
    """Finite gradients whose update leaves Inf or NaN (lr * g, g * g): the
    update is checked before it is kept; hot rows are restored too."""
    store = _constant_store(backend, optimizer)
    result = store.lookup(keys(1, 2, 3), step=0)
    before = snapshot(store)
    grads = np.ones((3, 3), dtype=np.float32)
    grads[1] = -3e38                        # key 2: w - lr*g overflows (SGD), g*g overflows (the others)
    grads[2] = 3e38
    with pytest.raises(GradientError, match=rf"table 't': grad_rows: key 2: the {optimizer.kind} update overflows"):
        store.apply_gradients(result, grads, step=0)
    assert_unchanged(store, before)
    assert store.apply_gradients(result, np.ones((3, 3)), step=0) == 3


def test_opt_3_overflow_errors_agree_between_backends():
    if "fast" not in available_backends():
        pytest.skip("the fast path is not built")
    errors = []
    for backend in ("ref", "fast"):
        store = _constant_store(backend, Adagrad(learning_rate=0.1))
        result = store.lookup(keys(4, 5, 6), step=0)
        grads = np.ones((3, 3), dtype=np.float32)
        grads[2, 1] = 2e19
        with pytest.raises(GradientError) as info:
            store.apply_gradients(result, grads, step=0)
        errors.append(str(info.value))
    assert errors[0] == errors[1] and "key 6" in errors[0]


def test_opt_3_a_rejected_update_leaves_hot_rows_as_they_were(backend, monkeypatch):
    monkeypatch.setenv("HOT_EMB_UPDATE_STEP", "1")          # refresh the hot set after every training lookup
    store = open_store(_constant_store(backend, SGD(learning_rate=10.0)).config, SGD(learning_rate=10.0),
                       backend=backend, hot_rows=4)
    result = store.lookup(keys(1, 2), step=0)
    assert store.stats()["hot_rows"] == 2
    rows = store.lookup(keys(1, 2), train=False).rows.copy()
    with pytest.raises(GradientError, match="overflows"):
        store.apply_gradients(result, np.array([[1, 1, 1], [-3e38, 0, 0]], dtype=np.float32), step=0)
    assert np.array_equal(store.lookup(keys(1, 2), train=False).rows, rows)


def _zipf_batches(n, size=400, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.zipf(1.3, size) % 3000).astype(np.int64) for _ in range(n)]


def test_opt_9_apply_by_result_equals_apply_by_keys(backend):
    """OPT-9: a LookupResult's apply (no merge, the lookup's rows reused) leaves exactly the state and
    statistics of the same apply given the result's unique keys, through growth, admission and eviction."""
    stores = [make_store(backend, Adagrad(learning_rate=0.1), dim=4, device_vocabulary_size=256,
                         dynamic_expansion=True, access_threshold=2, eviction_threshold=3,
                         initializer=Initializer(stddev=0.1, seed=5)) for _ in range(2)]
    rng = np.random.default_rng(1)
    for step, batch in enumerate(_zipf_batches(12)):
        results = [store.lookup(batch, step=step) for store in stores]
        assert np.array_equal(results[0].rows, results[1].rows)
        grads = rng.standard_normal((len(results[0].unique_keys), 4)).astype(F32)
        applied = [stores[0].apply_gradients(results[0], grads, step=step),
                   stores[1].apply_gradients(np.array(results[1].unique_keys), grads, step=step)]
        assert applied[0] == applied[1]
        if step % 4 == 3:
            for store in stores:
                store.evict()
    assert stores[0].export().differences(stores[1].export()) == []
    assert stores[0].stats() == stores[1].stats()


def test_opt_9_a_stale_result_lands_on_the_keys_rows(backend):
    """OPT-9: between lookup and apply the result's keys are evicted and their rows handed to other keys
    (and to the same keys again); the apply still updates each key's current row, and no other."""
    def store():
        return _constant_store(backend, SGD(learning_rate=1.0), device_vocabulary_size=5, access_threshold=1,
                               eviction_threshold=1)

    stale, by_keys = store(), store()
    results = [s.lookup(keys(1, 2, 3), step=0) for s in (stale, by_keys)]
    for s in (stale, by_keys):
        s.lookup(keys(9), step=1)
        s.evict()                                   # 1, 2, 3 go; their rows are free
        s.lookup(keys(6, 3, 7, 2), step=1)          # the freed rows return, to other keys and to 3 and 2
    grads = np.array([[1, 0, 0], [2, 0, 0], [3, 0, 0]], dtype=F32)
    assert stale.apply_gradients(results[0], grads, step=1) == 2           # 1 holds no row: dropped
    assert by_keys.apply_gradients(np.array(results[1].unique_keys), grads, step=1) == 2
    state = stale.export()
    assert state.differences(by_keys.export()) == []
    values = dict(zip(state.keys.tolist(), state.values[:, 0].tolist()))
    assert values == {2: 0.5 - 2, 3: 0.5 - 3, 6: 0.5, 7: 0.5, 9: 0.5}


def test_opt_9_a_key_admitted_after_its_lookup_takes_its_gradient(backend):
    """OPT-9: lookup-time ``admitted`` masks nothing.  Key 4 is pending at the first lookup and admitted
    by a second training lookup before the first result's apply (two lookups of one table in a step,
    or a lookup run ahead of its apply): the result's apply updates key 4's row, as the apply by the
    result's unique keys does; padding is still dropped."""
    def store():
        return _constant_store(backend, SGD(learning_rate=1.0), access_threshold=2)

    by_result, by_keys = store(), store()
    results = [s.lookup(keys(4, 5, 5), step=0, pad_to=3) for s in (by_result, by_keys)]
    assert results[0].admitted.tolist() == [False, True, False]       # 4 pending, 5 admitted, one pad row
    for s in (by_result, by_keys):
        s.lookup(keys(4), step=0)                                    # 4 reaches the threshold: a row
    grads = np.array([[1, 0, 0], [2, 0, 0], [7, 0, 0]], dtype=F32)
    assert by_result.apply_gradients(results[0], grads, step=0) == 2
    assert by_keys.apply_gradients(np.array(results[1].unique_keys), grads, step=0) == 2
    state = by_result.export()
    assert state.differences(by_keys.export()) == [] and by_result.stats() == by_keys.stats()
    assert dict(zip(state.keys.tolist(), state.values[:, 0].tolist())) == {4: 0.5 - 1, 5: 0.5 - 2}
    assert by_result.stats()["grad_rows_dropped"] == 1


def test_opt_9_fast_handles_are_checked_before_use(fast_backend):
    """OPT-9 in the fast core: handles that name another key's row, a free row or no row at all are
    re-resolved by key; the result equals resolving every key by key."""
    from mxrec_ref.fast import optimizers as fast_optimizers   # local: the fast path may not be built (fast_backend skips first)

    store = _constant_store("fast", SGD(learning_rate=1.0), device_vocabulary_size=64)
    batch = np.arange(40, dtype=np.int64)
    store.lookup(batch, step=0)
    core = store.engine.core
    mask = np.ones(40, dtype=bool)
    mask[5] = False
    expected = fast_optimizers.resolve_rows(core, batch, mask)
    rng = np.random.default_rng(3)
    for handles in (expected[1][::-1].copy(), rng.integers(-5, 200, 40), np.full(40, -1, np.int64)):
        got = fast_optimizers.resolve_rows(core, batch, mask, np.resize(handles, 40).astype(np.int64))
        assert all(np.array_equal(a, b) for a, b in zip(got, expected))


_EVERY_KIND = [SGD(learning_rate=0.1), SGD(learning_rate=0.1, weight_decay=1e-3), Adagrad(learning_rate=0.1),
               LazyAdam(learning_rate=0.1), Ftrl(learning_rate=0.1)]


@pytest.mark.parametrize("optimizer", _EVERY_KIND, ids=lambda o: o.kind)
def test_opt_10_learning_rate_of_one_apply(backend, optimizer):
    """apply_gradients(..., learning_rate=lr) updates exactly as a store configured with lr would, for
    that call only: the next apply without one uses the store's own learning rate again."""
    import dataclasses
    given = _constant_store(backend, optimizer)
    configured = _constant_store(backend, dataclasses.replace(optimizer, learning_rate=0.37))
    grads = np.array([[1, -2, 0.5], [0.25, 1, -1]], dtype=np.float32)
    for store, rate in ((given, 0.37), (configured, None)):
        result = store.lookup(keys(1, 2), step=0)
        store.apply_gradients(result, grads, step=0, learning_rate=rate)
    assert given.export().differences(configured.export()) == []
    assert given.optimizer == optimizer                               # the store's own is unchanged
    plain = _constant_store(backend, optimizer)                       # and used by the next apply
    for store in (given, plain):
        if store is plain:
            store.lookup(keys(1, 2), step=0)
            store.apply_gradients(keys(1, 2), grads, step=0, learning_rate=0.37)
        store.lookup(keys(1, 2), step=1)
        store.apply_gradients(keys(1, 2), grads, step=1)
    assert given.export().differences(plain.export()) == []


@pytest.mark.parametrize("rate", [11.0, -0.5, float("nan"), float("inf"), "0.1", True])
def test_opt_10_a_bad_learning_rate_changes_nothing(backend, rate):
    store = _constant_store(backend, Adagrad(learning_rate=0.1))
    result = store.lookup(keys(1, 2), step=0)
    before = snapshot(store)
    with pytest.raises(ConfigError, match=r"table 't': learning_rate: .*learning_rate"):
        store.apply_gradients(result, np.ones((2, 3), np.float32), step=0, learning_rate=rate)
    assert_unchanged(store, before)


def test_opt_10_ftrl_learning_rate_must_be_positive(backend):
    store = _constant_store(backend, Ftrl(learning_rate=0.1))
    result = store.lookup(keys(1), step=0)
    with pytest.raises(ConfigError, match="learning_rate"):
        store.apply_gradients(result, np.ones((1, 3), np.float32), step=0, learning_rate=0.0)
