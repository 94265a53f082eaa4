"""A Keras model with an ``Embedding`` table under a real ``mpirun -np 2`` (KERAS-17, SHARD-12): the table is
sharded ``key mod 2`` and the dense gradients averaged in rank order, so two ranks on their halves of each batch
end with the table, dense weights and losses of one process on the whole batch (within 1e-5), on both
backends; ranks that run different step counts fail clearly.  One launch of 2 ranks, 3 steps of a tiny model
(tests/keras_mpi_child.py); skipped, with the reason, where there is no mpirun or mpi4py."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from mxrec_ref.backends import available_backends
from test_sharding_mpi import HERE, mpirun

CHILD = HERE / "keras_mpi_child.py"
BACKENDS = [name for name in ("ref", "fast") if name in available_backends()]


def run(command: list, folder) -> None:
    environment = dict(os.environ, PYTHONPATH=str(HERE.parent), TF_CPP_MIN_LOG_LEVEL="3", OMPI_ALLOW_RUN_AS_ROOT="1",
                       OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", MXREC_REF_COLLECTIVE_TIMEOUT="60")
    done = subprocess.run([*command, sys.executable, str(CHILD), str(folder), *BACKENDS], env=environment,
                          capture_output=True, text=True, timeout=240, cwd="/")
    assert done.returncode == 0, f"{' '.join(command)}\n{done.stdout}\n{done.stderr[-4000:]}"


def test_keras_17_two_ranks_train_like_one_process_on_the_whole_batch(tmp_path):
    launcher = mpirun()
    run([], tmp_path)                                                 # one process, the whole batch
    run([launcher, "--oversubscribe", "-np", "2"], tmp_path)          # two ranks, half a batch each
    for backend in BACKENDS:
        one = dict(np.load(tmp_path / f"{backend}-1-0.npz"))
        ranks = [dict(np.load(tmp_path / f"{backend}-2-{rank}.npz")) for rank in (0, 1)]
        for name in one:
            if name == "losses":      # each rank's running mean over its half; equal halves: their mean
                np.testing.assert_allclose((ranks[0][name] + ranks[1][name]) / 2, one[name], rtol=0, atol=1e-5)
                continue
            for rank in ranks:        # the gathered table and the dense weights, on every rank
                assert rank[name].shape == one[name].shape, (backend, name)
                np.testing.assert_allclose(rank[name], one[name], rtol=0, atol=1e-5, err_msg=f"{backend} {name}")
        assert len(one["keys"]) > 2 and len(one["losses"]) == 3

    # The same launch then had rank 1 fit one step more than rank 0, which read the table next: every rank
    # fails (no hang), rank 0 with the error naming the table and each rank's call (SHARD-22).
    first = (tmp_path / "uneven-0.txt").read_text()
    assert first.startswith("UsageError") and "table 'uneven'" in first and "different collective calls" in first
    assert "rank 1: training lookup" in first, first
    assert "the ranks make different collective calls" in (tmp_path / "uneven-1.txt").read_text()  # inside TF's error
