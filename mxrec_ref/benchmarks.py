"""`mxrec-ref bench`: run the bench/ suites, reduce them to ratios measured in
one run, and compare them with a committed baseline.

Ratios, not times: this machine (and any CI machine) is shared and noisy, so
absolute times are printed but never compared; a ratio of two things timed in
the same run cancels most of the drift.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"
BASELINE = BENCH / "baseline.json"
DEFAULT_MARGIN = 0.30   # a ratio may fall 30% below its baseline before --compare fails


def _load_ratios_module():
    sys.path.insert(0, str(BENCH))
    try:
        import ratios
    finally:
        sys.path.pop(0)
    return ratios


def run_suites(full: bool, output: Path) -> dict:
    if not BENCH.is_dir():
        raise FileNotFoundError(f"bench: no bench/ folder at {BENCH}; run from a source checkout")
    env = dict(os.environ, MXREC_BENCH_PROFILE="full" if full else "quick", TF_CPP_MIN_LOG_LEVEL="3")
    with tempfile.TemporaryDirectory() as scratch:
        raw = Path(scratch) / "raw.json"
        command = [sys.executable, "-m", "pytest", str(BENCH), "-q", "-p", "no:cacheprovider", "--benchmark-only",
                   "--benchmark-columns=min,median,rounds", f"--benchmark-json={raw}"]
        subprocess.run(command, env=env, check=True, cwd=REPO)
        report = json.loads(raw.read_text())
    rows = _load_ratios_module().ratios(report)
    result = {
        "profile": "full" if full else "quick",
        "machine": report.get("machine_info", {}).get("cpu", {}).get("brand_raw", "?"),
        "datetime": report.get("datetime"),
        "ratios": {f"{r['group']} | {r['versus']}": {"ratio": r["ratio"], "better": r.get("better", "higher"),
                                                      "fast_ms": r["candidate_ms"], "other_ms": r["other_ms"]}
                   for r in rows},
    }
    output.write_text(json.dumps(result, indent=1, sort_keys=True))
    return result


def compare(result: dict, baseline: dict, margin: float) -> list[str]:
    """Regressions: ratios that moved the wrong way by more than ``margin``."""
    problems = []
    for name, entry in baseline["ratios"].items():
        if name not in result["ratios"]:
            problems.append(f"{name}: missing from this run")
            continue
        old, new = entry["ratio"], result["ratios"][name]["ratio"]
        worse = new < old * (1 - margin) if entry.get("better", "higher") == "higher" else new > old * (1 + margin)
        if worse:
            problems.append(f"{name}: {new:.2f} vs baseline {old:.2f} (more than {margin:.0%} worse)")
    return problems


def print_result(result: dict) -> None:
    print(f"{'measure':72} {'ratio':>8}   fast ms / other ms")
    for name, entry in sorted(result["ratios"].items()):
        times = "" if entry["fast_ms"] is None else f"{entry['fast_ms']:.2f} / {entry['other_ms']:.2f}"
        print(f"{name:72} {entry['ratio']:8.2f}   {times}")


def scaling(sizes: list[int], output_prefix: Path, backend: str = "fast") -> list[dict]:
    """Lookup and training-step cost per key as the table grows."""
    from .config import TableConfig
    from .optimizers import Adagrad
    from .store import open_store

    sys.path.insert(0, str(BENCH))
    try:
        from workloads import DIM, all_keys, scramble, zipf_ranks
    finally:
        sys.path.pop(0)
    rows = []
    batch_size = 16_384
    for size in sizes:
        store = open_store(TableConfig("scaling", dim=DIM, device_vocabulary_size=size), Adagrad(0.05),
                           backend=backend)
        keys = all_keys(size)
        for start in range(0, size, 65_536):
            store.lookup(keys[start:start + 65_536], step=0)
        rng = np.random.default_rng(0)
        batches = [scramble(zipf_ranks(rng, batch_size, size)) for _ in range(5)]
        lookup = min(_timed(lambda b=b: store.lookup(b, train=False).embeddings()) for b in batches)

        def step(b):
            result = store.lookup(b, step=1)
            store.apply_gradients(result, np.ones((len(result.unique_keys), DIM), np.float32), step=1)

        train = min(_timed(lambda b=b: step(b)) for b in batches)
        rows.append({"table_keys": size, "lookup_ns_per_key": lookup / batch_size * 1e9,
                     "train_step_ns_per_key": train / batch_size * 1e9})
        print(f"{size:>10} keys: lookup {rows[-1]['lookup_ns_per_key']:.1f} ns/key, "
              f"train step {rows[-1]['train_step_ns_per_key']:.1f} ns/key")
    csv_path = output_prefix.with_suffix(".csv")
    with open(csv_path, "w") as f:
        f.write("table_keys,lookup_ns_per_key,train_step_ns_per_key\n")
        for r in rows:
            f.write(f"{r['table_keys']},{r['lookup_ns_per_key']:.3f},{r['train_step_ns_per_key']:.3f}\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"wrote {csv_path} (install the 'plot' extra, matplotlib, for the PNG)")
        return rows
    figure, axes = plt.subplots(figsize=(6, 4))
    axes.plot([r["table_keys"] for r in rows], [r["lookup_ns_per_key"] for r in rows], "o-", label="lookup + gather")
    axes.plot([r["table_keys"] for r in rows], [r["train_step_ns_per_key"] for r in rows], "s-",
              label="train lookup + Adagrad apply")
    axes.set_xscale("log")
    axes.set_xlabel("keys in the table")
    axes.set_ylabel("ns per looked-up key")
    axes.set_title(f"mxrec-ref {backend} store, dim {DIM}, Zipf(1.05) batches of {batch_size}")
    axes.grid(True, alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(output_prefix.with_suffix(".png"), dpi=120)
    print(f"wrote {csv_path} and {output_prefix.with_suffix('.png')}")
    return rows


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main(args) -> int:
    if args.scaling:
        sizes = [10**4, 10**5, 10**6] + ([10**7] if args.max_size and args.max_size >= 10**7 else [])
        scaling(sizes, Path(args.output).with_suffix("") if args.output else BENCH / "scaling")
        return 0
    output = Path(args.output or "bench-ratios.json")
    result = run_suites(args.full, output)
    print_result(result)
    print(f"wrote {output}")
    if args.compare:
        baseline = json.loads(Path(args.baseline or BASELINE).read_text())
        problems = compare(result, baseline, args.margin)
        for line in problems:
            print(f"REGRESSION {line}")
        print(f"{len(baseline['ratios']) - len(problems)} ratios within {args.margin:.0%} of the baseline, "
              f"{len(problems)} regressed")
        return 1 if problems else 0
    return 0
