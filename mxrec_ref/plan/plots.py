"""The plan's PNGs (PLAN-8): table size over time, per-batch distinct keys, tier traffic."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")   # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

from .recommend import TablePlan  # noqa: E402


def write_plots(plans: list[TablePlan], folder) -> list[Path]:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for plan in plans:
        name = plan.table.name
        for kind, draw in (("size", _size), ("batch_keys", _batch_keys), ("traffic", _traffic)):
            figure, axes = plt.subplots(figsize=(7, 4))
            draw(plan, axes)
            axes.set_xlabel("step")
            if axes.get_legend_handles_labels()[0]:
                axes.legend(fontsize="small")
            axes.set_title(f"{name}: {axes.get_title()}")
            path = folder / f"{name}_{kind}.png"
            figure.tight_layout()
            figure.savefig(path, dpi=90)
            plt.close(figure)
            written.append(path)
    return written


def _size(plan: TablePlan, axes) -> None:
    axes.set_title("table size over time")
    axes.plot(plan.counts.seen, label="distinct keys seen", color="black", linestyle=":")
    axes.plot(plan.trace.size, label="size (as configured)", linewidth=2)
    for curve in plan.curves:
        axes.plot(curve.size, label=f"access {curve.access_threshold}, eviction {curve.eviction_threshold}",
                  linewidth=0.8)
    axes.set_ylabel("rows")


def _batch_keys(plan: TablePlan, axes) -> None:
    axes.set_title("distinct keys per batch")
    for rank in range(plan.counts.batch_distinct.shape[1]):
        axes.plot(plan.counts.batch_distinct[:, rank], label=f"rank {rank} batch")
    axes.axhline(plan.sizes.send_count, color="red", linestyle="--", label="recommended send_count")
    if plan.sizes.storage != "hbm":
        axes.axhline(plan.sizes.device, color="purple", linestyle=":", label="recommended device size")
    axes.set_ylabel("keys")


def _traffic(plan: TablePlan, axes) -> None:
    axes.set_title("tier traffic per step")
    for name, rows in plan.trace.traffic.items():
        if name.endswith("_rows") and rows.any():
            axes.plot(rows, label=name)
    axes.set_ylabel("rows")
