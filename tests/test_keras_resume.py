"""KERAS-14: ``keras.models.load_model`` of a ``.keras`` file gives back a compiled model whose optimizer
state and step continue: 2 epochs, save, load in a fresh process, 2 more epochs == 4 epochs straight, bit for
bit (tables with their slots, counts, pending keys and clock; dense weights; optimizer variables)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

CHILD = Path(__file__).resolve().parent / "keras_resume_child.py"


def _child(*args):
    done = subprocess.run([sys.executable, str(CHILD), *args], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


def test_keras_14_a_keras_file_resumes_training_bit_for_bit_in_a_fresh_process(backend, tmp_path):
    _child("train", backend, str(tmp_path))
    _child("resume", str(tmp_path))
    straight, resumed = np.load(tmp_path / "straight.npz"), np.load(tmp_path / "resumed.npz")
    assert sorted(straight.files) == sorted(resumed.files)
    assert {"keys", "values", "slot_momentum", "slot_velocity", "pending_keys", "clock", "optimizer0"} <= set(
        straight.files)
    assert str(straight["clock"]) == "31" and len(straight["keys"])
    for name in straight.files:
        assert np.array_equal(straight[name], resumed[name]), name
