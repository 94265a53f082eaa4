"""The fast path against the reference, step by step (spec/backends.md, BE-1).

The comparison machine (``machines.RefVersusFast``) drives one reference store
and one store of the backend under test through the same random calls and
asserts after every step that the two agree bit for bit: results, exported
state, statistics, row placement and errors.  Below it, the kernels both
backends have (dedup, mix_bits, uniform rows, record checksums, the hot
choice) are tested one by one, one test class bound to each implementation.
"""
import math
import zlib
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from hypothesis.stateful import run_state_machine_as_test

from mxrec_ref import Adagrad, Initializer, TableConfig, hot, initializers
from mxrec_ref.ref import admission as ref_admission, lookup as ref_lookup
from mxrec_ref.ref.table import Table

from .machines import RefVersusFast
from .plugin import backends_under_test, require_fast

def test_be_1_agrees_with_the_reference_step_by_step(other_backend, monkeypatch):
    """BE-1, OPT-7, TIER-11, HOT-4: bit-identical behaviour, the same tier
    placement and the same hot sets on random call sequences (the fast path, or the third-party store under
    test, against the reference)."""
    monkeypatch.setenv("HOT_EMB_UPDATE_STEP", "2")   # hot refreshes every other training lookup (HOT-4)
    run_state_machine_as_test(lambda: RefVersusFast(other_backend),
                              settings=settings(settings.default, stateful_step_count=30))


def test_be_1_agrees_on_a_fixed_admission_and_eviction_sequence(other_backend):
    """BE-1 on one fixed call sequence, so that a store breaking admission or
    eviction is caught whatever the random search draws: thresholds above 1,
    repeated and weighted keys, applies, eviction, save, cross-load and warm
    start, with the machine's agreement check after every call."""
    machine = RefVersusFast(other_backend)
    try:
        config = TableConfig(name="t", dim=3, device_vocabulary_size=8, dynamic_expansion=True,
                             access_threshold=3, eviction_threshold=2, faae_coefficient=2)
        machine.open(config=config, optimizer=Adagrad(learning_rate=0.5), storage="hbm", device_rows=8,
                     host_rows=1, hot_rows=0)
        calls = [
            ("train_lookup", dict(batch=np.array([1, 1, 2, 7]), advance=1, use_timestamp=False, pad=None,
                                  weighted=False)),
            ("train_lookup", dict(batch=np.array([1, 2, 2, 3]), advance=1, use_timestamp=False, pad=None,
                                  weighted=True)),
            ("apply_result", dict(seed=1, bad=None)),
            ("train_lookup", dict(batch=np.array([2, 3, 3, 7, -1]), advance=1, use_timestamp=False, pad=8,
                                  weighted=False)),
            ("apply_result", dict(seed=2, bad=None)),
            ("eval_lookup", dict(batch=np.array([1, 2, 3, 7, 9]), weighted=False)),
            ("set_threshold", dict(threshold=2)),
            ("train_lookup", dict(batch=np.array([9, 9, 4]), advance=2, use_timestamp=False, pad=None,
                                  weighted=False)),
            ("evict", dict(offset=1)),
            ("save_and_reload", dict(cross=True)),
            ("train_lookup", dict(batch=np.array([1, 4, 4, 5]), advance=1, use_timestamp=False, pad=None,
                                  weighted=False)),
            ("warm_start", dict(now=None, source=0)),
            ("eval_lookup", dict(batch=np.array([1, 2, 3, 4, 5, 7, 9]), weighted=True)),
            ("train_step", dict(batch=np.array([5, 5, 5, 6]), seed=3)),
        ]
        machine.agree()
        for name, arguments in calls:
            getattr(machine, name)(**arguments)
            machine.agree()
    finally:
        machine.teardown()


# ------------------------------------------------------------ kernel twins
# The kernels each backend has twice, under one name, checked by one test class bound to each
# implementation in turn (as CPython's test_heapq binds its tests to heapq.py and to _heapq):
# every test compares with an oracle written here from the spec, not with the other backend.
# The stateful twins (dedup, plan_train, commit_train, gather, locate, gather_rows, position_stats, pad,
# row_handles)
# take the same arguments on both sides (tests/test_rule_index.py compares their signatures); the
# state they read and change is what ``new_state`` makes: the reference's Table or the fast FastCore.

def _reference_kernels() -> SimpleNamespace:
    return SimpleNamespace(
        new_state=lambda dim, slot_initial_values: Table(dim, tuple(slot_initial_values), slot_initial_values),
        dedup=ref_lookup.dedup,
        plan_train=ref_admission.plan_train,
        commit_train=ref_admission.commit_train,
        gather=ref_lookup.gather,
        locate=ref_lookup.locate,
        gather_rows=ref_lookup.gather_rows,
        position_stats=ref_lookup.position_stats,
        pad=ref_lookup.pad,
        row_handles=ref_lookup.row_handles,
        mix_bits=initializers.mix_bits,
        initial_rows=initializers.initial_rows,
        truncated_normal_rows=initializers.truncated_normal_rows,
        crc32_records=lambda rows, covered: np.array([zlib.crc32(row[:covered].tobytes()) for row in rows],
                                                     dtype=np.uint32),
        choose_hot=lambda keys, counts, n: hot.choose_hot_keys(keys, counts, n),
    )


def _skip_unless_fast_is_under_test(config) -> None:
    if "fast" not in backends_under_test(config):
        pytest.skip("the fast backend is not under test")


def _fast_kernels() -> SimpleNamespace:
    require_fast()
    # local, as below: the fast path may not be built (require_fast skips or fails first)
    from mxrec_ref import _fast
    from mxrec_ref.fast import admission as fast_admission, hot as fast_hot, initializers as fast_initializers, \
        lookup as fast_lookup   # local: as above

    def choose_hot(keys, counts, n):
        """The fast refresh's path: the core's candidates, then the shared policy (HOT-2)."""
        core = _fast.FastCore(1, [])
        _fast.put_rows(core, keys, counts, np.zeros(len(keys), np.int64), np.zeros((len(keys), 1), np.float32), [],
                       len(keys))
        return hot.choose_hot_keys(*fast_hot.hot_candidates(*_fast.hot_candidates(core, n), n), n)

    return SimpleNamespace(
        new_state=lambda dim, slot_initial_values: _fast.FastCore(dim, list(slot_initial_values.values())),
        dedup=fast_lookup.dedup,
        plan_train=fast_admission.plan_train,
        commit_train=fast_admission.commit_train,
        gather=fast_lookup.gather,
        locate=fast_lookup.locate,
        gather_rows=fast_lookup.gather_rows,
        position_stats=fast_lookup.position_stats,
        pad=fast_lookup.pad,
        row_handles=fast_lookup.row_handles,
        mix_bits=fast_initializers.mix_bits,
        initial_rows=fast_initializers.initial_rows,
        truncated_normal_rows=_fast.truncated_normal_rows,
        crc32_records=_fast.crc32_records,
        choose_hot=choose_hot,
    )


def _mix64(x: int) -> int:
    mix1, mix2, mask = initializers.HASH_CONSTANTS["mix1"], initializers.HASH_CONSTANTS["mix2"], 2**64 - 1
    x = ((x ^ (x >> 30)) * mix1) & mask
    x = ((x ^ (x >> 27)) * mix2) & mask
    return x ^ (x >> 31)


def _bits(base: int, key: int, col: int) -> int:
    """INIT-2 with Python integers: mix64(mix64(base + key*K + col*phi)) mod 2**64."""
    constants = initializers.HASH_CONSTANTS
    return _mix64(_mix64((base + (key % 2**64) * constants["key_stride"] + col * constants["golden"]) % 2**64))


def _poly(coefficients, x: float) -> float:
    acc = coefficients[0]
    for c in coefficients[1:]:
        acc = acc * x + c
    return acc


def _truncated_normal_z(u: float) -> float:
    """INIT-6 in Python floats (IEEE doubles, one rounding per operation), from the spec's text."""
    q = (u - 0.5) * 0.9544997361036416
    if abs(q) <= 0.425:
        r = 0.180625 - q * q
        z = (q * _poly(initializers.CENTRAL_NUM, r)) / _poly(initializers.CENTRAL_DEN, r)
    else:
        m, e = math.frexp(0.5 - abs(q))
        if m < 0.7071067811865476:
            m, e = m * 2.0, e - 1
        s = (m - 1.0) / (m + 1.0)
        log = e * 0.6931471805599453 + (2.0 * s) * _poly([1.0 / (2 * k + 1) for k in range(11, -1, -1)], s * s)
        r = math.sqrt(-log) - 1.6
        z = _poly(initializers.TAIL_NUM, r) / _poly(initializers.TAIL_DEN, r)
        z = -z if q < 0.0 else z
    return min(max(z, -2.0), 2.0)


KEYS = st.lists(st.integers(-(2**63), 2**63 - 1) | st.integers(-3, 12), max_size=40)
# One test, two implementations: hypothesis sees the same method run by two classes and would
# refuse it (differing_executors).  Sharing the example database between them is wanted here: an
# example that fails one implementation is worth replaying against the other.
TWINS = settings(deadline=None, suppress_health_check=[HealthCheck.differing_executors])


class KernelTwins:
    """The twin kernels' rules; a subclass binds ``make_kernels`` to one implementation."""

    make_kernels = staticmethod(_reference_kernels)

    @pytest.fixture(scope="class")
    @classmethod
    def kernels(cls, request):
        """The bound implementation: stateless functions, so one namespace serves every example."""
        if cls.make_kernels is _fast_kernels:
            _skip_unless_fast_is_under_test(request.config)
        return cls.make_kernels()

    @settings(TWINS, max_examples=60)
    @given(keys=KEYS, weighted=st.booleans(), data=st.data())
    def test_lkp_2_dedup_first_occurrence_inverse_and_weights(self, kernels, keys, weighted, data):
        """LKP-2, LKP-6: distinct keys in order of first occurrence, the inverse index, the summed weights."""
        weights = data.draw(st.lists(st.integers(1, 2**31 - 1), min_size=len(keys), max_size=len(keys))) \
            if weighted else [1] * len(keys)
        array = np.array(keys, dtype=np.int64)
        unique, inverse, occurrences = kernels.dedup(kernels.new_state(1, {}), array,
                                                     np.array(weights, dtype=np.int64) if weighted else None)
        expected = list(dict.fromkeys(keys))
        assert unique.tolist() == expected
        assert unique[inverse].tolist() == keys
        sums = dict.fromkeys(expected, 0)
        for key, weight in zip(keys, weights):
            sums[key] += weight
        assert occurrences.tolist() == [sums[key] for key in expected]

    @settings(TWINS, max_examples=40)
    @given(batches=st.lists(st.lists(st.integers(-1, 9), max_size=12), min_size=1, max_size=5),
           coefficient=st.integers(1, 2), threshold=st.integers(1, 4), extra=st.integers(0, 3))
    def test_adm_2_training_lookups_planned_committed_and_gathered(self, kernels, batches, coefficient, threshold,
                                                                   extra):
        """ADM-1, ADM-2, ADM-3, ADM-6, EXP-4, LKP-3, LKP-4, LKP-5, ADM-5, STAT-3, EXP-5 through the stateful
        twins, called alike on both sides: dedup, plan_train, commit_train, gather_rows, gather, locate,
        position_stats, pad and row_handles on one state, against counts, admissions and rows kept here."""
        dim, default_row = 2, np.full(2, 0.5, np.float32)
        state = kernels.new_state(dim, {"accumulator": 0.25})
        counts, row_of = {}, {}
        for step, batch in enumerate(batches):
            keys = np.array(batch, dtype=np.int64)
            unique, inverse, occurrences = kernels.dedup(state, keys, None)
            total = len(unique) + extra
            plan = kernels.plan_train(state, unique, occurrences, coefficient, threshold)
            admitted_keys = unique[plan.admit]
            # each admitted key's initial row holds the key itself, so a row shows whose it is
            init = np.repeat(admitted_keys.astype(np.float32)[:, None], dim, axis=1) if len(admitted_keys) else None
            admitted, handles = kernels.commit_train(state, plan, step, init, 1 << 10, total)
            rows = kernels.gather_rows(state, handles, total, default_row)          # read late, by handle
            due = []
            for key, n in zip(unique.tolist(), occurrences.tolist()):
                if key == -1:                                       # ADM-6: padding neither counts nor enters
                    continue
                counts[key] = counts.get(key, 0) + coefficient * n  # ADM-1
                if key not in row_of and counts[key] >= threshold:  # ADM-2, ADM-3
                    due.append(key)
                    row_of[key] = len(row_of)                       # EXP-4: rows in first-occurrence order
            assert admitted_keys.tolist() == due
            assert plan.new_counts.tolist() == [0 if key == -1 else counts[key] for key in unique.tolist()]
            expected = np.array([[key] * dim if key in row_of else default_row for key in unique.tolist()]
                                + [default_row] * extra, dtype=np.float32).reshape(total, dim)
            has_row = [key in row_of for key in unique.tolist()] + [False] * extra
            assert np.array_equal(rows, expected) and admitted.tolist() == has_row
            assert handles.tolist() == [row_of.get(key, -1) for key in unique.tolist()] + [-1] * extra
            again, admitted_again, hot_index = kernels.gather(state, unique, total, default_row)   # LKP-5
            assert np.array_equal(again, expected) and admitted_again.tolist() == has_row and hot_index is None
            located, admitted_located, hot_located = kernels.locate(state, unique, total)          # LKP-5
            assert located.tolist() == handles.tolist() and admitted_located.tolist() == has_row
            assert hot_located is None
            assert np.array_equal(kernels.gather_rows(state, located[:len(unique)], total, default_row), expected)
            assert kernels.position_stats(state, keys, inverse, admitted_again, hot_index) == (
                batch.count(-1), sum(key in row_of for key in batch), 0)
            assert kernels.pad(unique, total).tolist() == unique.tolist() + [-1] * extra
            assert kernels.row_handles(state, unique).tolist() == [row_of.get(key, -1) for key in unique.tolist()]

    @settings(TWINS, max_examples=40)
    @given(base=st.integers(0, 2**64 - 1), keys=KEYS)
    def test_init_2_mix_bits_is_splitmix64_twice_on_the_counter(self, kernels, base, keys):
        cols = np.arange(len(keys), dtype=np.int64) % 5
        got = kernels.mix_bits(base, np.array(keys, dtype=np.int64), cols)
        assert got.dtype == np.uint64
        assert got.tolist() == [_bits(base, key, int(col)) for key, col in zip(keys, cols)]

    @settings(TWINS, max_examples=30)
    @given(seed=st.integers(0, 2**63 - 1), minval=st.floats(-5, 0), width=st.floats(1e-3, 7),
           scale=st.sampled_from([1.0, 0.5, -3.0]), dim=st.integers(1, 5), keys=KEYS)
    def test_init_3_uniform_rows_are_the_formula_in_float64(self, kernels, seed, minval, width, scale, dim, keys):
        config = TableConfig("t", dim=dim, init_param=scale,
                             initializer=Initializer(kind="uniform", minval=minval, maxval=minval + width, seed=seed))
        got = kernels.initial_rows(config, np.array(keys, dtype=np.int64))
        base = initializers.counter_base(seed, 0, 0)
        maxval = minval + width
        # INIT-3 in Python floats (IEEE doubles, as numpy's float64), rounded once to float32
        uniform = [[(_bits(base, key, c) >> 11) * 2.0**-53 for c in range(dim)] for key in keys]
        expected = np.array([[np.float32((minval + (maxval - minval) * u) * scale) for u in row] for row in uniform],
                            dtype=np.float32).reshape(len(keys), dim)
        assert got.dtype == np.float32 and np.array_equal(got.view(np.uint32), expected.view(np.uint32))

    @settings(TWINS, max_examples=30)
    @given(seed=st.integers(0, 2**63 - 1), mean=st.floats(-2, 2), stddev=st.floats(1e-3, 3),
           scale=st.sampled_from([1.0, 0.5, -3.0]), dim=st.integers(1, 5), keys=KEYS)
    def test_init_6_truncated_normal_rows_are_the_fixed_arithmetic(self, kernels, seed, mean, stddev, scale, dim,
                                                                  keys):
        """INIT-6 bit for bit: the quantile of each (key, column)'s uniform on counter stream 1, scaled, rounded once."""
        base = initializers.counter_base(seed, 0, 1)
        got = kernels.truncated_normal_rows(base, np.array(keys, dtype=np.int64), dim, mean, stddev, scale)
        expected = np.array([[np.float32((mean + stddev * _truncated_normal_z((_bits(base, key, c) >> 11) * 2.0**-53))
                                         * scale) for c in range(dim)] for key in keys],
                            dtype=np.float32).reshape(len(keys), dim)
        assert got.dtype == np.float32 and np.array_equal(got.view(np.uint32), expected.view(np.uint32))
        config = TableConfig("t", dim=dim, init_param=scale, initializer=Initializer(mean=mean, stddev=stddev, seed=seed))
        assert np.array_equal(kernels.initial_rows(config, np.array(keys, dtype=np.int64)).view(np.uint32),
                              expected.view(np.uint32))

    @settings(TWINS, max_examples=30)
    @given(rows=st.integers(0, 6), width=st.integers(0, 40), data=st.data())
    def test_tier_9_record_checksums_are_zlib_crc32(self, kernels, rows, width, data):
        records = np.frombuffer(data.draw(st.binary(min_size=rows * width, max_size=rows * width)),
                                dtype=np.uint8).reshape(rows, width).copy()
        covered = data.draw(st.integers(0, width))
        got = kernels.crc32_records(records, covered)
        assert got.tolist() == [zlib.crc32(bytes(row[:covered])) for row in records]

    @settings(TWINS, max_examples=60)
    @given(counts=st.lists(st.sampled_from([0, 1, 1, 2, 5, 2**40, 2**63 - 1]), min_size=1, max_size=40),
           n=st.integers(1, 45))
    def test_hot_2_chooses_the_highest_counts_ties_by_the_smaller_key(self, kernels, counts, n):
        keys = np.arange(len(counts), dtype=np.int64)[::-1] * 3 - 20
        chosen = kernels.choose_hot(keys, np.array(counts, dtype=np.int64), n)
        expected = [key for _, key in sorted(zip((-c for c in counts), keys.tolist()))[:n]]
        assert chosen.tolist() == expected


class TestReferenceKernels(KernelTwins):
    make_kernels = staticmethod(_reference_kernels)


class TestFastKernels(KernelTwins):
    make_kernels = staticmethod(_fast_kernels)


def test_be_1_the_fast_kernels_are_the_compiled_ones(request):
    """TestFastKernels tests the extension, not a Python fallback: the fast path's family modules
    hand out mxrec_ref._fast's compiled functions, and both sides hash with the same constants."""
    _skip_unless_fast_is_under_test(request.config)
    require_fast()
    # local, as below: the fast path may not be built (require_fast skips or fails first)
    from mxrec_ref import _fast
    from mxrec_ref.fast import admission, eviction, lookup, optimizers   # local: as above

    assert Path(_fast.__file__).suffix in {".so", ".pyd"}, _fast.__file__
    kernels = [lookup.dedup, lookup.gather, lookup.locate, lookup.gather_rows, lookup.position_stats, lookup.row_handles,
               admission.plan_train,
               admission.commit_train, eviction.expired_keys, eviction.remove_keys, optimizers.resolve_rows,
               optimizers.adagrad, optimizers.sgd, optimizers.ftrl_sqrt, _fast.mix_bits, _fast.uniform_rows, _fast.crc32_records,
               _fast.hot_candidates]
    for kernel in kernels:
        assert type(kernel).__name__ == "cython_function_or_method" and kernel.__module__ == "mxrec_ref._fast", kernel
    assert _fast.HASH_CONSTANTS == initializers.HASH_CONSTANTS
