"""Sharded tables under a real ``mpirun`` (spec/sharding.md): {ref, fast} x {2, 4 ranks} x {train + save,
reload N -> M and continue}, then a rank killed in a save (SHARD-10), each compared bit for bit with the
virtual-rank emulation (SHARD-9) and the checkpoints with one process (SHARD-10, SHARD-11).  Skipped, with
the reason, where there is no mpirun or mpi4py.  One launch per phase and rank count runs both backends (no
TensorFlow: about a second each)."""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mxrec_ref.distributed import VirtualWorld
from mxrec_ref.optimizers import Adagrad
from mxrec_ref.store import open_store

HERE = Path(__file__).resolve().parent
CHILD = HERE / "sharding_child.py"
_spec = importlib.util.spec_from_file_location("sharding_child", CHILD)
child = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(child)


def mpirun() -> str:
    """The launcher next to this interpreter (the mpi extra's Open MPI wheel), else one on PATH."""
    beside = Path(sys.executable).parent / "mpirun"
    found = str(beside) if beside.exists() else shutil.which("mpirun")
    if found is None:
        pytest.skip("no mpirun: install the mpi extra (`pip install mxrec-ref[mpi]`) to run the MPI tests")
    if importlib.util.find_spec("mpi4py") is None:
        pytest.skip("mpi4py is not installed: install the mpi extra (`pip install mxrec-ref[mpi]`)")
    return found


def run_child(ranks: int, folder: Path, phase: str, *extra: str, **env):
    env = dict(os.environ, PYTHONPATH=str(HERE.parent), OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", **env)
    command = [mpirun(), "--oversubscribe", "-np", str(ranks), sys.executable, str(CHILD), str(folder), phase,
               *extra]
    return command, subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


def launch(ranks: int, folder: Path, phase: str) -> dict:
    command, done = run_child(ranks, folder, phase)
    assert done.returncode == 0, f"{' '.join(command)}\n{done.stdout}\n{done.stderr}"
    with np.load(folder / f"{phase}-{ranks}.npz") as data:
        return dict(data)


def emulated(ranks: int, folder: Path, phase: str) -> dict:
    return VirtualWorld(ranks).run(lambda rank, comm: child.run(phase, rank, comm, str(folder)))[0]


def assert_bitwise(real: dict, virtual: dict) -> None:
    assert sorted(real) == sorted(virtual)
    for key in real:
        a, b = np.asarray(real[key]), np.asarray(virtual[key])
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), key


def assert_replica_scenarios(real: dict, ranks: int) -> None:
    """SHARD-16: under mpirun the data-parallel replicas are bit-identical on every rank (rows and row
    placement) and hold as many keys as the sharded table; SHARD-20: hot replicas change nothing."""
    for backend in ("fast",):
        for r in range(ranks):
            for field in ("replica_values", "replica_handles", "state_keys", "state_counts", "eval"):
                a, b = real[f"dp-{backend}/rank0/{field}"], real[f"dp-{backend}/rank{r}/{field}"]
                assert a.tobytes() == b.tobytes(), (backend, r, field)
            plain = {k.split("/", 2)[2]: v for k, v in real.items() if k.startswith(f"{backend}/rank{r}/")}
            hot = {k.split("/", 2)[2]: v for k, v in real.items() if k.startswith(f"hot-{backend}/rank{r}/")}
            for field, value in hot.items():
                if field in plain:
                    assert value.tobytes() == plain[field].tobytes(), (backend, r, field)
            assert int(hot["hot_hits"]) > 0
        assert real[f"dp-{backend}/rank0/state_keys"].tobytes() == real[f"{backend}/rank0/state_keys"].tobytes()


def test_shard_9_real_mpi_equals_the_virtual_ranks_and_checkpoints_move_between_rank_counts(tmp_path):
    """2 ranks train and save; 4 ranks load that and go on; 2 ranks load the 4 ranks' save and go on --
    each launch equal bit for bit to the same phase on virtual ranks; every save reads in one process."""
    real_dir, virtual_dir = tmp_path / "mpi", tmp_path / "virtual"
    real_dir.mkdir()
    virtual_dir.mkdir()
    for ranks, phase in ((2, "train"), (4, "reload")):
        real = launch(ranks, real_dir, phase)
        virtual = emulated(ranks, virtual_dir, phase)
        assert_bitwise(real, virtual)
        assert any(k.endswith("forward0") or k.endswith("forward7") for k in real)
        if phase == "train":
            assert_replica_scenarios(real, ranks)
    for backend in child.BACKENDS:
        for name in (backend, f"{backend}-reloaded-4"):
            one, other = (open_store(child.config(), Adagrad(learning_rate=0.05), backend=backend)
                          for _ in range(2))
            one.load(real_dir / name)
            other.load(virtual_dir / name)
            assert one.export().equals(other.export()) and one.size() > 0
    # 4 -> 2: the 4 ranks' checkpoint becomes the base of the next reload
    for backend in child.BACKENDS:
        shutil.rmtree(real_dir / backend)
        shutil.copytree(real_dir / f"{backend}-reloaded-4", real_dir / backend, dirs_exist_ok=True)
        shutil.rmtree(virtual_dir / backend)
        shutil.copytree(virtual_dir / f"{backend}-reloaded-4", virtual_dir / backend, dirs_exist_ok=True)
    # the same launch then saves again and rank 1 is SIGKILLed in that save, its slice written: the job
    # ends, and the reload's checkpoint is still the one in place, complete (SHARD-10)
    command, done = run_child(2, real_dir, "reload", "kill-save")
    assert done.returncode != 0, f"{' '.join(command)}\n{done.stdout}\n{done.stderr}"
    with np.load(real_dir / "reload-2.npz") as data:
        assert_bitwise(dict(data), emulated(2, virtual_dir, "reload"))
    one, other = (open_store(child.config(), Adagrad(learning_rate=0.05), backend="ref") for _ in range(2))
    one.load(real_dir / "ref-reloaded-2")
    other.load(virtual_dir / "ref-reloaded-2")
    assert one.export().equals(other.export()) and one.size() > 0
    assert any(name.startswith(".clicks.writing-") for name in os.listdir(real_dir / "ref-reloaded-2"))


def test_shard_15_a_rank_left_waiting_ends_the_job_with_a_message(tmp_path):
    """Rank 0 waits in step 1's lookup, rank 1 in the barrier after it: whichever watchdog fires first
    names what its rank waits in and ends the job."""
    command, done = run_child(2, tmp_path, "hang", MXREC_REF_COLLECTIVE_TIMEOUT="2")
    assert done.returncode != 0
    waits = (r"rank 0 of 2 waited [23] s in table 'clicks''s training lookup at step 1 \(allgather\)",
             r"rank 1 of 2 waited [23] s in a collective \(barrier\)")
    assert any(re.search(wait + "; all ranks must run the same steps", done.stderr) for wait in waits), done.stderr
    for rank in (0, 1):         # one line per rank (it was printed twice: once more through the logging fallback)
        assert done.stderr.count(f"rank {rank} of 2 waited") <= 1, done.stderr


def test_shard_21_a_rank_that_raises_ends_the_job_at_once(tmp_path):
    """Rank 1 raises while rank 0 waits for it in a collective: the job ends with rank 1's error line and a
    non-zero status, long before the watchdog's default 300 s (SHARD-15) -- in a plain script using the
    communicator (its traceback), in a script under `mxrec-ref run` (one line) and in `mxrec-ref train` (rank 1
    alone is given a bad MXREC_REF_DENSE_REDUCE, refused in its first dense reduction).  The subprocess limits
    bound the waits; without the abort each launch would outlive them."""
    env = dict(os.environ, PYTHONPATH=str(HERE.parent), OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("MXREC_REF_COLLECTIVE_TIMEOUT", None)
    launcher = [mpirun(), "--oversubscribe"]
    python = [sys.executable, "-m", "mxrec_ref"]
    train = ["train", "--steps", "4", "--rows", "2000", "--no-progress"]
    launches = {
        "script": (launcher + ["-np", "2", sys.executable, str(CHILD), str(tmp_path), "raise-value"], 60,
                   "ValueError: rank 1 fails on purpose (value)"),
        "run": (launcher + ["-np", "2", *python, "run", str(CHILD), str(tmp_path), "raise-usage"], 120,
                "mxrec-ref run: UsageError: rank 1 fails on purpose (usage)"),
        "train": (launcher + ["-np", "1", *python, *train, ":", "-np", "1", "env", "MXREC_REF_DENSE_REDUCE=fastest",
                              *python, *train], 150,
                  "mxrec-ref train: ConfigError: MXREC_REF_DENSE_REDUCE: must be one of"),
    }
    for name, (command, limit, line) in launches.items():
        done = subprocess.run(command, env=env, capture_output=True, timeout=limit)
        stderr = done.stderr.decode(errors="replace")
        assert done.returncode != 0, (name, stderr[-3000:])
        assert line in stderr, (name, stderr[-3000:])
        assert "MPI_ABORT was invoked on rank 1" in stderr, (name, stderr[-3000:])
