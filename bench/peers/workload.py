"""The peer-comparison workload, shared by both workers (no mxrec_ref import:
this file also runs in the TFRA environment, numpy 1.26 / TF 2.16)."""
import numpy as np

UNIVERSE = 1_000_000
PREFILL = 500_000
BATCH = 65_536
DIM = 16
STEPS = 8


def scramble(ranks):
    x = ranks.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    x = x ^ (x >> np.uint64(31))
    return (x >> np.uint64(1)).view(np.int64)


def batches(n=STEPS + 2, seed=2):
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, UNIVERSE + 1, dtype=np.float64) ** 1.05
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    return [scramble(np.minimum(np.searchsorted(cdf, rng.random(BATCH)), UNIVERSE - 1)) for _ in range(n)]


def prefill_keys():
    return scramble(np.arange(PREFILL))
