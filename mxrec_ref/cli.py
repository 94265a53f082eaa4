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
    args = parser.parse_args(argv)
    if args.command == "train":
        train_module.run(train_module.config_from_args(args))
    elif args.command == "demo":
        from . import demo as demo_module

        demo_module.run(args.backend, rows=args.rows, epochs=args.epochs, batch=args.batch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
