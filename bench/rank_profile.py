"""Where a training step's time goes, on one rank or several: `mxrec-ref train` with timers around the
store's and the communicator's entry points (bench/rank_efficiency.py --profile runs it; issue 32).

    [mpirun ... ] python bench/rank_profile.py OUT_PREFIX train [mxrec-ref train options]

Every rank writes OUT_PREFIX.rank<R>.json: seconds of training steps (the job's own ``train_seconds``,
evaluations excluded) and, inside them, the wall time of

* ``sharded``: a sharded store's own work (routing, dedup, headers, answer assembly, statistics), its
  exchanges and owner calls not counted;
* ``owner store``: the rank's own store (the whole lookup / gather / apply of a 1-rank job, the owner's part
  of a sharded one);
* ``resolve ahead``: ``Store.resolve_ahead`` (the key pipeline's work in the input pipeline's map);
* ``sparse exchange``: communicator calls made inside a store call (headers, keys, rows, gradients), the
  wait for the other rank included;
* ``dense reduction``: communicator calls outside store calls (the dense gradients' reduction);
* ``save``, ``evict``: checkpoint saves and eviction passes inside the steps (the hooks run in ``run``).

Times are self times (a call's nested timed calls are counted in their own category), summed over every
thread; the store's calls run in TF's op threads, one at a time per rank (the collective order, SHARD-12).
"""
from __future__ import annotations

import functools
import json
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

from mxrec_ref import train
from mxrec_ref.contract import Store
from mxrec_ref.distributed import comm as comm_module
from mxrec_ref.distributed import world
from mxrec_ref.distributed.sharded import ShardedStore

TOTALS: dict[str, float] = defaultdict(float)
CALLS: dict[str, int] = defaultdict(int)
_STACK = threading.local()
_PAUSED = threading.Event()         # set during evaluations: not a training step


def _timed(function, category):
    """``function`` wrapped: its self time goes to ``category(self)``."""
    @functools.wraps(function)
    def wrapper(self, *args, **kwargs):
        stack = getattr(_STACK, "frames", None)
        if stack is None:
            stack = _STACK.frames = []
        name = category(self, stack)
        stack.append(0.0)                       # time of the nested timed calls
        start = time.perf_counter()
        try:
            return function(self, *args, **kwargs)
        finally:
            elapsed = time.perf_counter() - start
            nested = stack.pop()
            if stack:
                stack[-1] += elapsed
            if not _PAUSED.is_set():
                TOTALS[name] += elapsed - nested
                CALLS[name] += 1
    return wrapper


def _store_category(kind: str):
    def category(store, stack):
        if kind in ("save", "evict", "resolve ahead"):
            return kind
        return "sharded" if isinstance(store, ShardedStore) else "owner store"
    return category


def _comm_category(comm, stack):
    return "sparse exchange" if stack else "dense reduction"


def install() -> None:
    for cls in (Store, ShardedStore):
        for method, kind in (("lookup", "lookup"), ("gather", "lookup"), ("apply_gradients", "apply"),
                             ("resolve_ahead", "resolve ahead"), ("save", "save"), ("evict", "evict")):
            if method in vars(cls):
                setattr(cls, method, _timed(vars(cls)[method], _store_category(kind)))
    for cls in (comm_module.Communicator, comm_module.MpiCommunicator):
        for method in ("allgather", "bcast", "barrier", "alltoallv", "allgather_array", "allreduce_array"):
            if method in vars(cls) and not getattr(vars(cls)[method], "__isabstractmethod__", False):
                setattr(cls, method, _timed(vars(cls)[method], _comm_category))
    evaluate = train.held_out_auc_and_log_loss

    def paused_evaluation(*args, **kwargs):
        _PAUSED.set()
        try:
            return evaluate(*args, **kwargs)
        finally:
            _PAUSED.clear()
    train.held_out_auc_and_log_loss = paused_evaluation


def main(argv: list[str]) -> int:
    prefix, args = argv[0], argv[1:]
    if not args or args[0] != "train":
        raise SystemExit("usage: rank_profile.py OUT_PREFIX train [options]")
    install()
    config = train.config_from_args(train.build_parser().parse_args(args[1:]))
    result = train.run(config, echo=lambda *a, **k: None)
    steps = config.steps
    seconds = steps * config.batch_size / result["examples_per_second"]
    rank = world().rank
    report = {"rank": rank, "ranks": world().size, "steps": steps, "batch_size": config.batch_size,
              "train_seconds": seconds, "examples_per_second": result["examples_per_second"],
              "ms_per_step": {name: 1e3 * value / steps for name, value in sorted(TOTALS.items())},
              "calls_per_step": {name: count / steps for name, count in sorted(CALLS.items())}}
    Path(f"{prefix}.rank{rank}.json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
