"""The `mxrec-ref` command as a new user meets it (issue 19, item 3): version, help, quiet
start, one-line user errors, argument checks, scratch folders, no files in the current
folder, explicit arguments over environment variables."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import mxrec_ref
from mxrec_ref import backends, cli, store, train
from mxrec_ref import data as datasets

REPO = Path(__file__).resolve().parent.parent
SMALL = ["--rows", "3000", "--steps", "2", "--eval-every", "2", "--batch-size", "128", "--no-progress"]


def _environment(env):
    environment = {**os.environ, **(env or {})}
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    environment.pop("TF_CPP_MIN_LOG_LEVEL", None)          # as a user's shell has it
    return environment


def _command(*args, cwd=None, env=None, timeout=300):
    """A fresh ``python -m mxrec_ref`` process: for what only a fresh process shows (TensorFlow's
    start-up lines) and one real run of a TensorFlow command each."""
    return subprocess.run([sys.executable, "-m", "mxrec_ref", *args], capture_output=True, text=True,
                          cwd=cwd or REPO, env=_environment(env), timeout=timeout)


@pytest.fixture
def forked(mxrec_ref_command):
    """Like _command, in a process forked from one that imported TensorFlow (tests/forked_cli.py)."""
    def command(*args, cwd=None, env=None, timeout=300):
        return mxrec_ref_command(args, cwd=cwd or REPO, env=_environment(env), timeout=timeout)

    return command


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


# ------------------------------------------------------------ version and help
def test_version_prints_the_package_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"mxrec-ref {mxrec_ref.__version__}"


def _subcommands():
    parser = cli.build_parser()
    (commands,) = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    return commands.choices


@pytest.mark.parametrize("name", ["demo", "train", "bench", "conformance", "run", "rules", "plan"])
def test_every_flag_has_a_help_line_and_shows_its_default(name, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")     # one help entry per line, so each default is on its flag's line
    parser = _subcommands()[name]
    # the help text as one entry per option: its first line and the indented lines that follow
    entries = re.split(r"\n(?=  -)", parser.format_help())
    for action in parser._actions:
        if action.dest in ("help",):
            continue
        assert action.help and action.help.strip(), f"{name} {action.option_strings or action.dest}: no help"
        if action.option_strings and action.nargs != 0 and action.default is not None:
            entry = next(e for e in entries if e.strip().startswith(action.option_strings[0]))
            assert f"(default: {action.default})" in " ".join(entry.split()), entry


def test_train_help_shows_the_steps_default(capsys):
    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    assert f"(default: {train.TrainConfig().steps})" in capsys.readouterr().out


@pytest.mark.parametrize("flag", ["--steps", "--eval-every", "--batch-size"])
@pytest.mark.parametrize("value", ["0", "-3", "x"])
def test_train_rejects_non_positive_counts_in_argparse(flag, value, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["train", flag, value])
    assert exit_.value.code == 2
    assert f"argument {flag}: must be an integer >= 1" in capsys.readouterr().err


def test_train_run_rejects_zero_steps_from_the_api_too():
    with pytest.raises(mxrec_ref.UsageError, match="steps"):
        train.run(train.TrainConfig(steps=0, progress=False), echo=lambda line: None)


# ------------------------------------------------------------ quiet start and logging
def test_train_prints_no_tensorflow_start_up_lines_and_fits_80_columns(tmp_path):
    result = _command("train", *SMALL, env={"COLUMNS": "80", "TMPDIR": str(tmp_path)})
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr == ""                      # no oneDNN / absl / cpu_feature_guard lines
    lines = result.stdout.splitlines()
    assert lines[0].startswith("mxrec-ref train: Wide&Deep")
    table = lines[lines.index(next(line for line in lines if "per-table statistics" in line)):]
    assert all(len(line) <= 80 for line in table if not line.startswith("final:")), table
    assert _scratch(tmp_path) == []                 # the temporary checkpoint folder is gone


def test_verbose_shows_the_library_log(forked, tmp_path):
    result = forked("train", *SMALL, "--verbose", "--storage", "dynamic", "--device-vocabulary-size", "160",
                    env={"TMPDIR": str(tmp_path)})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "mxrec-ref: INFO mxrec_ref.store: table 'deep': capacity grows from 10 to" in result.stderr
    assert "mxrec-ref: INFO mxrec_ref.store: table 'deep': saved" in result.stderr
    # without --verbose the same run prints nothing on stderr: test_train_prints_no_tensorflow_start_up_lines_...


def test_the_statistics_table_fits_an_80_column_terminal(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    stats = {name: {column: 12_345_678_901 for column in mxrec_ref.STAT_NAMES} for name in ("wide", "deep")}
    train._print_stats(stats, print)
    out = capsys.readouterr().out
    assert "12,345,678,901" in out and max(len(line) for line in out.splitlines()) <= 80


# ------------------------------------------------------------ user errors: one line, exit 2
def test_capacity_error_is_one_line_with_exit_2_and_the_cause_on_verbose(forked, tmp_path):
    args = ["train", "--storage", "hbm", "--device-vocabulary-size", "100", *SMALL]
    quiet = forked(*args, env={"TMPDIR": str(tmp_path)})
    assert quiet.returncode == 2
    assert len(_lines(quiet.stderr)) == 1, quiet.stderr[-3000:]
    assert quiet.stderr.startswith("mxrec-ref train: CapacityError: table ")
    assert "device_vocabulary_size" in quiet.stderr and "Traceback" not in quiet.stderr
    verbose = forked(*args, "--verbose", env={"TMPDIR": str(tmp_path)})
    assert verbose.returncode == 2
    assert "Traceback" in verbose.stderr and "mxrec_ref.errors.CapacityError" in verbose.stderr
    assert _lines(verbose.stderr)[-1].startswith("mxrec-ref train: CapacityError: table ")
    assert _scratch(tmp_path) == []                 # scratch folders go on failure too


def test_a_bad_data_path_is_one_line_with_exit_2(tmp_path, capsys):
    assert cli.main(["train", "--data", str(tmp_path / "nowhere"), *SMALL]) == 2
    err = capsys.readouterr().err
    assert _lines(err) == [f"mxrec-ref train: UsageError: train: --data: no file or folder "
                           f"{str(tmp_path / 'nowhere')!r} (--verbose shows the cause)"]


def _without_fast(monkeypatch):
    """The state of a build whose extension failed to compile."""
    def load():
        backends.register_backend("ref", __import__("mxrec_ref.ref", fromlist=["RefStore"]).RefStore)
        monkeypatch.setattr(backends, "_FAST_IMPORT_ERROR", ImportError("No module named 'mxrec_ref._fast'"))

    monkeypatch.setattr(backends, "_BACKENDS", {})
    monkeypatch.setattr(backends, "_load_builtin_backends", load)


def test_con_1_a_missing_fast_backend_says_the_extension_was_not_built(monkeypatch):
    _without_fast(monkeypatch)
    with pytest.raises(ValueError, match=r"the C extension was not built: No module named 'mxrec_ref._fast'"):
        store.open_store(mxrec_ref.TableConfig("t", dim=4), backend="fast")


def test_con_1_a_missing_fast_extension_is_named_by_a_real_import():
    probe = ("import sys; sys.modules['mxrec_ref._fast'] = None\n"      # the import of the extension fails
             "from mxrec_ref import TableConfig, open_store\n"
             "try:\n    open_store(TableConfig('t', dim=4), backend='fast')\n"
             "except ValueError as e:\n    print(e)\n")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO)
    assert "the C extension was not built: " in result.stdout and "_fast" in result.stdout, result.stderr


@pytest.mark.parametrize("command", [["train", *SMALL], ["demo", "--rows", "100"]])
def test_an_unavailable_backend_is_one_line_with_exit_2(command, monkeypatch, capsys):
    _without_fast(monkeypatch)
    assert cli.main([*command, "--backend", "fast"]) == 2
    (line,) = _lines(capsys.readouterr().err)
    assert line.startswith(f"mxrec-ref {command[0]}: UsageError: ") and "C extension was not built" in line


def test_an_unknown_backend_name_is_refused_by_argparse(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["train", "--backend", "gpu"])
    assert exit_.value.code == 2 and "invalid choice: 'gpu'" in capsys.readouterr().err


def test_a_store_error_in_a_run_script_is_one_line_with_exit_2(forked, tmp_path):
    script = tmp_path / "script.py"
    script.write_text("from mxrec_ref import TableConfig\nTableConfig('item', dim=0)\n")
    result = forked("run", str(script), cwd=tmp_path)
    assert result.returncode == 2
    (line,) = _lines(result.stderr)
    assert line.startswith("mxrec-ref run: ConfigError: table 'item': dim")


def test_a_bug_in_a_run_script_keeps_its_traceback(forked, tmp_path):
    script = tmp_path / "script.py"
    script.write_text("raise ValueError('the script is wrong')\n")
    result = forked("run", str(script), cwd=tmp_path)
    assert result.returncode == 1 and "Traceback" in result.stderr and "the script is wrong" in result.stderr


def test_bench_outside_a_source_checkout_is_one_line(monkeypatch, tmp_path, capsys):
    from mxrec_ref import benchmarks

    monkeypatch.setattr(benchmarks, "BENCH", tmp_path / "bench")
    assert cli.main(["bench"]) == 2
    (line,) = _lines(capsys.readouterr().err)
    assert line.startswith("mxrec-ref bench: no bench/ folder at ") and "source checkout" in line


# ------------------------------------------------------------ conformance
def test_conformance_with_an_unimportable_backend_is_one_line(capsys):
    assert cli.main(["conformance", "--backend", "no_such_package.store:factory"]) == 2
    assert _lines(capsys.readouterr().err) == [
        "mxrec-ref conformance: --backend no_such_package.store:factory: cannot import 'no_such_package.store': "
        "ModuleNotFoundError: No module named 'no_such_package'"]


@pytest.mark.parametrize("spec,problem", [("nosuch", "unknown backend 'nosuch'"),
                                          ("mxrec_ref.store:no_factory", "has no callable 'no_factory'"),
                                          ("mxrec_ref.store", "unknown backend 'mxrec_ref.store'"),
                                          (":factory", "expected module:factory")])
def test_conformance_names_an_unusable_backend(spec, problem):
    from mxrec_ref.conformance import run

    assert problem in run.backend_problem(spec)
    assert run.backend_problem("ref") is None and run.backend_problem("mxrec_ref.conformance.examples:"
                                                                      "EarlyAdmissionStore") is None


def test_conformance_writes_nothing_into_the_current_folder(tmp_path):
    result = _command("conformance", "--backend", "ref", "--rules", "ADM-1,ADM-2", cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "ADM-1      pass" in result.stdout
    assert list(tmp_path.iterdir()) == []          # no .hypothesis/, .benchmarks/, .pytest_cache/


# ------------------------------------------------------------ scratch folders and the input pipeline
@pytest.fixture
def temporary_root(tmp_path, monkeypatch):
    import tempfile

    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


def _scratch(root: Path) -> list[str]:
    """mxrec-ref's folders under the temporary root (TF's autograph leaves its own files there)."""
    return sorted(p.name for p in root.iterdir() if p.name.startswith("mxrec-"))


def test_scratch_folders_exist_only_for_the_chosen_mode_and_go_at_the_end(temporary_root, tmp_path):
    during = []
    config = train.TrainConfig(rows=3000, steps=2, eval_every=2, batch_size=128, progress=False, storage="ssd",
                               device_vocabulary_size=2000)
    train.run(config, echo=lambda line: during.append(_scratch(temporary_root)))
    assert [name.rsplit("-", 1)[0] for name in during[0]] == ["mxrec-ssd", "mxrec-train"]
    assert _scratch(temporary_root) == []
    during.clear()
    named = tmp_path / "checkpoints"
    result = train.run(train.TrainConfig(rows=3000, steps=2, eval_every=2, batch_size=128, progress=False,
                                         storage="dynamic", checkpoint_dir=str(named)),
                       echo=lambda line: during.append(_scratch(temporary_root)))
    assert during[0] == []                          # no SSD folder for a dynamic table, no temporary checkpoints
    assert result["checkpoint_dir"] == str(named) and any(p.name.startswith("model.ckpt-") for p in named.iterdir())


def test_the_training_data_is_not_embedded_in_the_graph():
    import tensorflow as tf

    import mxrec_ref.tf as mx

    def graph_bytes(rows: int) -> int:
        if mx.is_initialized():
            mx.terminate_config_initializer()
        mx.init(backend="ref", use_dynamic_expansion=True)
        try:
            with tf.Graph().as_default() as graph:
                train.build_training_graph(tf, mx, train.TrainConfig(backend="ref"),
                                           datasets.synthetic_criteo(rows, seed=0))
                return graph.as_graph_def().ByteSize()
        finally:
            mx.terminate_config_initializer()

    small, large = graph_bytes(1_000), graph_bytes(20_000)
    assert large - small < 1_000, (small, large)     # 19,000 more rows would add ~4 MB as constants


def test_batches_wrap_like_repeat_then_batch():
    data = datasets.synthetic_criteo(10, seed=0)
    got = [b["label"] for _, b in zip(range(4), train.batches(data, 4, repeat=True))]
    expected = [data.labels[[(i + j) % 10 for j in range(4)]] for i in (0, 4, 8, 2)]
    assert all((g == e).all() for g, e in zip(got, expected))
    once = list(train.batches(data, 4, repeat=False))
    assert [len(b["label"]) for b in once] == [4, 4, 2]


# ------------------------------------------------------------ explicit arguments beat the environment
def test_an_explicit_init_backend_beats_mxrec_ref_backend(monkeypatch, fast_backend):
    import mxrec_ref.tf as mx

    monkeypatch.setenv("MXREC_REF_BACKEND", "ref")
    for kwargs, expected in (({"backend": "fast"}, "fast"), ({}, "ref")):
        if mx.is_initialized():
            mx.terminate_config_initializer()
        try:
            assert mx.init(**kwargs).backend == expected
        finally:
            mx.terminate_config_initializer()


def test_every_environment_variable_the_package_reads_is_in_the_readme_table():
    import re

    read = set()
    for path in (REPO / "mxrec_ref").rglob("*.py"):
        text = path.read_text()
        read |= set(re.findall(r"environ(?:\.get)?[\(\[]\s*[\"']([A-Z_][A-Z0-9_]+)[\"']", text))
        read |= set(re.findall(r"^[A-Z_]+_ENV = [\"']([A-Z_][A-Z0-9_]+)[\"']", text, re.M))   # read through a constant
    read |= {"HOT_EMB_UPDATE_STEP", "MXREC_REF_BACKEND"}       # read through constants
    readme = (REPO / "README.md").read_text()
    table = readme.split("### Environment variables", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `([A-Z_][A-Z0-9_]+)` \|", table, re.M))
    assert read - {"PYTHONHASHSEED"} <= listed, read - listed


def test_the_bench_table_fits_the_terminal(capsys):
    from mxrec_ref import benchmarks

    name = "hot train lookup, Zipf 1.05, scattered rows: hot_rows=0 / default | hot_rows=0"
    result = {"ratios": {name: {"ratio": 1.1, "runs": [1.0, 1.1, 1.3], "fast_ms": 2.0, "other_ms": 2.2},
                         "insert: ref / fast | reference": {"ratio": 17.0, "runs": [17.0], "fast_ms": 4.0,
                                                            "other_ms": 68.0}}}
    benchmarks.print_result(result, width=80)
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80
    assert name in out and "1.10" in out and "3 (1.00-1.30)" in out
    benchmarks.print_result(result, width=200)
    wide = capsys.readouterr().out.splitlines()
    assert len(wide) == 3 and wide[1].startswith("hot train lookup") and "1.10" in wide[1]
