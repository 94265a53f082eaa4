"""The store's own work in the 26-table model (bench/criteo26.py), without TF: the model's 64-step key
stream through one fast store per field, in one thread; each step looks up every table for training and
applies a gradient to each lookup's result (Adagrad, truncated-normal initial rows, tables from empty).

    PYTHONPATH=$PWD python bench/criteo26_store.py [--passes 3]

prints the lookups' and the applies' ms per step over steps 4..63, the minimum over ``--passes`` passes
from empty stores.  Not a benchmark (no ratio): run two builds as alternating processes to compare them.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import criteo26  # noqa: E402

from mxrec_ref import Initializer, TableConfig, open_store  # noqa: E402
from mxrec_ref.optimizers import Adagrad  # noqa: E402

STEPS, WARM = 64, 4


def one_pass(batches: list[dict]) -> tuple[float, float]:
    """(lookup seconds, apply seconds) summed over the steps after WARM, from empty stores."""
    initializer = Initializer(kind="truncated_normal", stddev=criteo26.STDDEV)
    stores = [open_store(TableConfig(name=field, dim=criteo26.DIM, dynamic_expansion=True, initializer=initializer),
                         Adagrad(criteo26.SPARSE_LR, criteo26.INITIAL_ACCUMULATOR), backend="fast")
              for field in criteo26.FIELDS]
    lookup = apply = 0.0
    for step, batch in enumerate(batches):
        start = time.perf_counter()
        results = [store.lookup(batch[field], train=True, step=step) for store, field in zip(stores, criteo26.FIELDS)]
        middle = time.perf_counter()
        for store, result in zip(stores, results):
            store.apply_gradients(result, np.full((len(result.unique_keys), criteo26.DIM), 1e-3, np.float32),
                                  step=step)
        end = time.perf_counter()
        if step >= WARM:
            lookup, apply = lookup + middle - start, apply + end - middle
    return lookup, apply


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench/criteo26_store.py")
    parser.add_argument("--passes", type=int, default=3)
    args = parser.parse_args(argv)
    stream = criteo26.make_stream(STEPS)
    batches = [criteo26.batch(stream, step, "keys") for step in range(STEPS)]
    timed = STEPS - WARM
    lookup, apply = min((one_pass(batches) for _ in range(args.passes)), key=sum)
    print(f"store work per step (ms, min of {args.passes} passes): lookups {1e3 * lookup / timed:.2f}, "
          f"applies {1e3 * apply / timed:.2f}, total {1e3 * (lookup + apply) / timed:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
