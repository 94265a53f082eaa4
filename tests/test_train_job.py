"""The `mxrec-ref train` job and its data sets (issue 5, item 7)."""
from pathlib import Path

import numpy as np
import pytest

from mxrec_ref import data as datasets
from mxrec_ref import readers
from mxrec_ref.errors import UsageError
from mxrec_ref import train
from mxrec_ref.metrics import auc, log_loss

MOVIELENS = Path(__file__).resolve().parents[2] / "shared" / "data" / "movielens_latest_small"


def test_synthetic_criteo_shape_and_determinism():
    a, b = datasets.synthetic_criteo(5000, seed=1), datasets.synthetic_criteo(5000, seed=1)
    assert a.categorical.shape == (5000, 26) and a.dense.shape == (5000, 13)
    assert np.array_equal(a.categorical, b.categorical) and np.array_equal(a.labels, b.labels)
    fields = a.categorical >> datasets.FIELD_SHIFT
    assert (fields == np.arange(26)).all()                     # keys carry their field
    ids = a.categorical[:, 2] & ((1 << datasets.FIELD_SHIFT) - 1)
    counts = np.bincount(ids)
    assert counts[0] > 20 * np.median(counts[counts > 0])      # Zipf head
    assert 0.7 < auc(a.labels, a.best_scores) < 0.95


def test_auc_and_log_loss():
    y = np.array([0, 0, 1, 1])
    assert auc(y, np.array([0.1, 0.4, 0.35, 0.8])) == 0.75
    assert auc(y, np.ones(4)) == 0.5
    assert log_loss(y, np.array([0.5] * 4)) == pytest.approx(np.log(2))


@pytest.mark.skipif(not MOVIELENS.is_dir(), reason="shared MovieLens sample not present")
def test_movielens_loader_reads_the_shared_sample():
    data = readers.training_dataset(readers.read(MOVIELENS))
    assert data.categorical.shape == (100_836, 3)
    assert np.all(np.diff(data.timestamps) >= 0)
    assert 0.3 < data.labels.mean() < 0.7


def test_movielens_loader_reports_missing_file(tmp_path):
    with pytest.raises(UsageError, match="no ratings.csv"):
        readers.read(tmp_path)


def test_train_job_auc_rises_with_admission_eviction_and_checkpoints(backend, tmp_path):
    config = train.TrainConfig(backend=backend, rows=40_000, steps=120, batch_size=256, eval_every=40,
                               eviction_threshold=200, evict_step_interval=20, checkpoint_dir=str(tmp_path),
                               save_checkpoint_steps=60, progress=False)
    lines = []
    result = train.run(config, echo=lines.append)
    aucs = [h["test_auc"] for h in result["history"]]
    assert len(aucs) == 3 and aucs[-1] > aucs[0] > 0.55
    stats = result["stats"]["deep"]
    assert stats["evicted"] > 0 and stats["pending"] > 0 and stats["growths"] > 0
    assert any(p.name.startswith("sparse-model.ckpt-") for p in tmp_path.iterdir())
    assert any("test AUC" in line for line in lines)


def test_ws_8_train_warm_start_flag(tmp_path):
    first = train.TrainConfig(backend="ref", rows=20_000, steps=60, batch_size=256, eval_every=60,
                              checkpoint_dir=str(tmp_path / "a"), save_checkpoint_steps=60, progress=False)
    before = train.run(first, echo=lambda line: None)
    second = train.TrainConfig(backend="ref", rows=20_000, steps=1, batch_size=256, eval_every=1,
                               checkpoint_dir=str(tmp_path / "b"), warm_start=str(tmp_path / "a"), progress=False)
    after = train.run(second, echo=lambda line: None)
    trained = before["history"][-1]["test_auc"]
    assert trained > 0.55
    # one step after the warm start the model is as good as the run it came from, not a fresh one
    assert after["history"][0]["test_auc"] > trained - 0.02
    assert after["stats"]["deep"]["size"] >= before["stats"]["deep"]["size"]
