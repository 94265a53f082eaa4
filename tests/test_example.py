"""The repository's mxRec-style example, run through `mxrec-ref run` in every mode (issue 6, item 6)."""
import itertools
from concurrent.futures import ThreadPoolExecutor
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "mxrec_two_tables.py"
MODES = [("fast", *combo) for combo in itertools.product(["feature_spec", "modify_graph"], ["0", "1"],
                                                          ["hbm", "ddr", "ssd"])]
MODES += [("ref", "feature_spec", "1", "hbm"), ("ref", "modify_graph", "1", "ddr")]


@pytest.mark.parametrize("backend_name,mode,multi_lookup,storage", MODES)
def test_graph_4_example_runs_through_the_alias(backend_name, mode, multi_lookup, storage):
    env = dict(os.environ, MXREC_REF_BACKEND=backend_name, MXREC_EXAMPLE_MODE=mode,
               MXREC_EXAMPLE_MULTI_LOOKUP=multi_lookup, MXREC_EXAMPLE_STORAGE=storage, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run([sys.executable, "-m", "mxrec_ref", "run", str(EXAMPLE)], env=env, capture_output=True,
                            text=True, timeout=300, cwd="/")
    assert result.returncode == 0, result.stderr[-3000:]
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith(f"SUCCESS mode={mode} multi_lookup={multi_lookup} storage={storage}")
    assert "[mx_rec] INFO trained" in result.stderr


TWO_TOWER = EXAMPLE.parent / "mxrec_two_tower.py"
OPTIMIZER_OF = {"hbm": "lazy_adam", "ddr": "adagrad_by_addr", "ssd": "gradient_descent_by_addr"}
MATRIX = [(storage, mode, shape) for storage in ("hbm", "ddr", "ssd") for mode in ("feature_spec", "modify_graph")
          for shape in ("dynamic", "static")]


@pytest.fixture(scope="module")
def matrix_runs():
    """Every combination of MATRIX, two processes at a time (CI has two cores)."""
    def run(combo):
        storage, mode, shape = combo
        return combo, _phases({"STORAGE": storage, "USE_MODIFY_GRAPH": str(int(mode == "modify_graph")),
                               "USE_DYNAMIC": str(int(shape == "dynamic")), "SPARSE_OPTIMIZER": OPTIMIZER_OF[storage],
                               "USE_ONE_SHOT": "0" if (mode, shape) == ("modify_graph", "static") else "1"})

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(run, MATRIX))


def _phases(env):
    environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **env)
    environment.pop("USE_COMBINE_FAAE", None)
    result = subprocess.run([sys.executable, "-m", "mxrec_ref", "run", str(TWO_TOWER), "--run_mode",
                             "train,load_and_train,predict", "--steps", "20"], env=environment, capture_output=True,
                            text=True, timeout=300, cwd="/")
    phases = {"returncode": (result.returncode, None)}
    for line in result.stdout.splitlines():
        if line.startswith("PHASE "):
            _, name, _, step, *_ = line.split()
            phases[name] = (int(step.split("=")[1]), line.split("tables=")[1])
    return phases, result.stderr


@pytest.mark.parametrize("storage,mode,shape", MATRIX)
def test_graph_4_upstream_shaped_example_every_mode_and_phase(matrix_runs, storage, mode, shape):
    """GRAPH-4 / TF-12..16: the two-tower example (by-address optimizers, static shape with
    1 + N lookups of one table, return_timestamp admission and eviction, a DP table,
    one-shot and initializable iterators, set_threshold, clear_channel) trains, reloads
    and trains on, and predicts from the checkpoint, in every storage x mode x shape."""
    phases, stderr = matrix_runs[(storage, mode, shape)]
    assert phases.pop("returncode") == (0, None), stderr[-3000:]
    assert [(name, step) for name, (step, _) in phases.items()] == [("train", 20), ("load_and_train", 40),
                                                                   ("predict", 40)]
    assert phases["predict"][1] == phases["load_and_train"][1]     # predict sees exactly what was saved
    assert "is_dp=True is accepted" in stderr


def test_tf_16_upstream_shaped_example_with_dynamic_expansion():
    """LazyAdamByAddress on dynamic-expansion tables, graph modification, all phases."""
    phases, stderr = _phases({"USE_DYNAMIC_EXPANSION": "1", "USE_MODIFY_GRAPH": "1"})
    assert phases.pop("returncode") == (0, None), stderr[-3000:]
    assert [(name, step) for name, (step, _) in phases.items()] == [("train", 20), ("load_and_train", 40),
                                                                   ("predict", 40)]
