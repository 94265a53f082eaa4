"""The `mxrec-ref` command."""
from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import re
import runpy
import sys
import tempfile
import traceback

from . import __version__, benchmarks, rule_index
from . import demo as demo_module
from . import errors as _errors
from . import train as train_module
from .backends import available_backends, unknown_backend_reason
from .compat import alias, tf1
from .distributed.comm import end_job_after_error
from .plan import command as plan_command

class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's help line ends with its default, except on-off flags (off unless given)
    and options without one (their help says what happens when they are not given)."""

    def _get_help_string(self, action):
        if action.nargs == 0 or action.default is None:
            return action.help
        return super()._get_help_string(action)

# Subcommands that import TensorFlow (its start-up lines are silenced for them unless --verbose).
USES_TENSORFLOW = ("train", "run", "conformance")


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    # SUPPRESS: given before or after the subcommand, neither parser's default hides the other's value
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                        help="show TensorFlow's C++ log lines, the mxrec_ref log at INFO level and the full "
                             "chain of causes of an error")
    parser = argparse.ArgumentParser(prog="mxrec-ref", description=__doc__, parents=[common],
                                     formatter_class=HelpFormatter)
    parser.add_argument("--version", action="version", version=f"mxrec-ref {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str) -> argparse.ArgumentParser:
        return commands.add_parser(name, help=help, description=help, parents=[common], formatter_class=HelpFormatter)

    demo = command("demo", "store-only demo (no TensorFlow): a factorisation machine on a synthetic click log")
    demo.add_argument("--backend", default="fast", choices=["fast", "ref"], help="store backend")
    demo.add_argument("--rows", type=_positive_int, default=200_000, help="rows of the synthetic click log")
    demo.add_argument("--epochs", type=_positive_int, default=3, help="passes over the training rows")
    demo.add_argument("--batch", type=_positive_int, default=2048, help="examples per step")
    train_module.build_parser(command("train", "train a Wide&Deep model through the TF layer (the main job; see "
                                               "`make demo`)"))
    bench = command("bench", "run the benchmarks (from a source checkout) and report ratios measured in one run")
    bench.add_argument("--full", action="store_true", help="1M-key tables (default: the quick profile, 10x smaller)")
    bench.add_argument("--compare", action="store_true", help="exit 1 when a ratio regresses past --margin or a "
                       "quality entry drops beyond its noise band; 3 when the load exceeded the cores (not judged)")
    bench.add_argument("--baseline", help="baseline JSON (default: bench/baseline.json)")
    bench.add_argument("--margin", type=float, default=0.30, help="how much worse than the baseline a ratio may be")
    bench.add_argument("--output", help="where to write the ratios JSON (default: bench-ratios.json; with --trend "
                                        "the PNG, default bench/trend.png; with --scaling the CSV/PNG prefix)")
    bench.add_argument("--scaling", action="store_true", help="lookup and training cost vs table size (CSV + PNG)")
    bench.add_argument("--max-size", type=_positive_int, default=10**6, help="largest table for --scaling (10**7 "
                                                                            "opt-in)")
    benchmarks.add_history_arguments(bench)
    conformance = command("conformance", "run the spec's rules against a store implementation")
    conformance.add_argument("--backend", default="ref,fast",
                             help="ref, fast or module:factory (a callable (config, optimizer) -> Store); "
                                  "comma-separated for several")
    conformance.add_argument("--deep", action="store_true", help="the deep hypothesis profile (2000 examples)")
    conformance.add_argument("--rules", default="", help="only these rules or prefixes, e.g. ADM,EVI-3 (default: all)")
    conformance.add_argument("--report", metavar="FILE", default="",
                             help="also write the per-rule report (pass, FAIL or n/a, and why) to FILE")
    conformance.add_argument("--failures-ok", action="store_true",
                             help="exit 0 when rules fail but the report was written (a survey of a third-party "
                                  "store); a dead backend process still exits 3")
    run = command("run", "run an mxRec script unchanged (import mx_rec resolves to mxrec-ref)")
    run.add_argument("--tf1", action=argparse.BooleanOptionalAction, default=None,
                     help="TF1 mode (TF-26): `import tensorflow` in the script gives tf.compat.v1 with v2 behaviour "
                          "off and tf.layers from tf_keras (default: on when the script writes a TF 1.15-only name "
                          "such as tf.Session or tf.layers at `tf.`)")
    run.add_argument("script", help="the Python script")
    run.add_argument("script_args", nargs=argparse.REMAINDER, help="its arguments")
    plan_command.add_arguments(command("plan", "size tables by replaying a data sample through the stores: device and "
                                               "host sizes, send_count, tier traffic (spec/plan.md)"))
    rule_index.add_arguments(command("rules", "a spec rule's text, the tests that name it and the code that cites "
                                              "it (from a source checkout); without a rule, every rule id"))
    return parser


_positive_int = train_module.positive_int


def main(argv: list[str] | None = None) -> int:
    status = _main(argv)
    if status:
        end_job_after_error(status)       # SHARD-21: a rank that failed ends its MPI job (no-op otherwise)
    return status


def _main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # MXREC_REF_VERBOSE=1 is --verbose for every command (mxrec_ref.tf.fatal reads it for plain scripts)
    verbose = getattr(args, "verbose", False) or os.environ.get("MXREC_REF_VERBOSE", "") not in ("", "0")
    logger = logging.getLogger("mxrec_ref")
    level = logger.level
    handler = _log_to_stderr(verbose)
    try:
        missing = missing_extra(args.command)
        if missing:
            print(f"mxrec-ref {args.command}: {missing}", file=sys.stderr)
            return 2
        if args.command == "run":
            args.tf1 = tf1.wanted(args.tf1, args.script)
            missing = tf1.missing_tf_keras() if args.tf1 else None
            if missing:
                print(f"mxrec-ref run: {missing}", file=sys.stderr)
                return 2
            if args.tf1:
                tf1.prepare_environment()       # before TensorFlow's import: tf.layers from tf_keras
        if args.command in USES_TENSORFLOW or getattr(args, "script", None) and args.command == "plan":
            import_tensorflow_quietly(verbose)
        return _dispatch(args)
    except KeyboardInterrupt:
        print(f"mxrec-ref {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as error:
        line = user_error_line(error)
        if line is None:
            raise                         # a bug, not a user error: the whole traceback
        if verbose:
            traceback.print_exception(error)
        hint = "" if verbose else " (--verbose shows the cause)"
        print(f"mxrec-ref {args.command}: {line}{hint}", file=sys.stderr)
        return 2
    finally:                              # main() may run in-process (tests, scripts): leave logging as it was
        logger.removeHandler(handler)
        logger.setLevel(level)


# Subcommands that need packages only an extra installs: (modules, the extra)
EXTRAS = {"conformance": (("pytest", "hypothesis"), "test")}


def missing_extra(command: str) -> str | None:
    """The one line saying which extra ``command`` needs when one of its packages is not installed
    (checked before anything is imported), else None."""
    modules, extra = EXTRAS.get(command, ((), None))
    missing = [module for module in modules if importlib.util.find_spec(module) is None]
    if not missing:
        return None
    return (f"needs {' and '.join(missing)}, which the '{extra}' extra installs: "
            f"pip install 'mxrec-ref[{extra}]'")


def _dispatch(args) -> int:
    if args.command == "run":
        return run_script(args.script, args.script_args, tf1_mode=args.tf1)
    if args.command == "rules":
        return rule_index.main(args, sys.stdout, sys.stderr)
    if args.command == "conformance":
        # late: the conformance suite needs pytest and hypothesis, which only the 'test' extra installs
        from .conformance import run

        return run.main(args)
    if args.command == "bench":
        return benchmarks.main(args)
    if args.command == "plan":
        return plan_command.main(args)
    if args.command == "train":
        train_module.run(train_module.config_from_args(args))
    elif args.command == "demo":
        if args.backend not in available_backends():
            raise _errors.UsageError(f"demo: backend: {unknown_backend_reason(args.backend)}")
        demo_module.run(args.backend, rows=args.rows, epochs=args.epochs, batch=args.batch)
    return 0


# ------------------------------------------------------------ user errors
_ERROR_NAMES = sorted(name for name, value in vars(_errors).items()
                      if isinstance(value, type) and issubclass(value, _errors.MxrecError))
# A store error raised inside a tf.numpy_function reaches Python as a TF OpError whose message
# holds "CapacityError: table 'x': ..." on a line of its own.
_ERROR_IN_TF_MESSAGE = re.compile(rf"^(?:mxrec_ref\.errors\.)?({'|'.join(_ERROR_NAMES)}): (.+)$", re.M)
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def user_error_line(error: BaseException) -> str | None:
    """One line for an error the user can fix (bad input, configuration, capacity, a missing
    file), found anywhere in the chain of causes; None for anything else (a bug: let it show)."""
    for cause in _causes(error):
        if isinstance(cause, _errors.MxrecError):
            return f"{type(cause).__name__}: {cause}"
        if isinstance(cause, (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError)):
            return str(cause)
        if type(cause).__module__.startswith("tensorflow"):
            match = _ERROR_IN_TF_MESSAGE.search(str(getattr(cause, "message", cause)))
            if match:
                return f"{match.group(1)}: {match.group(2)}"
        if isinstance(cause, (ValueError, TypeError, EnvironmentError)) and _raised_by_mxrec_ref(cause):
            return f"{type(cause).__name__}: {cause}"   # the TF layer's mxRec-style argument checks
    return None


def _causes(error: BaseException):
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def _raised_by_mxrec_ref(error: BaseException) -> bool:
    """Whether the innermost frame of the error's traceback is in this package's code."""
    tb = error.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    return os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(_PACKAGE_DIR + os.sep)


# ------------------------------------------------------------ quiet start
def import_tensorflow_quietly(verbose: bool = False) -> None:
    """Import TensorFlow without its start-up lines on stderr (oneDNN and CPU-feature notices,
    absl's "log messages before InitializeLog" warning, printed once per shared library: they
    bypass TF_CPP_MIN_LOG_LEVEL, so stderr is pointed at a file during the import and shown
    only if the import fails).  Later C++ INFO and WARNING lines stay off through
    TF_CPP_MIN_LOG_LEVEL=2 unless the user set it.  ``verbose``: leave everything as it is."""
    if verbose or "tensorflow" in sys.modules:
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    logging.getLogger("tensorflow").setLevel(logging.ERROR)   # deprecation notices of the TF1 API
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            import tensorflow  # noqa: F401
        except BaseException:
            os.dup2(saved, 2)
            captured.seek(0)
            sys.stderr.write(captured.read().decode(errors="replace"))
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def _log_to_stderr(verbose: bool) -> logging.Handler:
    """The command's own handler for the library's log (the library installs none):
    warnings (a full disk), and with --verbose every event (growth, eviction, checkpoints)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("mxrec-ref: %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(logging.INFO if verbose else logging.WARNING)
    logger = logging.getLogger("mxrec_ref")
    logger.addHandler(handler)
    if verbose and logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    return handler


def run_script(script: str, script_args: list[str], tf1_mode: bool = False) -> int:
    """Like ``python SCRIPT ARGS``: as ``__main__``, the script's folder first on
    sys.path, with the ``mx_rec`` and NPU adapter aliases enabled for this process only;
    ``tf1_mode``: TF 1.15's surface at the script's ``import tensorflow`` (compat/tf1.py)."""
    path = os.path.abspath(script)
    if not os.path.isfile(path):
        print(f"mxrec-ref run: no script {script!r}", file=sys.stderr)
        return 2
    alias.enable()
    from .tf.estimator import install_into_tensorflow   # late: mxrec_ref.tf loads the TF layer

    install_into_tensorflow()                            # tf.estimator for the script (EST-9)
    if tf1_mode:
        tf1.enable(path)
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
    except Exception as error:  # noqa: BLE001 - the script's error, and a prompt exit whatever threads still run
        from .tf import fatal   # late: mxrec_ref.tf loads TensorFlow, which only the script's own imports may start

        if user_error_line(error) is None and fatal.store_error_of(error) is None:
            return fatal.report(error)          # a bug in the script: its traceback, status 1
        fatal.shut_down_promptly()              # TF-13: the sessions close now, the watchdog is armed
        raise                                   # main() prints it as one line, status 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
