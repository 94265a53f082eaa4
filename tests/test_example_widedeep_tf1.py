"""The TF 1.15-style Wide&Deep (examples/mxrec_widedeep_tf1.py) through `mxrec-ref run --tf1`:
TFRecords generated from the Criteo sample rows into a temporary folder, train then predict in a new
process, FeatureSpec and graph-modification modes (issue 29, item 5; TF-26..TF-28)."""
import os
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "mxrec_widedeep_tf1.py"
CRITEO = next((folder / "shared" / "data" / "criteo_kaggle_sample" / "dac_train_head900.txt"
               for folder in REPO.parents
               if (folder / "shared" / "data" / "criteo_kaggle_sample" / "dac_train_head900.txt").is_file()), None)
PHASE = re.compile(r"^PHASE (\w+) ok step=(\d+) auc=([\d.]+) scores=(\d+) mean_score=([\d.]+) tables=(.+)$", re.M)


@pytest.mark.skipif(CRITEO is None, reason="the Criteo sample rows (shared/data) are not beside this checkout")
@pytest.mark.parametrize("mode,storage", [("feature_spec", "hbm"), ("modify_graph", "ddr")])
def test_tf_28_tf1_wide_and_deep_trains_then_predicts_in_a_new_process(mxrec_ref_command, tmp_path, mode, storage):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", USE_MODIFY_GRAPH=str(int(mode == "modify_graph")),
               STORAGE=storage)
    common = ["--model_dir", str(tmp_path / "model"), "--data_dir", str(tmp_path / "data"), "--criteo", str(CRITEO),
              "--steps", "20"]
    phases = {}
    for phase in ("train", "predict"):
        result = mxrec_ref_command(["run", "--tf1", EXAMPLE, "--phase", phase, *common], env=env, timeout=300,
                                   cwd="/")
        assert result.returncode == 0, result.stderr[-3000:]
        assert result.stdout.strip().splitlines()[-1] == "Demo done!"
        (name, step, auc, scores, mean, tables), = PHASE.findall(result.stdout)
        phases[name] = (int(step), float(auc), int(scores), mean, tables)
        if phase == "train":
            assert sorted(os.listdir(tmp_path / "data")) == ["eval.tfrecord", "train.tfrecord"]
            first, last = map(float, re.search(r"train: 20 steps, loss ([\d.]+) -> ([\d.]+)", result.stderr).groups())
            assert last < first
    assert phases["train"][0] == phases["predict"][0] == 20 and phases["train"][2] == 100
    assert 0.5 < phases["train"][1] <= 1.0
    # the new process restored exactly what training left: the same scores (to 6 digits) and table sizes
    assert phases["predict"][1:] == phases["train"][1:]
