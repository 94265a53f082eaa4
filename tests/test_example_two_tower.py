"""The upstream-shaped two-tower example (examples/mxrec_two_tower.py) through `mxrec-ref run`:
every storage x mode x shape, each training, reloading and predicting (issue 6, item 6)."""
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

TWO_TOWER = Path(__file__).resolve().parent.parent / "examples" / "mxrec_two_tower.py"
OPTIMIZER_OF = {"hbm": "lazy_adam", "ddr": "adagrad_by_addr", "ssd": "gradient_descent_by_addr"}
MATRIX = [(storage, mode, shape) for storage in ("hbm", "ddr", "ssd") for mode in ("feature_spec", "modify_graph")
          for shape in ("dynamic", "static")]


@pytest.fixture(scope="module")
def matrix_runs(mxrec_ref_command):
    """Every combination of MATRIX, two processes at a time (CI has two cores)."""
    def run(combo):
        storage, mode, shape = combo
        return combo, _phases(mxrec_ref_command, {
            "STORAGE": storage, "USE_MODIFY_GRAPH": str(int(mode == "modify_graph")),
            "USE_DYNAMIC": str(int(shape == "dynamic")), "SPARSE_OPTIMIZER": OPTIMIZER_OF[storage],
            "USE_ONE_SHOT": "0" if (mode, shape) == ("modify_graph", "static") else "1"})

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(run, MATRIX))


def _phases(mxrec_ref_command, env):
    environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **env)
    environment.pop("USE_COMBINE_FAAE", None)
    result = mxrec_ref_command(["run", TWO_TOWER, "--run_mode", "train,load_and_train,predict", "--steps", "20"],
                               env=environment, timeout=300, cwd="/")
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


def test_tf_16_upstream_shaped_example_with_dynamic_expansion(mxrec_ref_command):
    """LazyAdamByAddress on dynamic-expansion tables, graph modification, all phases."""
    phases, stderr = _phases(mxrec_ref_command, {"USE_DYNAMIC_EXPANSION": "1", "USE_MODIFY_GRAPH": "1"})
    assert phases.pop("returncode") == (0, None), stderr[-3000:]
    assert [(name, step) for name, (step, _) in phases.items()] == [("train", 20), ("load_and_train", 40),
                                                                   ("predict", 40)]
