"""The fast path against the reference, step by step (spec/backends.md, BE-1).

The comparison machine (``machines.RefVersusFast``) drives one reference store
and one store of the backend under test through the same random calls and
asserts after every step that the two agree bit for bit: results, exported
state, statistics, row placement and errors.
"""
import numpy as np
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from mxrec_ref import Adagrad, TableConfig

from .machines import RefVersusFast

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
