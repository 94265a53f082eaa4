"""Child processes of tests/test_checkpoint_faults.py (no TensorFlow: they start fast).

``kill BACKEND FOLDER PROTOCOL`` -- the step-by-step kill test of one table's
save (CKPT-8): state A is saved completely; then, for each step of the save
protocol in turn, a forked process saves state B into the same folder and is
SIGKILLed when that step completes; a forked process that has loaded nothing
before then loads the folder and must get A or B exactly, never an error and
never a mix; the folder is reset to A.  PROTOCOL is ``exchange`` (one
RENAME_EXCHANGE) or ``rename`` (the two-rename fallback).  Prints one line
per step: ``<step> <A|B>``.

``write BACKEND FOLDER PROTOCOL N`` saves states A and B in turn, N times
(and on until the reader has loaded 5 times, so the two overlap).
``read BACKEND FOLDER`` loads in a loop until FOLDER/done exists and prints
``loads mixed errors``: the concurrent reader test (CKPT-11).
"""
import hashlib
import os
import signal
import sys
import time
import traceback
from pathlib import Path

import numpy as np

from mxrec_ref import Adagrad, TableConfig, checkpoint, open_store

ROWS = 20_000


def make_store(backend):
    config = TableConfig("t", dim=8, device_vocabulary_size=ROWS, access_threshold=0)
    return open_store(config, Adagrad(learning_rate=0.1), backend=backend)


def trained(backend, version: int):
    """State A (version 0) or B (1): same keys and shape, every field differs."""
    store = make_store(backend)
    keys = np.arange(ROWS, dtype=np.int64)
    for step in range(1 + version):
        result = store.lookup(keys, step=step + 10 * version)
        store.apply_gradients(result, np.full((ROWS, 8), 0.5 + version, np.float32), step=step)
    return store


def digest(state) -> str:
    h = hashlib.sha256()
    for part in (state.keys, state.values, state.counts, state.last_seen, state.pending_keys,
                 *(state.slots[name] for name in sorted(state.slots))):
        h.update(np.ascontiguousarray(part).tobytes())
    h.update(repr((state.clock, state.clock_source)).encode())
    return h.hexdigest()


def in_child(body) -> int:
    """Run ``body`` in a forked process; its exit status (-9: killed)."""
    pid = os.fork()
    if pid == 0:
        try:
            body()
            code = 0
        except BaseException:
            traceback.print_exc()
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def kill_test(backend, folder, protocol):
    checkpoint.use_exchange = protocol == "exchange"
    a, b = trained(backend, 0), trained(backend, 1)
    digests = {digest(a.export()): "A", digest(b.export()): "B"}
    steps = []
    a.save(Path(folder) / "dry")
    checkpoint.fault_hook = steps.append          # a dry run names the steps of a replacing save
    b.save(Path(folder) / "dry")
    checkpoint.fault_hook = None
    target = Path(folder) / "ckpt"
    for n, step in enumerate(steps):
        a.save(target)

        def save_and_die(n=n):
            seen = iter(range(len(steps)))

            def hook(name):
                if next(seen) == n:
                    os.kill(os.getpid(), signal.SIGKILL)
            checkpoint.fault_hook = hook
            b.save(target)

        assert in_child(save_and_die) == -signal.SIGKILL, f"the save was not killed at step {n} {step!r}"
        result = Path(folder) / "result"

        def load():
            fresh = make_store(backend)
            fresh.load(target)
            result.write_text(digests.get(digest(fresh.export()), "MIXED"))

        if in_child(load) != 0:
            print(step, "ERROR", flush=True)
            continue
        print(step.replace(" ", "_"), result.read_text(), flush=True)
    a.save(target)        # the next save removes what the killed ones left
    print("litter", *sorted(p.name for p in target.iterdir() if p.name != "t"), flush=True)


def writer(backend, folder, protocol, n):
    checkpoint.use_exchange = protocol == "exchange"
    states = [trained(backend, 0), trained(backend, 1)]
    states[0].save(folder)
    (Path(folder) / "ready").write_text("")
    i = 0
    while i < int(n) or (not (Path(folder) / "overlapped").exists() and i < 100 * int(n)):
        states[i % 2].save(folder)
        i += 1
    (Path(folder) / "done").write_text("")


def reader(backend, folder):
    expected = {digest(trained(backend, v).export()) for v in (0, 1)}
    done = Path(folder) / "done"
    while not (Path(folder) / "ready").exists():
        time.sleep(0.01)
    loads = mixed = errors = 0
    while not done.exists():
        store = make_store(backend)
        try:
            store.load(folder)
        except Exception as error:    # a concurrent save must never make a good checkpoint fail
            errors += 1
            print(f"{type(error).__name__}: {error}", file=sys.stderr)
            continue
        loads += 1
        mixed += digest(store.export()) not in expected
        if loads == 5:
            (Path(folder) / "overlapped").write_text("")
    print(loads, mixed, errors, flush=True)


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    {"kill": kill_test, "write": writer, "read": reader}[mode](*args)
