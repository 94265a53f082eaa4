"""Writes a fixed set of checkpoint tables into argv[1] with whichever mxrec_ref is on PYTHONPATH and
prints the SHA-256 of every file written, as JSON {relative path: hex digest}.

tests/test_checkpoint_package.py compares the output of this tree with digests recorded from the
writer before the checkpoint module became a package (main at 7e63fe5): the same bytes on disk.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys

import numpy as np

from mxrec_ref import Adagrad, Ftrl, LazyAdam, TableConfig, checkpoint
from mxrec_ref.state import TableState


def state(optimizer, dim: int, n: int, m: int, seed: int, clock=(7, "step")) -> TableState:
    rng = np.random.default_rng(seed)
    keys = np.sort(rng.choice(np.setdiff1d(np.arange(-50, 10_000), [-1]), n + m, replace=False)).astype(np.int64)
    admitted = np.sort(rng.choice(keys, n, replace=False))
    pending = np.setdiff1d(keys, admitted)
    return TableState(
        keys=admitted, values=rng.standard_normal((n, dim)).astype(np.float32),
        slots={slot: rng.standard_normal((n, dim)).astype(np.float32) for slot in optimizer.slot_names},
        counts=rng.integers(0, 9, n).astype(np.int64), last_seen=rng.integers(0, 7, n).astype(np.int64),
        pending_keys=pending, pending_counts=rng.integers(0, 3, m).astype(np.int64),
        pending_last_seen=rng.integers(0, 7, m).astype(np.int64), clock=clock[0], clock_source=clock[1])


def main(root: str) -> None:
    cases = [("adagrad", Adagrad(learning_rate=0.1), 4, 37, 5, (7, "step")),
             ("lazyadam", LazyAdam(learning_rate=0.1), 3, 12, 0, (None, None)),
             ("ftrl", Ftrl(learning_rate=0.1), 2, 0, 0, (1_700_000_000, "timestamp"))]
    for name, optimizer, dim, n, m, clock in cases:
        config = TableConfig(name=name, dim=dim)
        full = state(optimizer, dim, n, m, seed=dim, clock=clock)
        checkpoint.write_table(os.path.join(root, "full"), config, optimizer, full)
        later = state(optimizer, dim, n + 3, m, seed=dim + 1, clock=clock)
        delta, removed = checkpoint.delta_between(full, later)
        checkpoint.write_table(os.path.join(root, "delta"), config, optimizer, delta,
                               previous=os.path.join(root, "full"), removed=removed)
    digests = {}
    for folder, _, files in os.walk(root):
        for file in files:
            path = os.path.join(folder, file)
            with open(path, "rb") as handle:
                digests[os.path.relpath(path, root)] = hashlib.sha256(handle.read()).hexdigest()
    print(json.dumps(digests, indent=1, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv[1])
