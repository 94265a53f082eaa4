"""Fault injection and concurrency for checkpoints (spec/checkpoint.md, CKPT-8, CKPT-11).

The kill tests stop a saving process with SIGKILL at each step of the save
protocol in turn (checkpoint.fault_hook names the steps); a fresh process
then loads and must get the previous complete checkpoint or the new one,
never neither and never a mix.  CI runs every step of one table's save on
both backends and both switch protocols, and the Saver path between the
tables and between the tables and the dense checkpoint;
``MXREC_CHECKPOINT_FAULTS=deep`` kills the Saver path at every step and
runs the concurrent test ten times longer.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
DEEP = os.environ.get("MXREC_CHECKPOINT_FAULTS") == "deep"
ENV = dict(os.environ, PYTHONPATH=str(HERE.parent), TF_CPP_MIN_LOG_LEVEL="3")


def _run(script, *args, timeout=300):
    return subprocess.run([sys.executable, str(HERE / script), *map(str, args)], env=ENV, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.parametrize("protocol", ["exchange", "rename"])
def test_ckpt_8_kill_at_each_step_of_a_save_leaves_the_old_or_the_new_table(backend, tmp_path, protocol):
    result = _run("checkpoint_child.py", "kill", backend, tmp_path, protocol)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line.split() for line in result.stdout.splitlines()]
    litter = lines.pop()
    outcomes = dict(lines)
    switch = "exchange" if protocol == "exchange" else "rename_in"
    names = list(outcomes)
    assert switch in names and "fsync_manifest.json" in names and "remove_old" in names, names
    # before the one atomic step the old table, from it on the new one; never an error or a mix
    assert [outcomes[n] for n in names] == ["A"] * names.index(switch) + ["B"] * (len(names) - names.index(switch))
    assert litter == ["litter"], "a later save leaves no temporary folder of a killed one"


def test_ckpt_8_saver_kill_between_tables_and_dense_checkpoint(tmp_path):
    """Saver path: kill between the two tables and after the tables, before the
    dense checkpoint (deep: at every step, the switches of each table and after
    the dense checkpoint included); each following process restores the newest
    listed checkpoint and checks tables and dense variable against what was
    saved at that step."""
    first = _run("saver_fault_child.py", "ref", tmp_path, "saver:_table_'a'_written")
    assert first.returncode == -9, first.stderr[-3000:]
    steps = [line.split(" ", 1)[1] for line in first.stdout.splitlines() if line.startswith("step ")]
    assert "saver:_table_'a'_written" in steps
    assert steps[-2:] == ["saver:_table_'b'_written", "saver:_dense_checkpoint_written"]
    listed_from = steps.index("saver:_dense_checkpoint_written")   # TF lists the checkpoint before this step
    kills = list(range(len(steps))) if DEEP else ["saver:_table_'b'_written"]
    newest = 1                                  # the first process saved step 1, then was killed in step 2
    for kill in [*kills, "none"]:
        run = _run("saver_fault_child.py", "ref", tmp_path, kill)
        assert run.returncode == (0 if kill == "none" else -9), (kill, run.stdout, run.stderr[-3000:])
        assert "MIXED" not in run.stdout, (kill, run.stdout)
        assert f"restored {newest}\n" in run.stdout, (kill, newest, run.stdout)
        at = kill if isinstance(kill, int) else steps.index(kill) if kill != "none" else len(steps)
        newest += at >= listed_from             # the killed save counts once TF listed it


@pytest.mark.parametrize("protocol", ["exchange", "rename"])
def test_ckpt_11_loads_during_saves_see_one_complete_version(backend, tmp_path, protocol):
    """Another process re-saves two states of one shape while this one loads:
    every load is one of them exactly, none reports corruption.  The rename
    fallback is backend-independent: CI runs it on one backend."""
    if protocol == "rename" and backend == "ref" and not DEEP:
        pytest.skip("the rename fallback runs on the fast backend in CI (MXREC_CHECKPOINT_FAULTS=deep: both)")
    folder = tmp_path / "ckpt"
    saves = 400 if DEEP else 40
    writer = subprocess.Popen([sys.executable, str(HERE / "checkpoint_child.py"), "write", backend, str(folder),
                               protocol, str(saves)], env=ENV, stderr=subprocess.PIPE, text=True)
    reader = _run("checkpoint_child.py", "read", backend, folder)
    assert writer.wait(timeout=300) == 0, writer.stderr.read()[-3000:]
    assert reader.returncode == 0, reader.stderr[-3000:]
    loads, mixed, errors = map(int, reader.stdout.split())
    assert loads >= 5 and (mixed, errors) == (0, 0), (reader.stdout, reader.stderr[-3000:])
