"""Where a training step of the 26-table model (bench/criteo26.py) spends its time: TF step
stats of mxrec-ref's graph and of the static-table graph, steps traced after the tables grew.

    PYTHONPATH=$PWD python bench/profile_criteo26.py [--warm 30] [--traced 6]

prints, per variant, the step's wall time under tracing, when the MLP's first MatMul starts (the
lookup phase before it), and the op time summed by op type (ops run side by side on the
inter-op threads, so the sums exceed the wall time). For the Python side of mxrec-ref's
callbacks, record the same process with py-spy (the 'profile' extra) and fold the samples:

    py-spy record -r 200 -f raw -o /tmp/c26.txt -- python bench/profile_criteo26.py --only dynamic
    python bench/profile_criteo26.py --fold /tmp/c26.txt

Not a benchmark (it reports no ratio): tracing itself costs time; compare the two variants.
"""
from __future__ import annotations

import argparse
import re
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import criteo26  # noqa: E402


def op_type(node) -> str:
    """'MatMul' from a step-stats node whose timeline label reads 'name = MatMul(a, b)'."""
    match = re.search(r"= (\w+)\(", node.timeline_label)
    return match.group(1) if match else node.node_name.split(":")[0]


def step_profile(run_metadata) -> dict:
    nodes = [(node, node.all_start_micros, node.all_start_micros + node.all_end_rel_micros)
             for device in run_metadata.step_stats.dev_stats for node in device.node_stats
             if node.node_name not in ("_SOURCE", "_SINK")]
    start = min(s for _, s, _ in nodes)
    end = max(e for _, _, e in nodes)
    # oneDNN's builds rename it (_MklMatMul, _MklNativeFusedMatMul): any op type naming MatMul
    first_matmul = min((s for n, s, _ in nodes if "MatMul" in op_type(n)), default=end)
    by_type = defaultdict(float)
    for node, s, e in nodes:
        by_type[op_type(node)] += (e - s) / 1e3
    return {"wall_ms": (end - start) / 1e3, "lookup_phase_ms": (first_matmul - start) / 1e3, "by_type": by_type}


class Timers:
    """Inclusive wall time of some of mxrec-ref's functions, summed over all threads: wrappers
    installed for a profile only (the callbacks run on TF's threads, which cProfile does not see)."""

    def __init__(self):
        self.seconds = Counter()
        self.lock = threading.Lock()

    def wrap(self, owner, name: str, label: str) -> None:
        inner = getattr(owner, name)

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                with self.lock:
                    self.seconds[label] += time.perf_counter() - start
        setattr(owner, name, timed)

    def install(self) -> None:
        # local: the dynamic variant's modules, imported only when it is profiled
        from mxrec_ref import contract
        from mxrec_ref.fast import initializers, store
        from mxrec_ref.tf import table

        for owner, name, label in (
                (table.SparseTable, "lookup_batch", "lookup callback (SparseTable.lookup_batch)"),
                (contract.Store, "lookup", "  Store.lookup"),
                (contract.Store, "_check_keys", "    argument checks: keys"),
                (contract, "_read_only", "    read-only result views"),
                (store.FastEngine, "resolve", "    FastEngine.resolve"),
                (store.FastEngine, "gather", "    FastEngine.gather"),
                (initializers, "initial_rows", "      initial rows (truncated normal)"),
                (contract.Store, "apply_gradients", "apply callback (Store.apply_gradients)"),
                (contract.Store, "_check_grads", "    argument checks: gradients"),
                (contract.Store, "_check_finite", "    argument checks: finite"),
                (contract, "sum_duplicates", "    np.unique of the keys (sum_duplicates)"),
                (store.FastEngine, "apply", "    FastEngine.apply")):
            self.wrap(owner, name, label)
            self.seconds[label] = 0.0


def profile(variant: str, stream: dict, warm: int, traced: int, plain: int = 0, timers: Timers | None = None):
    import tensorflow as tf

    with tf.Graph().as_default():
        if variant == "dynamic":
            import mxrec_ref.tf as mx   # the dynamic variant only

            mx.init(backend="fast", use_dynamic_expansion=True)
            train_op = criteo26.mxrec_graph(tf, mx, stream)
        else:
            train_op = criteo26.static_graph(tf, stream)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            for _ in range(warm):
                session.run(train_op)
            if timers is not None:
                timers.seconds.update({label: -seconds for label, seconds in timers.seconds.items()})
            start = time.perf_counter()
            for _ in range(plain):
                session.run(train_op)
            plain_seconds = time.perf_counter() - start
            options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
            steps = []
            for _ in range(traced):
                metadata = tf.compat.v1.RunMetadata()
                session.run(train_op, options=options, run_metadata=metadata)
                steps.append(step_profile(metadata))
        if variant == "dynamic":
            mx.terminate_config_initializer()
    if timers is not None and plain:
        print(f"\n{variant}: {plain} untraced steps, {1e3 * plain_seconds / plain:.1f} ms a step; "
              f"inclusive time in mxrec-ref's callbacks, ms per step (all tables, all threads):")
        for label, seconds in timers.seconds.items():
            print(f"  {label:55s} {1e3 * seconds / plain:8.2f}")
    return steps


def report(variant: str, steps: list[dict], top: int = 14) -> None:
    median = lambda values: sorted(values)[len(values) // 2]  # noqa: E731
    print(f"\n{variant}: {len(steps)} traced steps; step {median([s['wall_ms'] for s in steps]):.1f} ms (median), "
          f"first MatMul at {median([s['lookup_phase_ms'] for s in steps]):.1f} ms")
    totals = Counter()
    for s in steps:
        totals.update(s["by_type"])
    print("  op type                         op ms per step (median step's ops summed)")
    for name, ms in totals.most_common(top):
        print(f"  {name:30s} {median([s['by_type'].get(name, 0.0) for s in steps]):8.2f}")


def fold(path: Path, top: int = 30) -> None:
    """py-spy's raw samples, by the innermost frame of mxrec_ref or of a library it calls."""
    leaf, inclusive, total = Counter(), Counter(), 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        leaf[frames[-1]] += n
        for frame in set(f for f in frames if "mxrec_ref" in f or "criteo26" in f or "/fast/" in f):
            inclusive[frame] += n
    print(f"{total} samples\n\ninnermost frames:")
    for frame, n in leaf.most_common(top):
        print(f"  {100 * n / total:5.1f}%  {frame}")
    print("\nmxrec_ref frames, inclusive:")
    for frame, n in inclusive.most_common(top):
        print(f"  {100 * n / total:5.1f}%  {frame}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench/profile_criteo26.py")
    parser.add_argument("--warm", type=int, default=30, help="untimed steps first (the tables grow)")
    parser.add_argument("--traced", type=int, default=6, help="steps run with FULL_TRACE")
    parser.add_argument("--only", choices=["dynamic", "static"])
    parser.add_argument("--plain", type=int, default=0, metavar="N",
                        help="N more steps without tracing after the warm-up ones (for --timers or py-spy)")
    parser.add_argument("--timers", action="store_true",
                        help="time mxrec-ref's callbacks over the --plain steps (dynamic variant)")
    parser.add_argument("--fold", type=Path, metavar="RAW", help="summarise a py-spy raw file; runs nothing")
    args = parser.parse_args(argv)
    if args.fold:
        fold(args.fold)
        return 0
    stream = criteo26.make_stream(args.warm + args.traced + args.plain + 1)
    for variant in [args.only] if args.only else ["dynamic", "static"]:
        timers = Timers() if args.timers and variant == "dynamic" else None
        if timers:
            timers.install()
        report(variant, profile(variant, stream, args.warm, args.traced, args.plain, timers))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
