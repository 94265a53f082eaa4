"""CON-7: results depend on the calls only, not on the process or hash seeds."""
import hashlib
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import hashlib, sys
import numpy as np
from mxrec_ref import Adagrad, TableConfig, open_store
from mxrec_ref.conformance.plugin import resolve_backend
store = open_store(TableConfig("t", dim=4, device_vocabulary_size=8, dynamic_expansion=True,
                               access_threshold=2, eviction_threshold=3), Adagrad(0.1), backend=resolve_backend(sys.argv[1]))
rng = np.random.default_rng(5)
for step in range(20):
    batch = rng.zipf(1.3, size=200) % 10_007 - 1
    result = store.lookup(batch, step=step)
    store.apply_gradients(result, rng.normal(size=(len(result.unique_keys), 4)), step=step)
    if step % 4 == 3:
        store.evict()
state = store.export()
digest = hashlib.sha256()
for part in (state.keys, state.values, state.slots["accumulator"], state.counts, state.last_seen,
             state.pending_keys, state.pending_counts, store.row_handles(state.keys)):
    digest.update(part.tobytes())
print(digest.hexdigest())
"""


def _digest(backend: str, hash_seed: str) -> str:
    env = dict(os.environ, PYTHONHASHSEED=hash_seed)
    out = subprocess.run([sys.executable, "-c", SCRIPT, backend], env=env, capture_output=True, text=True,
                         check=True)
    return out.stdout.strip()


def test_con_7_same_calls_same_state_across_processes(backend):
    digests = {_digest(backend, seed) for seed in ("0", "1", "12345")}
    assert len(digests) == 1
