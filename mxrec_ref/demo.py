"""`make demo`: train a click model whose sparse features live in a store.

The embedded default data set is a deterministic synthetic click log shaped
like Criteo's categorical fields: each field draws Zipf(1.05)-distributed ids
from its own vocabulary, and clicks follow a hidden logistic model, so the
achievable AUC is known.  The model is a factorisation machine: every feature
id has one row ``[w, v_1..v_k]`` in a single table with admission and
eviction on; the dense bias trains with plain SGD.  Gradients of the unique
rows are formed with ``inverse`` exactly as the TensorFlow layer forms its
IndexedSlices, then applied inside the store.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from .config import Initializer, TableConfig
from .optimizers import Adagrad
from .metrics import auc
from .backends import open_store

FIELD_CARDINALITIES = (1460, 583, 305, 24, 12517, 633, 93, 5683, 3194, 27, 14992, 5461)
ZIPF_EXPONENT = 1.05
FIELD_SHIFT = 40  # key = field << 40 | id: one table, fields never collide


@dataclass(frozen=True)
class ClickLog:
    keys: np.ndarray    # int64 [n, fields]
    labels: np.ndarray       # float32 [n]
    probability: np.ndarray  # the hidden model's click probability [n]


def synthetic_click_log(n: int, seed: int = 0) -> ClickLog:
    rng = np.random.default_rng(seed)
    truth = np.random.default_rng(10_000 + seed)
    columns, logit = [], np.full(n, -1.2)
    for field, cardinality in enumerate(FIELD_CARDINALITIES):
        ranks = _zipf_ranks(rng, cardinality, n)
        weights = truth.normal(scale=0.6, size=cardinality)
        logit += weights[ranks]
        columns.append((np.int64(field) << FIELD_SHIFT) | ranks.astype(np.int64))
    probability = 1.0 / (1.0 + np.exp(-logit))
    labels = (rng.random(n) < probability).astype(np.float32)
    return ClickLog(np.stack(columns, axis=1), labels, probability)


def _zipf_ranks(rng, cardinality: int, n: int) -> np.ndarray:
    """Ranks 0..cardinality-1 with P(r) ∝ (r+1)^-s: a bounded Zipf."""
    weights = 1.0 / np.arange(1, cardinality + 1) ** ZIPF_EXPONENT
    cdf = np.cumsum(weights / weights.sum())
    return np.minimum(np.searchsorted(cdf, rng.random(n)), cardinality - 1)


class FactorizationMachine:
    """logit = b + Σ_f w_f + Σ_{f<g} <v_f, v_g>, rows [w, v] from one store."""

    def __init__(self, store, factors: int):
        self.store, self.factors, self.bias = store, factors, 0.0

    def forward(self, keys, *, train: bool, step: int):
        result = self.store.lookup(keys, train=train, step=step)
        rows = result.embeddings()                        # [batch, fields, 1 + k]
        linear, factors = rows[..., 0], rows[..., 1:]
        total = factors.sum(axis=1)
        pairwise = 0.5 * ((total**2).sum(axis=1) - (factors**2).sum(axis=(1, 2)))
        return result, rows, self.bias + linear.sum(axis=1) + pairwise

    def train_step(self, keys, labels, step: int, dense_lr: float = 0.05) -> float:
        result, rows, logit = self.forward(keys, train=True, step=step)
        p = 1.0 / (1.0 + np.exp(-logit))
        dlogit = (p - labels) / len(labels)                # d(mean log loss)/d logit
        factors = rows[..., 1:]
        total = factors.sum(axis=1, keepdims=True)
        grad_rows = np.empty_like(rows)
        grad_rows[..., 0] = dlogit[:, None]
        grad_rows[..., 1:] = dlogit[:, None, None] * (total - factors)
        unique_grads = np.zeros((len(result.unique_keys), rows.shape[-1]), dtype=np.float32)
        np.add.at(unique_grads, result.inverse.reshape(-1), grad_rows.reshape(-1, rows.shape[-1]))
        self.store.apply_gradients(result, unique_grads, step=step)
        self.bias -= dense_lr * float(dlogit.sum())
        eps = 1e-7
        return float(-np.mean(labels * np.log(p + eps) + (1 - labels) * np.log(1 - p + eps)))

    def predict(self, keys) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-self.forward(keys, train=False, step=0)[2]))


def run(backend: str = "fast", *, rows: int = 200_000, batch: int = 2048, epochs: int = 3, factors: int = 8,
        access_threshold: int = 2, eviction_threshold: int = 60, seed: int = 0, echo=print) -> dict:
    log = synthetic_click_log(rows, seed)
    split = int(rows * 0.8)
    train_keys, train_labels = log.keys[:split], log.labels[:split]
    test_keys, test_labels = log.keys[split:], log.labels[split:]
    config = TableConfig("features", dim=1 + factors, device_vocabulary_size=4096, dynamic_expansion=True,
                         access_threshold=access_threshold, eviction_threshold=eviction_threshold,
                         initializer=Initializer(kind="truncated_normal", stddev=0.01, seed=seed))
    store = open_store(config, Adagrad(learning_rate=0.3, initial_accumulator_value=0.01), backend=backend)
    model = FactorizationMachine(store, factors)
    echo(f"mxrec-ref demo: factorisation machine, {len(FIELD_CARDINALITIES)} Zipf({ZIPF_EXPONENT}) fields, "
         f"{rows} rows, backend={backend}; the hidden model's own test AUC is {auc(test_labels, log.probability[split:]):.4f}")
    step, started = 0, time.perf_counter()
    history = []
    for epoch in range(epochs):
        losses = []
        for start in range(0, split, batch):
            losses.append(model.train_step(train_keys[start:start + batch], train_labels[start:start + batch], step))
            step += 1
            if step % 25 == 0:
                store.evict()
        test_auc = auc(test_labels, model.predict(test_keys))
        stats = store.stats()
        history.append(test_auc)
        echo(f"epoch {epoch + 1}: train logloss {np.mean(losses):.4f}  test AUC {test_auc:.4f}  "
             f"table size {stats['size']} (capacity {stats['capacity']}, pending {stats['pending']}, "
             f"evicted {stats['evicted']}, growths {stats['growths']})")
    elapsed = time.perf_counter() - started
    echo(f"{step} steps in {elapsed:.1f}s; default-value positions {store.stats()['default_positions']} "
         f"of {store.stats()['key_positions']}")
    return {"test_auc": history, "stats": store.stats(), "steps": step}
