"""The upstream-shaped examples under a real ``mpirun`` on 2 ranks (spec/sharding.md, SHARD-12): every lookup
style -- FeatureSpec, graph modification, tensor ids without the rewrite -- trains, reloads and trains on, and
predicts, and one process predicts the same from the 2 ranks' checkpoint (SHARD-10, SHARD-11).  Graph
modification ran its tables' merged store calls in an order of TensorFlow's own per rank: the ranks' all-to-alls
met other tables' and the heap was corrupted (issue 30)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from test_sharding_mpi import HERE, mpirun

EXAMPLES = HERE.parent / "examples"
STYLES = {"feature_spec": {}, "modify_graph": {"USE_MODIFY_GRAPH": "1"}, "tensor_ids": {"USE_TENSOR_IDS": "1"}}
SMALL = ["--steps", "6", "--rows", "1024"]


def launch(script: Path, args: list, env: dict, ranks: int = 2) -> subprocess.CompletedProcess:
    environment = dict(os.environ, PYTHONPATH=str(HERE.parent), TF_CPP_MIN_LOG_LEVEL="3", OMPI_ALLOW_RUN_AS_ROOT="1",
                       OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", MXREC_REF_COLLECTIVE_TIMEOUT="60", **env)
    command = [mpirun(), "--oversubscribe", "-np", str(ranks), sys.executable, "-m", "mxrec_ref", "run", str(script),
               *args]
    return subprocess.run(command, env=environment, capture_output=True, text=True, timeout=240, cwd="/")


def phase_lines(stdout: str) -> list[tuple[str, str]]:
    """(phase, the rest of its line) for each "PHASE" line, in order."""
    return [(line.split()[1], line.split(" ", 3)[3]) for line in stdout.splitlines() if line.startswith("PHASE ")]


@pytest.mark.parametrize("style", STYLES)
def test_shard_12_every_lookup_style_trains_reloads_and_predicts_on_two_ranks(style, tmp_path, mxrec_ref_command):
    done = launch(EXAMPLES / "mxrec_two_tower.py",
                  ["--run_mode", "train,load_and_train,predict", "--model_dir", str(tmp_path), *SMALL], STYLES[style])
    assert done.returncode == 0, f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    lines = phase_lines(done.stdout)
    # both ranks print every phase's line, the same (the ranks agree on the table sizes and the evaluation)
    assert [name for name, _ in lines] == ["train"] * 2 + ["load_and_train"] * 2 + ["predict"] * 2, done.stdout
    assert lines[0][1] == lines[1][1] and lines[2][1] == lines[3][1] and lines[4][1] == lines[5][1]
    two_ranks = lines[4][1]
    assert two_ranks.split("tables=")[1] == lines[2][1].split("tables=")[1]   # predict sees what was saved
    # one process predicts from the 2 ranks' checkpoint: the same keys, the same scores (capacity is one shard's)
    one = mxrec_ref_command(["run", EXAMPLES / "mxrec_two_tower.py", "--run_mode", "predict", "--model_dir",
                             tmp_path, *SMALL], env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **STYLES[style]),
                            timeout=240, cwd="/")
    assert one.returncode == 0, one.stderr[-3000:]
    [(name, one_rank)] = phase_lines(one.stdout)
    assert name == "predict" and one_rank.split(" tables=")[0] == two_ranks.split(" tables=")[0]
    sizes = lambda line: {t: v[0] for t, v in eval(line.split("tables=")[1]).items()}   # noqa: E731, S307
    assert sizes(one_rank) == sizes(two_ranks) and all(size > 0 for size in sizes(one_rank).values())


def test_shard_12_the_two_table_example_in_graph_modification_mode_on_two_ranks():
    done = launch(EXAMPLES / "mxrec_two_tables.py", [], {"MXREC_EXAMPLE_MODE": "modify_graph"})
    assert done.returncode == 0, f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    successes = [line for line in done.stdout.splitlines() if line.startswith("SUCCESS mode=modify_graph")]
    assert len(successes) == 2 and successes[0] == successes[1], done.stdout
