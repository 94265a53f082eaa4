"""Tier step cost by table size (issue 16): one training step (lookup + Adagrad apply, dim 16) of
8,192 Zipf(1.05) keys over a table of N keys, per storage mode, the modes' rounds interleaved in one
process so that the machine's load drifts alike for all of them.

    PYTHONPATH=. python bench/tier_scaling.py [--sizes 100000 1000000 10000000] [--rounds 9]

Modes (bench/test_tier_bench.py ``step_store``): HBM (dynamic expansion), DDR (host tier grows),
SSD with cold reads (host tier N/4) and SSD with the batch's universe in host memory ("ssd-hot").
Per size it prints, per mode, the median step and its range over rounds, and the median and range
of the per-round ratio to the HBM round just before it, and the ratio of the least loaded rounds
(a mode's fastest round over HBM's fastest: on a shared machine the steadiest estimate of the
intrinsic cost); the flatness ratio is a mode's fastest round at N over its fastest round at the
smallest N.  Writes bench/tier_scaling.csv and
bench/tier_scaling.png (step cost vs table size, one line per mode).  10^7 keys need ~8 GB of
memory and ~2 GB of disk and take minutes to fill.
"""
from __future__ import annotations

import argparse
import csv
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from test_tier_bench import STEPS_PER_ROUND, run_steps, step_store  # noqa: E402

MODES = ["hbm", "ddr", "ssd", "ssd-hot"]


def measure(n: int, rounds: int, folder: Path, modes: list[str]) -> dict[str, list[float]]:
    """Per mode, the step time (ms) of each round, rounds interleaved across modes."""
    stores = {}
    for mode in modes:
        store, batches, filled = step_store(mode, n, folder / mode)
        state = {"step": filled}
        run_steps(store, batches, state)           # warm: the tiers reach their steady state
        stores[mode] = (store, batches, state)
    times = {mode: [] for mode in modes}
    for _ in range(rounds):
        for mode in modes:
            store, batches, state = stores[mode]
            start = time.perf_counter()
            run_steps(store, batches, state)
            times[mode].append((time.perf_counter() - start) / STEPS_PER_ROUND * 1e3)
    extra = {}
    for mode in [mode for mode in modes if mode.startswith("ssd")]:
        disk = stores[mode][0].engine.disk
        extra[mode] = disk.index_bytes() / max(1, len(disk))
    print(f"  disk index bytes per on-disk row: {extra}", flush=True)
    stores.clear()
    gc.collect()
    return times


def summarise(rows: list[dict]) -> None:
    print(f"{'N':>10} {'mode':8} {'step ms med (range)':>24} {'/HBM med (range)':>22} {'/HBM min':>9}"
          f" {'flatness':>9}")
    first = {row["mode"]: row["step_min"] for row in rows if row["n"] == rows[0]["n"]}
    for row in rows:
        print(f"{row['n']:>10} {row['mode']:8} {row['step_med']:8.2f} ({row['step_min']:.2f}-{row['step_max']:.2f})"
              f" {row['ratio_med']:8.2f} ({row['ratio_min']:.2f}-{row['ratio_max']:.2f})"
              f" {row['min_ratio']:9.2f} {row['step_min'] / first[row['mode']]:9.2f}")


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib        # only the plot needs it (the measurement does not)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for mode in sorted({row["mode"] for row in rows}, key=MODES.index):
        mine = [row for row in rows if row["mode"] == mode]
        ax.errorbar([row["n"] for row in mine], [row["step_med"] for row in mine],
                    yerr=[[row["step_med"] - row["step_min"] for row in mine],
                          [row["step_max"] - row["step_med"] for row in mine]],
                    marker="o", capsize=3, label=mode.upper() if mode != "ssd-hot" else "SSD, batch in host memory")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("table size (keys)")
    ax.set_ylabel("training step (ms), median and range")
    ax.set_title("8,192-key Zipf(1.05) step, dim 16, Adagrad, fast backend")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=MODES, help="hbm is always measured")
    parser.add_argument("--output", type=Path, default=HERE / "tier_scaling")
    args = parser.parse_args()
    modes = ["hbm"] + [mode for mode in args.modes if mode != "hbm"]
    rows = []
    for n in args.sizes:
        print(f"N = {n}: filling", flush=True)
        with tempfile.TemporaryDirectory(prefix="mxrec-tier-scaling-") as folder:
            times = measure(n, args.rounds, Path(folder), modes)
        for mode in modes:
            ratios = [t / h for t, h in zip(times[mode], times["hbm"])]
            rows.append(dict(n=n, mode=mode, step_med=statistics.median(times[mode]), step_min=min(times[mode]),
                             step_max=max(times[mode]), ratio_med=statistics.median(ratios), ratio_min=min(ratios),
                             ratio_max=max(ratios), min_ratio=min(times[mode]) / min(times["hbm"])))
        summarise(rows)
    with open(args.output.with_suffix(".csv"), "w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    plot(rows, args.output.with_suffix(".png"))


if __name__ == "__main__":
    main()
