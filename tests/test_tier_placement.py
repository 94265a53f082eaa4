"""TIER-11, TIER-12: the two backends' placement structures, compared call by call on random
sequences (hypothesis): the reference's ``RefDevicePlacement`` and ``PyHostHeap``
(mxrec_ref/tiers/placement.py) against the fast path's ``FastDevicePlacement`` and ``HostHeap``
(mxrec_ref/fast/placement.py, cext/_tiers.pxi)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mxrec_ref.tiers.placement import HostOrder, PyHostHeap, RefDevicePlacement

fast = pytest.importorskip("mxrec_ref.fast.placement", reason="the fast path (mxrec_ref._fast) is not built")
pytest.importorskip("mxrec_ref._fast", reason="the fast path (mxrec_ref._fast) is not built")

KEYS = st.lists(st.integers(0, 60), max_size=12, unique=True)
PLACEMENT_CALLS = st.lists(st.tuples(st.sampled_from(["touch", "touch", "touch", "forget", "contains", "clear"]),
                                     KEYS), max_size=60)


@settings(max_examples=80, deadline=None)
@given(device_rows=st.integers(1, 20), calls=PLACEMENT_CALLS)
def test_tier_11_device_placements_agree_call_by_call(device_rows, calls):
    """TIER-4 on both twins: the same victims (as a set: TIER-12 leaves one call's order open), the
    same was-on-device flags, membership and device keys after every call."""
    rows_of = {key: 2 * key + 3 for key in range(61)}      # a stand-in store: a fixed row per key
    handles = lambda keys: np.array([rows_of[k] for k in np.asarray(keys).tolist()], dtype=np.int64)  # noqa: E731
    ref, fast_ = RefDevicePlacement(device_rows, handles), fast.FastDevicePlacement(device_rows, handles)
    for name, keys in calls:
        keys = np.array(keys, dtype=np.int64)
        if name == "touch":
            keys = keys[:device_rows]          # a batch fits the device tier (TIER-3)
            (ref_victims, ref_was), (fast_victims, fast_was) = ref.touch(keys), fast_.touch(keys)
            assert sorted(ref_victims.tolist()) == sorted(fast_victims.tolist())
            assert ref_was.tolist() == fast_was.tolist()
        elif name == "contains":
            assert ref.contains(keys).tolist() == fast_.contains(keys).tolist()
        else:
            getattr(ref, name)(*([keys] if name == "forget" else []))
            getattr(fast_, name)(*([keys] if name == "forget" else []))
        assert len(ref) == len(fast_) and ref.keys().tolist() == fast_.keys().tolist()


ENTRIES = st.lists(st.tuples(st.integers(0, 3), st.integers(-3, 3), st.integers(-2**63, 2**63 - 1)), max_size=30)


@settings(max_examples=80, deadline=None)
@given(calls=st.lists(st.tuples(st.sampled_from(["push", "push", "pop", "clear"]), ENTRIES, st.integers(0, 12)),
                      max_size=20))
def test_tier_12_host_heaps_pop_alike(calls):
    """TIER-5's order on both heaps: pushes (heapify and one by one) and pops give the same
    (count, last_seen, key) entries in the same order."""
    from mxrec_ref._fast import HostHeap   # local: the module skips above when the extension is not built

    ref, fast_ = HostOrder(PyHostHeap()), HostOrder(HostHeap())
    for name, entries, n in calls:
        if name == "push":
            counts, seen, keys = (np.array(column, dtype=np.int64) for column in zip(*entries)) if entries else \
                (np.zeros(0, np.int64),) * 3
            ref.push(keys, counts, seen)
            fast_.push(keys, counts, seen)
        elif name == "pop":
            assert [c.tolist() for c in ref.pop(n)] == [c.tolist() for c in fast_.pop(n)]
        else:
            ref.clear()
            fast_.clear()
        assert len(ref) == len(fast_)
