"""CON-7: results depend on the calls only, not on the process or hash seeds."""
import os
import subprocess
import sys

import pytest

from mxrec_ref.errors import NotSupported

# "full": admission, eviction and row placement too; "plain": a growing table without thresholds, for a
# backend that cannot express those (CON-11) -- its hash order must not leak into results either.
SCRIPT = """
import hashlib, sys
import numpy as np
from mxrec_ref import Adagrad, TableConfig, open_store
from mxrec_ref.conformance.plugin import resolve_backend
from mxrec_ref.errors import NotSupported
full = sys.argv[2] == "full"
thresholds = dict(access_threshold=2, eviction_threshold=3) if full else {}
try:
    store = open_store(TableConfig("t", dim=4, device_vocabulary_size=8, dynamic_expansion=True, **thresholds),
                       Adagrad(0.1), backend=resolve_backend(sys.argv[1]))
    rng = np.random.default_rng(5)
    for step in range(20):
        batch = rng.zipf(1.3, size=200) % 10_007 - 1
        result = store.lookup(batch, step=step)
        store.apply_gradients(result, rng.normal(size=(len(result.unique_keys), 4)), step=step)
        if full and step % 4 == 3:
            store.evict()
    state = store.export()
    digest = hashlib.sha256()
    for part in (state.keys, state.values, state.slots["accumulator"], state.counts, state.last_seen,
                 state.pending_keys, state.pending_counts, *([store.row_handles(state.keys)] if full else [])):
        digest.update(part.tobytes())
    print(digest.hexdigest())
except NotSupported as error:
    print("NotSupported:", error)
"""


def _digest(backend: str, hash_seed: str, scenario: str) -> str:
    env = dict(os.environ, PYTHONHASHSEED=hash_seed)
    out = subprocess.run([sys.executable, "-c", SCRIPT, backend, scenario], env=env, capture_output=True,
                         text=True, check=True)
    line = out.stdout.strip().splitlines()[-1]
    if line.startswith("NotSupported: "):
        raise NotSupported(line[len("NotSupported: "):])     # the child's CON-11 answer, n/a here too
    return line


@pytest.mark.parametrize("scenario", ["full", "plain"])
def test_con_7_same_calls_same_state_across_processes(backend, scenario):
    digests = {_digest(backend, seed, scenario) for seed in ("0", "1", "12345")}
    assert len(digests) == 1
