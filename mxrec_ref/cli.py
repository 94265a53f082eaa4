"""The `mxrec-ref` command."""
from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mxrec-ref", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="store-only demo (no TensorFlow): a factorisation machine on a synthetic click log")
    demo.add_argument("--backend", default="fast", choices=["fast", "ref"])
    demo.add_argument("--rows", type=int, default=200_000)
    demo.add_argument("--epochs", type=int, default=3)
    demo.add_argument("--batch", type=int, default=2048)
    from . import train as train_module

    train_module.build_parser(commands.add_parser(
        "train", help="train a Wide&Deep model through the TF layer (the main job; see `make demo`)"))
    bench = commands.add_parser("bench", help="run the benchmarks and report ratios measured in one run")
    bench.add_argument("--full", action="store_true", help="1M-key tables (default: the quick profile, 10x smaller)")
    bench.add_argument("--compare", action="store_true", help="exit 1 when a ratio regresses past --margin")
    bench.add_argument("--baseline", help="baseline JSON (default: bench/baseline.json)")
    bench.add_argument("--margin", type=float, default=0.30)
    bench.add_argument("--output", help="where to write the ratios JSON (default: bench-ratios.json)")
    bench.add_argument("--scaling", action="store_true", help="lookup and training cost vs table size (CSV + PNG)")
    bench.add_argument("--max-size", type=int, default=10**6, help="largest table for --scaling (10**7 opt-in)")
    from .benchmarks import add_history_arguments

    add_history_arguments(bench)
    conformance = commands.add_parser("conformance", help="run the spec's rules against a store implementation")
    conformance.add_argument("--backend", default="ref,fast",
                             help="ref, fast or module:factory (a callable (config, optimizer) -> Store); "
                                  "comma-separated for several")
    conformance.add_argument("--deep", action="store_true", help="the deep hypothesis profile (2000 examples)")
    conformance.add_argument("--rules", default="", help="only these rules or prefixes, e.g. ADM,EVI-3")
    run = commands.add_parser("run", help="run an mxRec script unchanged (import mx_rec resolves to mxrec-ref)")
    run.add_argument("script")
    run.add_argument("script_args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.command == "run":
        return run_script(args.script, args.script_args)
    if args.command == "conformance":
        from .conformance import run

        return run.main(args)
    if args.command == "bench":
        from . import benchmarks

        return benchmarks.main(args)
    if args.command == "train":
        train_module.run(train_module.config_from_args(args))
    elif args.command == "demo":
        from . import demo as demo_module

        demo_module.run(args.backend, rows=args.rows, epochs=args.epochs, batch=args.batch)
    return 0


def run_script(script: str, script_args: list[str]) -> int:
    """Like ``python SCRIPT ARGS``: as ``__main__``, the script's folder first on
    sys.path, with the ``mx_rec`` alias enabled for this process only."""
    import os
    import runpy

    from .compat import alias

    path = os.path.abspath(script)
    if not os.path.isfile(path):
        print(f"mxrec-ref run: no script {script!r}", file=sys.stderr)
        return 2
    alias.enable()
    if os.environ.get("MXREC_REF_VERBOSE", "") in ("", "0"):
        # TensorFlow's C++ warning for a failed op repeats a store error with its Python
        # traceback; the script's error is printed once, as one line (TF-13)
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.argv = [path, *script_args]
    sys.path.insert(0, os.path.dirname(path))
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except Exception as error:  # noqa: BLE001 - the script's error: one line for a store error, and a prompt exit
        from .tf import fatal

        return fatal.report(error)
    return 0


if __name__ == "__main__":
    sys.exit(main())
