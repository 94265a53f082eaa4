"""Data sets for the training job: the embedded synthetic Criteo-shaped click
log (the default); real files (MovieLens, Criteo, CSV, TFRecord) are read by
mxrec_ref/readers.py into the same ``Dataset``.

The synthetic log has Criteo's shape: 26 categorical fields whose per-field
cardinalities are the published Criteo Kaggle ones (facebookresearch/dlrm,
as listed in shared/data/criteo_kaggle_sample/field_stats.json) scaled down,
Zipf(1.05)-skewed ids, 13 dense fields, and labels drawn from a hidden
logistic model so the achievable AUC is known and training can approach it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Criteo Kaggle C1..C26 cardinalities (published statistics, not data rows).
CRITEO_CARDINALITIES = (1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194, 27,
                        14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572)
N_DENSE = 13
ZIPF_EXPONENT = 1.05
FIELD_SHIFT = 40  # key = field << 40 | id: fields sharing a table never collide


@dataclass(frozen=True)
class Dataset:
    name: str
    categorical: np.ndarray      # int64 [n, fields], already field-offset keys
    dense: np.ndarray            # float32 [n, n_dense]
    labels: np.ndarray           # float32 [n]
    timestamps: np.ndarray       # int64 [n], non-decreasing
    field_names: tuple[str, ...]
    best_scores: np.ndarray | None = None   # the hidden model's probabilities (synthetic only)

    def split(self, fraction: float) -> tuple["Dataset", "Dataset"]:
        cut = int(len(self.labels) * fraction)
        part = lambda sl: Dataset(self.name, self.categorical[sl], self.dense[sl], self.labels[sl],  # noqa: E731
                                  self.timestamps[sl], self.field_names,
                                  None if self.best_scores is None else self.best_scores[sl])
        return part(slice(0, cut)), part(slice(cut, None))


def scaled_cardinalities(scale: float, floor: int = 1000) -> list[int]:
    """Large fields shrink by ``scale``; fields below ``floor`` keep their size."""
    return [min(c, max(int(round(c * scale)), floor)) for c in CRITEO_CARDINALITIES]


def synthetic_criteo(rows: int, *, scale: float = 1 / 200, seed: int = 0) -> Dataset:
    rng = np.random.default_rng(seed)
    truth = np.random.default_rng(seed + 7919)
    cardinalities = scaled_cardinalities(scale)
    logit = np.full(rows, -1.0)
    columns = []
    for field, cardinality in enumerate(cardinalities):
        ranks = zipf_ranks(rng, cardinality, rows)
        logit += truth.normal(scale=0.35, size=cardinality)[ranks]
        columns.append((np.int64(field) << FIELD_SHIFT) | ranks.astype(np.int64))
    dense = np.log1p(rng.lognormal(mean=1.0, sigma=1.0, size=(rows, N_DENSE))).astype(np.float32)
    logit += (dense - dense.mean(axis=0)) @ truth.normal(scale=0.3, size=N_DENSE)
    probability = 1.0 / (1.0 + np.exp(-logit))
    labels = (rng.random(rows) < probability).astype(np.float32)
    timestamps = 1_600_000_000 + np.arange(rows, dtype=np.int64) // 64   # 64 events per "second"
    return Dataset("synthetic-criteo", np.stack(columns, axis=1), dense, labels, timestamps,
                   tuple(f"C{i + 1}" for i in range(len(cardinalities))), probability)


def zipf_ranks(rng: np.random.Generator, cardinality: int, n: int) -> np.ndarray:
    """Ranks 0..cardinality-1 with P(r) proportional to (r+1)^-1.05."""
    weights = 1.0 / np.arange(1, cardinality + 1, dtype=np.float64) ** ZIPF_EXPONENT
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    return np.minimum(np.searchsorted(cdf, rng.random(n)), cardinality - 1)

