"""examples/mxrec_estimator.py (issue 29, item 5) through `mxrec-ref run`: train_and_evaluate, then predict
in a second process that must reproduce the train phase's predictions from model_dir (EST-5, TF-21).
FeatureSpec + HBM and graph modification + DDR run by default; the other two combinations are marked slow."""
import os
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "mxrec_estimator.py"
COMBINATIONS = [("feature_spec", "hbm"), ("modify_graph", "ddr"),
                pytest.param("feature_spec", "ddr", marks=pytest.mark.slow),
                pytest.param("modify_graph", "hbm", marks=pytest.mark.slow)]


@pytest.mark.parametrize("use_mode,storage", COMBINATIONS)
def test_est_7_estimator_example_trains_evaluates_and_predicts_in_a_new_process(
        mxrec_ref_command, tmp_path, use_mode, storage):
    model_dir = str(tmp_path / "model")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    common = [EXAMPLE, "--use_mode", use_mode, "--storage", storage, "--model_dir", model_dir, "--max_steps", "40",
              "--save_checkpoints_steps", "20"]
    train = mxrec_ref_command(["run", *common, "--run_mode", "train_and_evaluate"], env=env, timeout=300, cwd="/")
    assert train.returncode == 0, train.stderr[-3000:]
    lines = train.stdout.strip().splitlines()
    assert lines[-1] == "Demo done!"
    assert lines[-2].startswith(f"TRAINED mode={use_mode} storage={storage} global_step=40 ")
    assert "evaluation at step 40" in train.stderr
    predict = mxrec_ref_command(["run", *common, "--run_mode", "predict"], env=env, timeout=300, cwd="/")
    assert predict.returncode == 0, predict.stderr[-3000:]
    lines = predict.stdout.strip().splitlines()
    assert lines[-1] == "Demo done!"
    assert lines[-2] == (f"PREDICTED mode={use_mode} storage={storage} checkpoint=model.ckpt-40 predictions=512 "
                         f"same_as_train_phase=True")
