"""Benchmark workloads: Zipf-distributed key batches over a 1M-id universe.

Exponent 1.05 and the universe size follow the Criteo Kaggle statistics in
../shared/data/criteo_kaggle_sample/field_stats.json (its large fields hold
10^6-10^7 ids); ids are scrambled into the int64 range so the key space looks
like hashed features rather than dense ranks.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

# MXREC_BENCH_PROFILE=quick shrinks every table 10x (the `mxrec-ref bench` default: under 3 minutes on 2 cores)
PROFILE = os.environ.get("MXREC_BENCH_PROFILE", "full")


def size_scaled(n: int) -> int:
    return max(1000, n // 10) if PROFILE == "quick" else n


UNIVERSE = size_scaled(1_000_000)
BATCH = 65_536
DIM = 16
ZIPF_EXPONENT = 1.05
FIELD_STATS = Path(__file__).resolve().parents[2] / "shared" / "data" / "criteo_kaggle_sample" / "field_stats.json"


def criteo_cardinalities() -> list[int]:
    """Per-field cardinalities of Criteo Kaggle, when the shared data is present."""
    if not FIELD_STATS.is_file():
        return []
    return json.loads(FIELD_STATS.read_text())["kaggle"]["cardinalities_C1_to_C26"]


def scramble(ranks: np.ndarray) -> np.ndarray:
    """A bijection of ranks onto int64 keys (SplitMix64 finaliser), avoiding -1."""
    x = ranks.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    x = x ^ (x >> np.uint64(31))
    keys = (x >> np.uint64(1)).view(np.int64)  # non-negative: never the padding key
    return keys


def zipf_ranks(rng: np.random.Generator, n: int, universe: int = UNIVERSE) -> np.ndarray:
    weights = 1.0 / np.arange(1, universe + 1, dtype=np.float64) ** ZIPF_EXPONENT
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    return np.minimum(np.searchsorted(cdf, rng.random(n)), universe - 1)


def zipf_batches(n_batches: int, seed: int = 0, batch: int = BATCH, universe: int = UNIVERSE) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [scramble(zipf_ranks(rng, batch, universe)) for _ in range(n_batches)]


def all_keys(universe: int = UNIVERSE) -> np.ndarray:
    return scramble(np.arange(universe))
