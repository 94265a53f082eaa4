"""The `mxrec-ref plan` subcommand: its arguments and its run."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..backends import available_backends, unknown_backend_reason
from ..errors import UsageError
from ..train import positive_int as _positive_int
from . import recommend, sources, tables
from .replay import schedule


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--data", default="embedded", help="the sample: 'embedded' (the synthetic Criteo-shaped log), a MovieLens "
                                           "folder, a Criteo .txt/.tsv, a .csv of id columns or a .tfrecord")
    add("--source", help="module:function returning a dict of id columns (or an iterable of them), instead of --data")
    add("--rows", type=_positive_int, help="use only the sample's first ROWS rows (default: all; the embedded "
                                           f"log has {sources.EMBEDDED_ROWS})")
    tables_from = parser.add_mutually_exclusive_group()
    tables_from.add_argument("--config", help="JSON {\"tables\": [{TableConfig parameters, \"columns\": [...]}]} "
                                              "(default: one table 'features' over every column)")
    tables_from.add_argument("--script", help="an mxRec script: its create_table calls, found by running its graph "
                                              "construction up to the first Session.run")
    add("--column", action="append", default=[], metavar="TABLE=COLUMN[,COLUMN]",
        help="the sample columns a table looks up (default: the table's name; repeatable)")
    add("--storage", choices=tables.STORAGE_MODES, default="ddr", help="the storage mode to size (TIER-1)")
    add("--ranks", type=_positive_int, default=1, help="ranks; key k lives on rank k mod N (SHARD-2)")
    add("--batch", type=_positive_int, default=1024, help="rows per rank and step")
    add("--steps", type=_positive_int, help="replay at most STEPS steps (default: the whole sample)")
    add("--margin", type=float, default=0.10, help="headroom over the smallest safe size")
    add("--dim", type=_positive_int, default=8, help="embedding dim of the default table")
    add("--access-threshold", type=int, default=None, help="access_threshold of the default table")
    add("--eviction-threshold", type=int, default=None, help="eviction_threshold of the default table (in the "
                                                             "sample's timestamp unit, or steps without one)")
    add("--evict-every", type=_positive_int, default=1, help="evict after every N-th step (EvictHook's "
                                                             "evict_step_interval)")
    add("--optimizer", choices=sorted(tables.OPTIMIZERS), default="adagrad",
        help="sparse optimizer (its slots are bytes a row moves); a script's own optimizer wins")
    add("--backend", choices=["fast", "ref"], default="fast", help="store backend of the replay (same results)")
    add("--no-curves", action="store_true", help="skip the size curves over alternative thresholds")
    add("--out", help="folder for plan.json and the PNG plots")
    add("--json", action="store_true", help="print the JSON document instead of the table")


def main(args) -> int:
    if args.backend not in available_backends():
        raise UsageError(f"plan: --backend: {unknown_backend_reason(args.backend)}")
    margin = recommend.check_margin(args.margin)
    out = _output_folder(args.out)             # before the replay: an unwritable --out fails at once
    sample = sources.open_sample(args.data, args.source, args.rows)
    optimizer = tables.optimizer_named(args.optimizer)
    if args.script:
        planned = tables.from_script(args.script)
    elif args.config:
        planned = tables.from_config(args.config, optimizer)
    else:
        planned = tables.default_tables(sample.columns, dim=args.dim, access_threshold=args.access_threshold,
                                        eviction_threshold=args.eviction_threshold, optimizer=optimizer)
    planned = tables.with_columns(planned, _column_map(args.column), sample.columns)
    sched = schedule(sample, batch_size=args.batch, ranks=args.ranks, steps=args.steps,
                     evict_every=args.evict_every)
    from . import report     # late: rich loads for this command only, not at every CLI start

    plans = [recommend.plan_table(sample, table, sched, storage=args.storage, margin=margin, backend=args.backend,
                                  curves=not args.no_curves) for table in planned]
    document = report.to_json(plans, sample=sample.name, steps=sched.steps, batch_size=sched.batch_size,
                              ranks=sched.ranks)
    if args.json:
        print(report.dumps(document))
    else:
        report.print_table(plans)
    if out is not None:
        try:
            (out / "plan.json").write_text(report.dumps(document))
        except OSError as error:
            raise UsageError(f"plan: --out: cannot write {str(out / 'plan.json')!r}: {error.strerror or error}") \
                from None
        try:
            from .plots import write_plots   # late: matplotlib (the [plot] extra) loads only for plots
        except ImportError as error:
            raise UsageError(f"plan: --out: wrote {out / 'plan.json'}, but the plots need matplotlib "
                             f"(pip install 'mxrec-ref[plot]'): {error}") from None
        written = write_plots(plans, out)
        print(f"wrote {out / 'plan.json'} and {len(written)} plots to {out}", file=sys.stderr)
    return 0


def _output_folder(path: str | None) -> Path | None:
    """``--out`` made (with its parents) and checked writable, or UsageError naming the flag."""
    if path is None:
        return None
    out = Path(path)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"plan: --out: cannot make the folder {path!r}: {error.strerror or error}") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise UsageError(f"plan: --out: the folder {path!r} is not writable")
    return out


def _column_map(entries: list[str]) -> dict[str, list[str]]:
    mapping = {}
    for entry in entries:
        table, _, columns = entry.partition("=")
        if not table or not columns:
            raise UsageError(f"plan: --column: expected TABLE=COLUMN[,COLUMN], got {entry!r}")
        mapping[table] = columns.split(",")
    return mapping
