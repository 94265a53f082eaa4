"""CKPT-5's key checks on crafted files (spec/checkpoint.md): a checkpoint whose bytes are intact (sizes
and CRC-32s match the manifest) but whose keys break a rule is refused before the store changes.  The
decoder finds -1 and the key bounds from the ends of the two ascending key runs (admitted, pending) and
a binary search, so each run is tried at both of its ends and in its middle."""
import json
import zlib

import numpy as np
import pytest

from mxrec_ref import Adagrad, CheckpointError, TableConfig, open_store
from mxrec_ref.conformance.checks import assert_unchanged, snapshot

ADMITTED = [-9, -7, 3, 5, 8]          # keys seen twice: rows (access_threshold 2)
PENDING = [-8, -6, 4, 6, 9]           # keys seen once: pending


def _store(backend, **extra):
    return open_store(TableConfig("t", dim=2, device_vocabulary_size=16, access_threshold=2, eviction_threshold=10,
                                  **extra), Adagrad(0.1), backend=backend)


def _saved(backend, folder):
    store = _store(backend)
    store.lookup(np.array(ADMITTED * 2 + PENDING, dtype=np.int64), step=0)
    assert store.export().keys.tolist() == ADMITTED and store.export().pending_keys.tolist() == PENDING
    store.save(folder)
    return folder / "t"


def _rewrite(table, admitted, pending):
    """Replace the saved keys (key/slice.data and feat_info's key column) and fix the manifest."""
    key_file, feat_file = table / "key" / "slice.data", table / "feat_info" / "slice.data"
    feat = np.frombuffer(feat_file.read_bytes(), dtype=np.int64).reshape(-1, 3).copy()
    feat[:, 0] = admitted + pending
    key_file.write_bytes(np.array(admitted, dtype=np.int64).tobytes())
    feat_file.write_bytes(feat.tobytes())
    manifest = json.loads((table / "manifest.json").read_text())
    for path in (key_file, feat_file):
        data = path.read_bytes()
        manifest["files"][str(path.relative_to(table))] = {"bytes": len(data), "crc32": f"{zlib.crc32(data):08x}"}
    (table / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("run,at", [(r, i) for r in ("admitted", "pending") for i in (0, 2, 4)])
def test_ckpt_5_the_padding_key_anywhere_is_refused(backend, tmp_path, run, at):
    table = _saved(backend, tmp_path)
    admitted, pending = list(ADMITTED), list(PENDING)
    keys = admitted if run == "admitted" else pending
    keys[at] = -1                               # still ascending: each neighbour is on the right side of -1
    keys.sort()
    assert len(set(keys)) == 5 and keys[0] <= -1 <= keys[-1]
    _rewrite(table, admitted, pending)
    store = _store(backend)
    store.lookup(np.array([1, 1, 2], dtype=np.int64), step=0)
    before = snapshot(store)
    with pytest.raises(CheckpointError, match="padding key -1"):
        store.load(tmp_path)
    assert_unchanged(store, before)


@pytest.mark.parametrize("run,end", [(r, e) for r in ("admitted", "pending") for e in ("low", "high")])
def test_ckpt_5_a_key_outside_the_key_dtype_is_named(backend, tmp_path, run, end):
    table = _saved(backend, tmp_path)
    admitted, pending = list(ADMITTED), list(PENDING)
    keys = admitted if run == "admitted" else pending
    bad = -2**40 if end == "low" else 2**40
    keys[0 if end == "low" else -1] = bad
    _rewrite(table, admitted, pending)
    int32 = _store(backend, key_dtype="int32")
    before = snapshot(int32)
    with pytest.raises(CheckpointError, match=f"key_dtype: checkpoint key {bad} does not fit"):
        int32.load(tmp_path)
    assert_unchanged(int32, before)
