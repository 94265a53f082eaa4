"""`mxrec-ref bench`: run the bench/ suites, reduce them to ratios measured in
one run, compare them with a committed baseline, and keep their history.

Ratios, not times: this machine (and any CI machine) is shared and noisy, so
absolute times are printed but never compared; a ratio of two things timed in
the same run cancels most of the drift.  What it does not cancel (a burst of
load during one benchmark) ``--repeat N`` damps: the suites run N times in
turn and each ratio is the median of its N values, so one noisy run neither
passes nor fails a change.  ``--record`` appends a run to bench/history.jsonl
and ``--trend`` draws each ratio across the recorded commits (bench/trend.png).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from .backends import open_store
from .config import TableConfig
from .optimizers import Adagrad

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"
BASELINE = BENCH / "baseline.json"
HISTORY = BENCH / "history.jsonl"
TREND = BENCH / "trend.png"
DEFAULT_MARGIN = 0.30   # a ratio may fall 30% below its baseline before --compare fails


def ratios(report: dict) -> list[dict]:
    """The ratios of one pytest-benchmark JSON run (bench/README.md; bench/ratios.py prints them).

    Every benchmark tagged with ``extra_info["ratio_group"]`` is divided by the ``candidate`` of
    its group (min time over min time: the minimum is the least disturbed by other load on a
    shared machine).  A ratio above 1 means the candidate (the fast store) is that many times faster.
    ``extra_info["also"]``, a list of ``[group, role]``, puts the same timing in further groups (a tier
    step is in its size's mode / HBM group and in its mode's largest / smallest size group)."""
    groups = defaultdict(dict)
    better = {}      # a group whose ratio is a cost (e.g. tiers vs HBM) says better="lower"
    extra = {}
    for bench in report["benchmarks"]:
        info = bench.get("extra_info", {})
        if "ratio_group" in info:
            for group, role in [(info["ratio_group"], info["role"]), *info.get("also", [])]:
                groups[group][role] = bench["stats"]["min"]
                better[group] = info.get("better", better.get(group, "higher"))
            extra.update({k: v for k, v in info.items() if k not in ("ratio_group", "role", "better", "also")})
    rows = []
    for group, members in groups.items():
        candidate = members.get("candidate")
        for role, seconds in members.items():
            if role == "candidate" or candidate is None:
                continue
            rows.append({"group": group, "versus": role, "ratio": seconds / candidate,
                         "candidate_ms": candidate * 1e3, "other_ms": seconds * 1e3, "better": better[group]})
    if "bytes_per_key" in extra:
        floor = 8 + 4 * 16
        rows.append({"group": "memory: bytes per key / (8 + 4*dim)", "versus": "8 + 4*dim",
                     "ratio": extra["bytes_per_key"] / floor, "candidate_ms": None, "other_ms": None,
                     "better": "lower"})
    return rows


def quality(report: dict) -> dict:
    """The quality entries of one pytest-benchmark JSON run: each benchmark's ``extra_info["quality"]``,
    ``{name: {"value": v, "band": b}}`` (higher is better; ``band`` is the noise band measured over seeds,
    bench/quality.py)."""
    entries = {}
    for bench in report["benchmarks"]:
        entries.update(bench.get("extra_info", {}).get("quality", {}))
    return entries


def load_average() -> float | None:
    """The 1-minute load average (None where the system has none)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def add_history_arguments(bench: argparse.ArgumentParser) -> None:
    """The repeat, history and trend options of `mxrec-ref bench`."""
    bench.add_argument("--repeat", type=_positive, default=1, metavar="N",
                       help="run the suites N times in turn; each ratio is the median of its N values (default: 1)")
    bench.add_argument("--from-json", nargs="+", metavar="RATIOS_JSON",
                       help="take the runs from ratio files written by --output instead of running the suites")
    bench.add_argument("--record", action="store_true",
                       help="append this run (commit, machine, date, ratios) to the history file")
    bench.add_argument("--history", default=None, help="the history file (default: bench/history.jsonl)")
    bench.add_argument("--trend", action="store_true",
                       help="plot every ratio across the recorded runs into a PNG (--output, default "
                            "bench/trend.png; needs the 'plot' extra); runs no benchmark")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def run_suites(full: bool) -> dict:
    """One run of every suite, reduced to its ratios."""
    if not BENCH.is_dir():
        raise FileNotFoundError(f"no bench/ folder at {BENCH}: the benchmarks run from a source checkout")
    env = dict(os.environ, MXREC_BENCH_PROFILE="full" if full else "quick", TF_CPP_MIN_LOG_LEVEL="3")
    loads = [load_average()]
    with tempfile.TemporaryDirectory() as scratch:
        raw = Path(scratch) / "raw.json"
        command = [sys.executable, "-m", "pytest", str(BENCH), "-q", "-p", "no:cacheprovider", "--benchmark-only",
                   "--benchmark-columns=min,median,rounds", f"--benchmark-json={raw}"]
        subprocess.run(command, env=env, check=True, cwd=REPO)
        report = json.loads(raw.read_text())
    loads.append(load_average())
    rows = ratios(report)
    cpu = report.get("machine_info", {}).get("cpu", {})
    known = [load for load in loads if load is not None]
    return {
        "profile": "full" if full else "quick",
        "machine": f"{cpu.get('brand_raw', '?')} ({cpu.get('count', '?')} CPUs)",
        "cores": cpu.get("count") or os.cpu_count(),
        # the load around the run (the larger of before and after): --compare judges no regression above the cores
        "load_average": max(known) if known else None,
        "datetime": report.get("datetime"),
        "quality": quality(report),
        "ratios": {f"{r['group']} | {r['versus']}": {"ratio": r["ratio"], "better": r.get("better", "higher"),
                                                      "fast_ms": r["candidate_ms"], "other_ms": r["other_ms"]}
                   for r in rows},
    }


def median_of_runs(runs: list[dict]) -> dict:
    """One result from several runs of the suites: each ratio (and time) is the median over
    the runs that measured it; ``runs`` keeps the values, in run order, to show the spread."""
    if not runs:
        raise ValueError("bench: no runs to combine")
    if len(runs) == 1:                        # already one result (perhaps itself a median): as it is
        return {"repeat": 1, **runs[0]}
    loads = [run["load_average"] for run in runs if run.get("load_average") is not None]
    first = runs[0]
    names = sorted({name for run in runs for name in run["ratios"]})
    ratios = {}
    for name in names:
        entries = [run["ratios"][name] for run in runs if name in run["ratios"]]
        ratios[name] = {"ratio": float(np.median([e["ratio"] for e in entries])),
                        "better": entries[0].get("better", "higher"),
                        "runs": [e["ratio"] for e in entries]}
        for key in ("fast_ms", "other_ms"):
            times = [e[key] for e in entries if e.get(key) is not None]
            ratios[name][key] = float(np.median(times)) if times else None
    qualities = {}
    for name in sorted({name for run in runs for name in run.get("quality", {})}):
        entries = [run["quality"][name] for run in runs if name in run.get("quality", {})]
        qualities[name] = {"value": float(np.median([e["value"] for e in entries])),
                           "band": max(e["band"] for e in entries), "runs": [e["value"] for e in entries]}
    return {"profile": first.get("profile"), "machine": first.get("machine"), "datetime": first.get("datetime"),
            "cores": first.get("cores"), "load_average": max(loads) if loads else None,
            "repeat": len(runs), "ratios": ratios, "quality": qualities}


def compare(result: dict, baseline: dict, margin: float) -> list[str]:
    """Regressions: ratios that moved the wrong way by more than ``margin``, that this run
    lacks, or that have no baseline (a ratio nobody checks is no regression test)."""
    problems = []
    for name, entry in baseline["ratios"].items():
        if name not in result["ratios"]:
            problems.append(f"{name}: missing from this run")
            continue
        old, new = entry["ratio"], result["ratios"][name]["ratio"]
        worse = new < old * (1 - margin) if entry.get("better", "higher") == "higher" else new > old * (1 + margin)
        if worse:
            problems.append(f"{name}: {new:.2f} vs baseline {old:.2f} (more than {margin:.0%} worse)")
    for name in sorted(set(result["ratios"]) - set(baseline["ratios"])):
        problems.append(f"{name}: no baseline (regenerate bench/baseline.json; bench/README.md)")
    return problems + compare_quality(result.get("quality", {}), baseline.get("quality", {}))


def compare_quality(result: dict, baseline: dict) -> list[str]:
    """Quality regressions: an entry (an AUC, or a parity gap) that fell below its baseline by more than
    the baseline's noise band (the spread over seeds, bench/quality.py), or that this run lacks."""
    problems = []
    for name, entry in sorted(baseline.items()):
        if name not in result:
            problems.append(f"{name}: missing from this run")
            continue
        old, new, band = entry["value"], result[name]["value"], entry["band"]
        if new < old - band:
            problems.append(f"{name}: {new:.4f} vs baseline {old:.4f} (a drop of {old - new:.4f}, beyond the noise "
                            f"band {band:.4f}): a quality regression")
    for name in sorted(set(result) - set(baseline)):
        problems.append(f"{name}: no baseline (regenerate bench/baseline.json; bench/README.md)")
    return problems


def too_loaded(result: dict) -> str | None:
    """Why this run cannot judge a regression (its load average exceeded its cores), or None."""
    load, cores = result.get("load_average"), result.get("cores")
    if load is None or not cores or load <= cores:
        return None
    return (f"load average {load:.1f} over the machine's {cores} cores during the run ({result.get('machine')}): "
            f"timings are not comparable, so no regression is called; rerun on a quieter machine")


def print_result(result: dict, width: int | None = None) -> None:
    """The ratio table, as wide as the terminal: when a measure's name does not fit beside
    its numbers, the name takes a line of its own and the numbers go on the next."""
    width = width or shutil.get_terminal_size().columns
    spread = any(len(entry.get("runs", ())) > 1 for entry in result["ratios"].values())
    rows = []
    for name, entry in sorted(result["ratios"].items()):
        times = "" if entry["fast_ms"] is None else f"{entry['fast_ms']:.2f} / {entry['other_ms']:.2f}"
        runs = entry.get("runs", [entry["ratio"]])
        extent = f"{len(runs)} ({min(runs):.2f}-{max(runs):.2f})".ljust(17) if spread else ""
        rows.append((name, f"{entry['ratio']:8.2f}   {extent}{times}".rstrip()))
    numbers = f"{'ratio':>8}   {'runs (min-max)   ' if spread else ''}fast ms / other ms"
    name_width = max([len("measure")] + [len(name) for name, _ in rows])
    if name_width + 1 + max([len(numbers), *(len(n) for _, n in rows)]) <= width:
        print(f"{'measure':{name_width}} {numbers}")
        for name, figures in rows:
            print(f"{name:{name_width}} {figures}")
        return
    print(f"measure\n    {numbers}")
    for name, figures in rows:
        print(name if len(name) <= width else name[:width - 1] + "…")
        print(f"    {figures}")


def print_quality(entries: dict) -> None:
    """The quality entries (bench/quality.py): value and noise band."""
    if not entries:
        return
    width = max(len(name) for name in entries)
    print(f"{'quality':{width}} {'value':>8} {'band':>7}")
    for name, entry in sorted(entries.items()):
        print(f"{name:{width}} {entry['value']:8.4f} {entry['band']:7.4f}")


def _load_text(load) -> str:
    return "unknown" if load is None else f"{load:.2f}"


# ------------------------------------------------------------ history
def current_commit(repo: Path = REPO) -> tuple[str, bool]:
    """(commit hash, whether tracked files differ from it); ("unknown", False) outside git."""
    try:
        commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                                check=True).stdout.strip()
        changed = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                                 capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown", False
    return commit, bool(changed)


def history_entry(result: dict, commit: str, dirty: bool) -> dict:
    """One line of the history: where and when the ratios were measured, and the ratios."""
    return {"commit": commit, "dirty": dirty, "date": result.get("datetime"), "machine": result.get("machine"),
            "profile": result.get("profile"), "repeat": result.get("repeat", 1),
            "ratios": {name: entry["ratio"] for name, entry in sorted(result["ratios"].items())},
            # recorded when the run measured them (older runs, and ratio files, may lack them)
            **{key: result[key] for key in ("load_average", "cores") if result.get(key) is not None},
            **({"quality": {name: e["value"] for name, e in sorted(result["quality"].items())}}
               if result.get("quality") else {})}


def append_history(path: Path, entry: dict) -> None:
    """Append one JSON line; earlier lines are never rewritten."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(entry, sort_keys=True) + "\n")


def read_history(path: Path) -> list[dict]:
    entries = []
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"bench: history: {path} line {number} is not JSON ({error.msg})") from None
        if not isinstance(entry, dict) or not isinstance(entry.get("ratios"), dict):
            raise ValueError(f"bench: history: {path} line {number} has no 'ratios' object")
        entries.append(entry)
    return entries


def trend_series(history: list[dict]) -> dict[str, list[tuple[int, float]]]:
    """Each ratio's (run index, value) points in history order; a run that lacks a ratio
    (one added later, or dropped) leaves a gap, not a zero."""
    names = sorted({name for entry in history for name in entry["ratios"]})
    return {name: [(i, float(entry["ratios"][name])) for i, entry in enumerate(history) if name in entry["ratios"]]
            for name in names}


def run_label(entry: dict) -> str:
    """x-axis label of a run: short commit (* when the tree differed from it) and date."""
    commit = str(entry.get("commit", "?"))[:7] + ("*" if entry.get("dirty") else "")
    return f"{commit}\n{str(entry.get('date') or '')[:10]}"


def plot_trend(history: list[dict], baseline: dict | None, output: Path) -> Path:
    """One panel per ratio: its value at each recorded run, the baseline as a dashed line."""
    import matplotlib      # the 'plot' extra: imported only when a plot is drawn

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = trend_series(history)
    if not series:
        raise ValueError("bench: history: no ratios recorded yet (run `mxrec-ref bench --record`)")
    columns = 4
    rows = -(-len(series) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 2.9 * rows), squeeze=False)
    labels = [run_label(entry) for entry in history]
    base = (baseline or {}).get("ratios", {})
    for panel, (name, points) in zip(axes.flat, series.items()):
        xs, ys = zip(*points)
        panel.plot(xs, ys, "o-", markersize=4)
        better = base.get(name, {}).get("better") or ("lower" if name.startswith(("memory", "tiers")) else "higher")
        if name in base:   # the baseline, and the band --compare accepts at the default margin
            old = base[name]["ratio"]
            limit = old * (1 - DEFAULT_MARGIN) if better == "higher" else old * (1 + DEFAULT_MARGIN)
            panel.axhline(old, color="grey", linestyle="--", linewidth=1)
            panel.axhspan(min(old, limit), max(old, limit), color="green", alpha=0.08)
        panel.set_title("\n".join(textwrap.wrap(name, 48)), fontsize=7)
        panel.set_ylabel(f"ratio ({better} is better)", fontsize=7)
        panel.set_xticks(range(len(history)))
        panel.set_xticklabels(labels, fontsize=6, rotation=90 if len(history) > 6 else 0)
        panel.set_xlim(-0.5, len(history) - 0.5)
        panel.tick_params(axis="y", labelsize=7)
        panel.grid(True, alpha=0.3)
    for panel in list(axes.flat)[len(series):]:
        panel.axis("off")
    machines = sorted({str(entry.get("machine")) for entry in history})
    figure.suptitle(f"mxrec-ref bench ratios by recorded run ({'; '.join(machines)}); dashed: bench/baseline.json, "
                    f"shaded: within --compare's {DEFAULT_MARGIN:.0%} margin", fontsize=9)
    figure.tight_layout(rect=(0, 0, 1, 1 - 0.35 / figure.get_size_inches()[1]))   # room for the title
    output.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(output, dpi=90)
    plt.close(figure)
    return output


def scaling(sizes: list[int], output_prefix: Path, backend: str = "fast") -> list[dict]:
    """Lookup and training-step cost per key as the table grows."""
    # the benchmark suites' key workloads (bench/workloads.py): like every benchmark, from a source checkout
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
    history_path = Path(args.history) if args.history else HISTORY
    if args.trend:
        return _trend(history_path, Path(args.output) if args.output else TREND, args.baseline)
    if args.from_json and args.repeat != 1:
        return _usage("--repeat: the runs come from --from-json; give one or the other")
    if args.from_json:
        try:
            runs = [json.loads(Path(name).read_text()) for name in args.from_json]
        except (OSError, ValueError) as error:
            return _usage(f"--from-json: {error}")
    else:
        runs = []
        for number in range(args.repeat):
            if args.repeat > 1:
                print(f"bench: run {number + 1} of {args.repeat}", flush=True)
            try:
                runs.append(run_suites(args.full))
            except subprocess.CalledProcessError as error:
                print(f"mxrec-ref bench: the benchmark suites failed (pytest exit status {error.returncode}; "
                      f"its output above says which)", file=sys.stderr)
                return 1
    result = median_of_runs(runs)
    print_result(result)
    print_quality(result.get("quality", {}))
    print(f"machine: {result.get('machine')}; load average {_load_text(result.get('load_average'))} on "
          f"{result.get('cores') or '?'} cores")
    if not args.from_json or args.output:
        output = Path(args.output or "bench-ratios.json")
        output.write_text(json.dumps(result, indent=1, sort_keys=True))
        print(f"wrote {output}")
    if args.record:
        append_history(history_path, history_entry(result, *current_commit()))
        print(f"recorded in {history_path}")
    if args.compare:
        baseline = json.loads(Path(args.baseline or BASELINE).read_text())
        problems = compare(result, baseline, args.margin)
        busy = too_loaded(result)
        for line in problems:
            print(f"{'NOT JUDGED' if busy else 'REGRESSION'} {line}")
        checked = len(set(result["ratios"]) & set(baseline["ratios"]))
        ratio_problems = [p for p in problems if not p.startswith("quality ")]
        print(f"{checked - sum(': no baseline' not in p and ': missing' not in p for p in ratio_problems)} of "
              f"{checked} ratios within {args.margin:.0%} of the baseline; {len(problems)} problems")
        if busy:
            print(f"mxrec-ref bench: {busy}")
            return 3 if problems else 0
        return 1 if problems else 0
    return 0


def _trend(history_path: Path, output: Path, baseline_path: str | None) -> int:
    if not history_path.is_file():
        return _usage(f"--trend: no history at {history_path} (record runs with `mxrec-ref bench --record`)")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return _usage("--trend: needs matplotlib (pip install 'mxrec-ref[plot]')")
    baseline_file = Path(baseline_path) if baseline_path else BASELINE
    baseline = json.loads(baseline_file.read_text()) if baseline_file.is_file() else None
    try:
        plot_trend(read_history(history_path), baseline, output)
    except ValueError as error:
        return _usage(str(error).removeprefix("bench: "))
    print(f"wrote {output}")
    return 0


def _usage(message: str) -> int:
    print(f"mxrec-ref bench: {message}", file=sys.stderr)
    return 2
