"""Checkpoints survive crashes (spec/checkpoint.md, CKPT-8)."""
import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from mxrec_ref import CheckpointError

from mxrec_ref.conformance.checks import keys, make_store

CHILD = Path(__file__).parent / "crash_child.py"


def test_ckpt_8_flipped_byte_is_reported_with_its_path(backend, tmp_path):
    store = make_store(backend, device_vocabulary_size=16)
    store.lookup(keys(1, 2, 3), step=0)
    store.save(tmp_path)
    victim = tmp_path / "t" / "embedding" / "slice.data"
    data = bytearray(victim.read_bytes())
    data[5] ^= 0x10
    victim.write_bytes(bytes(data))
    fresh = make_store(backend, device_vocabulary_size=16)
    with pytest.raises(CheckpointError, match=r"embedding/slice.data.*checksum"):
        fresh.load(tmp_path)
    assert fresh.size() == 0
    (tmp_path / "t" / "manifest.json").unlink()
    with pytest.raises(CheckpointError, match="manifest is missing"):
        fresh.load(tmp_path)


def _digest(state) -> str:
    digest = hashlib.sha256()
    for part in (state.keys, state.values, state.counts, state.last_seen, *state.slots.values()):
        digest.update(np.ascontiguousarray(part).tobytes())
    return digest.hexdigest()


@pytest.mark.parametrize("delay", [0.3, 1.7, 3.1])
def test_ckpt_8_sigkill_during_saves_leaves_newest_complete_checkpoint(forked_python, backend, tmp_path, delay):
    """A child trains and saves every step (big tables, so a save takes a while);
    it is killed after ``delay`` seconds, mid-save or not.  The newest listed
    checkpoint must restore, its tables must equal what the child had at that
    step (it records a digest after each completed save), and training goes on
    (the killed child is a fresh process; the resuming one is forked from a process
    that imported TensorFlow, tests/forked_cli.py)."""
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parent.parent), TF_CPP_MIN_LOG_LEVEL="3")
    child = subprocess.Popen([sys.executable, str(CHILD), backend, str(tmp_path), "train"], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert child.stdout.readline().strip() == b"ready"      # TF imported, graph built: now time the kill
    time.sleep(delay)
    child.send_signal(signal.SIGKILL)
    child.wait()
    result = forked_python([CHILD, backend, tmp_path, "resume"], env=env, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    step, digest, continued = result.stdout.split()
    recorded = tmp_path / f"digest-{step}"
    if recorded.exists():                                    # killed after the digest of that step was written
        assert recorded.read_text() == digest
    assert int(continued) == int(step) + 3
