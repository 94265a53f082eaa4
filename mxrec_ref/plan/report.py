"""A plan as a terminal table (rich), a JSON document and a config snippet (PLAN-8)."""
from __future__ import annotations

import json

from rich.console import Console
from rich.table import Table

from .recommend import TablePlan
from .replay import TRAFFIC


def to_json(plans: list[TablePlan], *, sample: str, steps: int, batch_size: int, ranks: int) -> dict:
    """Everything the plan found, as plain JSON values (the same document for either backend, PLAN-5)."""
    return {"sample": sample, "steps": steps, "batch_size": batch_size, "ranks": ranks,
            "tables": {plan.table.name: _table_json(plan) for plan in plans}}


def _table_json(plan: TablePlan) -> dict:
    sizes, counts, trace = plan.sizes, plan.counts, plan.trace
    return {
        "columns": list(plan.table.columns),
        "storage": sizes.storage,
        "margin": plan.margin,
        "access_threshold": plan.config.access_threshold,
        "eviction_threshold": plan.config.eviction_threshold,
        "distinct_keys_seen": counts.seen.tolist(),
        "table_size": trace.size.tolist(),
        "batch_distinct_keys_per_rank": counts.batch_distinct.tolist(),
        "owner_distinct_keys_per_rank": counts.owner_distinct.tolist(),
        "device_vocabulary_size": {"minimum": sizes.min_device, "recommended": sizes.device,
                                   "one_below_minimum_fails_at_step": sizes.device_fails_at},
        "send_count": {"minimum": sizes.min_send_count, "recommended": sizes.send_count,
                       "one_below_minimum_fails_at_step": sizes.send_count_fails_at},
        "host_vocabulary_size": sizes.host,
        "ssd_vocabulary_size": sizes.ssd,
        "spills_to_disk_at_step": sizes.spill_step,
        "placement_per_rank": {name: rows.tolist() for name, rows in trace.placement.items()},
        "traffic_per_step": {name: rows.tolist() for name, rows in trace.traffic.items()},
        "traffic_total": {name: int(trace.traffic[name].sum()) for name in TRAFFIC},
        "hot_hit_ratio": plan.hot_hit_ratio,
        "final_stats": trace.totals,
        "curves": [{"access_threshold": c.access_threshold, "eviction_threshold": c.eviction_threshold,
                    "table_size": c.size.tolist(), "peak_size": c.peak.tolist()} for c in plan.curves],
        "snippet": snippet(plan),
    }


def dumps(document: dict) -> str:
    return json.dumps(document, indent=1, sort_keys=True)


def snippet(plan: TablePlan) -> str:
    """mxRec's create_table / sparse_lookup arguments and the TableConfig with the recommended values."""
    c = plan.config
    sizes = f"device_vocabulary_size={c.device_vocabulary_size}"
    if c.host_vocabulary_size:
        sizes += f", host_vocabulary_size={c.host_vocabulary_size}"
    if c.ssd_vocabulary_size:
        sizes += f", ssd_vocabulary_size={c.ssd_vocabulary_size}, ssd_data_path=[...]"
    thresholds = f"access_threshold={c.access_threshold}, eviction_threshold={c.eviction_threshold}"
    return (f"create_table(tf.int64, {c.dim}, {c.name!r}, emb_initializer, {sizes})\n"
            f"FeatureSpec(..., table_name={c.name!r}, {thresholds})\n"
            f"sparse_lookup(table, feature_spec, send_count={c.send_count}, ...)\n"
            f"TableConfig(name={c.name!r}, dim={c.dim}, {sizes}, {thresholds}, send_count={c.send_count})")


def print_table(plans: list[TablePlan], console: Console | None = None) -> None:
    console = console or Console()
    for plan in plans:
        s, trace = plan.sizes, plan.trace
        total = {name: int(trace.traffic[name].sum()) for name in TRAFFIC}
        steps = len(trace.size)
        grid = Table(title=f"table {plan.table.name!r} ({s.storage}, {steps} steps, margin {plan.margin:.0%})",
                     show_header=True)
        grid.add_column("quantity")
        grid.add_column("minimum", justify="right")
        grid.add_column("recommended", justify="right")
        grid.add_column("note")
        grid.add_row("device_vocabulary_size", str(s.min_device), str(s.device),
                     _fails(s.device_fails_at, "a table of minimum - 1 rows"))
        grid.add_row("send_count", str(s.min_send_count), str(s.send_count),
                     _fails(s.send_count_fails_at, "send_count = minimum - 1"))
        if s.storage == "ddr":
            grid.add_row("host_vocabulary_size", "-", str(s.host), "host memory grows: never an error")
        if s.storage == "ssd":
            grid.add_row("host_vocabulary_size", "-", str(s.host),
                         "rows spill to disk from step %s" % s.spill_step if s.spill_step is not None
                         else "nothing spills to disk")
            grid.add_row("ssd_vocabulary_size", "-", str(s.ssd), "the disk grows: never an error")
        grid.add_row("distinct keys seen", "", str(int(plan.counts.seen[-1])), "")
        grid.add_row("table size (end / peak)", "", f"{int(trace.size[-1])} / {int(trace.peak_size.max())}",
                     f"access_threshold={plan.config.access_threshold}, "
                     f"eviction_threshold={plan.config.eviction_threshold}")
        if s.storage != "hbm":
            grid.add_row("rows host->device / device->host", "",
                         f"{total['host_to_device_rows']} / {total['device_to_host_rows']}",
                         f"{total['host_device_bytes'] / steps / 2**20:.2f} MiB a step")
        if s.storage == "ssd":
            grid.add_row("rows host->disk / disk->host", "",
                         f"{total['host_to_disk_rows']} / {total['disk_to_host_rows']}",
                         f"{total['host_disk_bytes'] / steps / 2**20:.2f} MiB a step")
        grid.add_row("hot hit ratio", "", f"{plan.hot_hit_ratio:.3f}", "")
        console.print(grid)
        if plan.curves:
            curves = Table(title="table size under other thresholds (end / peak)")
            curves.add_column("access_threshold")
            curves.add_column("eviction_threshold")
            curves.add_column("size", justify="right")
            for curve in plan.curves:
                curves.add_row(str(curve.access_threshold), str(curve.eviction_threshold),
                               f"{int(curve.size[-1])} / {int(curve.peak.max())}")
            console.print(curves)
        console.print(snippet(plan), markup=False, highlight=False, soft_wrap=True)


def _fails(step: int | None, what: str) -> str:
    return f"{what} fails at step {step}" if step is not None else ""
