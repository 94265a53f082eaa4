"""INIT-5 after ``Store.set_optimizer``: rows created later start from the new optimizer's slot values, rows
that exist keep theirs, alike on both backends (the fast core once kept the first optimizer's values)."""
from __future__ import annotations

import numpy as np
import pytest

from mxrec_ref import Adagrad, Ftrl, TableConfig, open_store

@pytest.mark.parametrize("make", [lambda v: Adagrad(0.1, initial_accumulator_value=v),
                                  lambda v: Ftrl(0.1, initial_accumulator_value=v)], ids=["adagrad", "ftrl"])
def test_init_5_new_rows_follow_the_optimizer_set_since(backend, make):
    config = TableConfig("t", dim=2, device_vocabulary_size=16, access_threshold=0)
    store = open_store(config, make(0.25), backend=backend)
    store.lookup(np.array([1, 2]), step=1)
    store.set_optimizer(make(0.75))
    store.lookup(np.array([2, 3]), step=2)
    state = store.export()
    accumulator = state.slots["accumulator"] if "accumulator" in state.slots else state.slots["accum"]
    by_key = dict(zip(state.keys.tolist(), accumulator[:, 0].tolist()))
    assert by_key == {1: 0.25, 2: 0.25, 3: 0.75}
