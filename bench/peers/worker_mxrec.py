"""mxrec-ref worker: the same lookup + SGD update through the fast store."""
import json
import sys
import time

import numpy as np

from mxrec_ref import SGD, Initializer, TableConfig, open_store

sys.path.insert(0, sys.argv[1])
from workload import BATCH, DIM, batches, prefill_keys  # noqa: E402

store = open_store(TableConfig("peer", dim=DIM, device_vocabulary_size=2_000_000,
                               initializer=Initializer(kind="uniform", minval=-0.1, maxval=0.1)),
                   SGD(learning_rate=0.01), backend="fast")


def step(keys):
    result = store.lookup(keys, step=0)
    store.apply_gradients(result, np.ones((len(result.unique_keys), DIM), np.float32), step=0)
    return len(result.unique_keys)


keys = prefill_keys()
for start in range(0, len(keys), BATCH):
    step(keys[start:start + BATCH])
times = []
for b in batches():
    t = time.perf_counter()
    step(b)
    times.append(time.perf_counter() - t)
print(json.dumps({"system": "mxrec-ref", "min_step_s": min(times[2:]), "size": store.size()}))
