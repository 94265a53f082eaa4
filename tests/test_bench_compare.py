"""`mxrec-ref bench` logic on synthetic ratios, no benchmark run and no timing: --compare (issue 8),
--repeat, --record, --trend (issue 19)."""
import json

import pytest

from mxrec_ref import benchmarks, cli


def _result(**ratios):
    return {"ratios": {name: {"ratio": value, "better": "lower" if name.startswith("memory") else "higher"}
                       for name, value in ratios.items()}}


def test_regression_beyond_the_margin_is_reported():
    baseline = _result(insert=20.0, memory=1.3)
    assert benchmarks.compare(_result(insert=15.0, memory=1.3), baseline, 0.30) == []
    problems = benchmarks.compare(_result(insert=13.0, memory=1.3), baseline, 0.30)
    assert len(problems) == 1 and problems[0].startswith("insert: 13.00 vs baseline 20.00")


def test_lower_is_better_ratios_regress_upwards():
    baseline = _result(memory=1.3)
    assert benchmarks.compare(_result(memory=1.0), baseline, 0.30) == []
    assert benchmarks.compare(_result(memory=1.8), baseline, 0.30) != []


def test_missing_ratio_is_a_regression():
    assert benchmarks.compare(_result(), _result(insert=2.0), 0.3) == ["insert: missing from this run"]


def test_committed_baseline_has_every_ratio_group():
    baseline = json.loads(benchmarks.BASELINE.read_text())
    groups = {name.split(" | ")[0] for name in baseline["ratios"]}
    assert {"insert: ref / fast", "lookup-with-insert: TF / fast", "lookup+gather: fast / numpy.take",
            "training: dynamic / static examples per second", "memory: bytes per key / (8 + 4*dim)"} <= groups


# ------------------------------------------------- repeats, history, trend (issue 19 item 5)
def _run(date="2026-12-04T10:00:00", **ratios):
    """A run as `mxrec-ref bench --output` writes it."""
    return {"profile": "quick", "machine": "Test CPU (2 CPUs)", "datetime": date,
            "ratios": {name: {"ratio": value, "better": "lower" if name.startswith("memory") else "higher",
                              "fast_ms": 1.0, "other_ms": value} for name, value in ratios.items()}}


def _files(tmp_path, *runs):
    paths = []
    for i, run in enumerate(runs):
        paths.append(tmp_path / f"run{i}.json")
        paths[-1].write_text(json.dumps(run))
    return [str(p) for p in paths]


def test_one_noisy_run_neither_passes_nor_fails_a_change():
    baseline = _result(insert=20.0)
    noisy_low = [_run(insert=19.0), _run(insert=9.0), _run(insert=21.0)]      # one run under load
    assert benchmarks.compare(noisy_low[1], baseline, 0.30) != []
    assert benchmarks.compare(benchmarks.median_of_runs(noisy_low), baseline, 0.30) == []
    lucky = [_run(insert=12.0), _run(insert=25.0), _run(insert=11.0)]         # a real regression, one lucky run
    assert benchmarks.compare(lucky[1], baseline, 0.30) == []
    assert benchmarks.compare(benchmarks.median_of_runs(lucky), baseline, 0.30) != []


def test_median_of_runs_keeps_every_value_and_ratios_some_runs_lack():
    combined = benchmarks.median_of_runs([_run(a=1.0, b=4.0), _run(a=3.0), _run(a=2.0, b=6.0), _run(a=9.0)])
    assert combined["repeat"] == 4
    assert combined["ratios"]["a"]["ratio"] == 2.5 and combined["ratios"]["a"]["runs"] == [1.0, 3.0, 2.0, 9.0]
    assert combined["ratios"]["b"]["ratio"] == 5.0 and combined["ratios"]["b"]["runs"] == [4.0, 6.0]
    assert combined["ratios"]["b"]["other_ms"] == 5.0


def test_a_ratio_without_baseline_is_reported():
    assert benchmarks.compare(_result(insert=2.0, hot=1.0), _result(insert=2.0), 0.3) == [
        "hot: no baseline (regenerate bench/baseline.json; bench/README.md)"]


def test_repeat_runs_the_suites_n_times_and_compares_the_medians(tmp_path, monkeypatch, capsys):
    values = iter([20.0, 5.0, 19.0])                   # the middle run was disturbed
    calls = []

    def one_run(full):
        calls.append(full)
        return _run(insert=next(values))

    monkeypatch.setattr(benchmarks, "run_suites", one_run)
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps(_run(insert=20.0)))
    output = tmp_path / "ratios.json"
    code = cli.main(["bench", "--repeat", "3", "--compare", "--baseline", str(baseline), "--output", str(output)])
    assert (code, calls) == (0, [False, False, False])
    written = json.loads(output.read_text())
    assert written["repeat"] == 3 and written["ratios"]["insert"]["ratio"] == 19.0
    assert written["ratios"]["insert"]["runs"] == [20.0, 5.0, 19.0]
    assert "3 (5.00-20.00)" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["--repeat", "0"], ["--repeat", "x"]])
def test_repeat_must_be_a_positive_integer(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["bench", *argv])
    assert exit_.value.code == 2 and "--repeat: must be a positive integer" in capsys.readouterr().err


def test_repeat_and_from_json_exclude_each_other(tmp_path, capsys):
    assert cli.main(["bench", "--repeat", "2", "--from-json", *_files(tmp_path, _run(a=1.0))]) == 2
    assert capsys.readouterr().err.strip() == ("mxrec-ref bench: --repeat: the runs come from --from-json; "
                                               "give one or the other")


def test_record_appends_commit_machine_date_and_median_ratios(tmp_path):
    history = tmp_path / "history.jsonl"
    runs = _files(tmp_path, _run(insert=10.0, memory=1.4), _run(insert=14.0, memory=1.2),
                  _run(insert=12.0, memory=1.3))
    assert cli.main(["bench", "--from-json", *runs, "--record", "--history", str(history)]) == 0
    assert cli.main(["bench", "--from-json", runs[0], "--record", "--history", str(history)]) == 0
    first, second = [json.loads(line) for line in history.read_text().splitlines()]
    commit, dirty = benchmarks.current_commit()
    assert first == {"commit": commit, "dirty": dirty, "date": "2026-12-04T10:00:00",
                     "machine": "Test CPU (2 CPUs)", "profile": "quick", "repeat": 3,
                     "ratios": {"insert": 12.0, "memory": 1.3}}
    assert len(commit) == 40 and second["repeat"] == 1 and second["ratios"] == {"insert": 10.0, "memory": 1.4}
    assert not (tmp_path / "bench-ratios.json").exists()


def test_history_lines_that_are_not_runs_are_named(tmp_path):
    history = tmp_path / "history.jsonl"
    history.write_text('{"ratios": {"a": 1}}\n\n{"commit": "x"}\n')
    with pytest.raises(ValueError, match="line 3 has no 'ratios'"):
        benchmarks.read_history(history)
    history.write_text('{"ratios": {"a": 1}}\n{oops\n')
    with pytest.raises(ValueError, match="line 2 is not JSON"):
        benchmarks.read_history(history)


def test_trend_series_follow_history_order_with_gaps():
    history = [{"commit": "a", "ratios": {"x": 1.0}}, {"commit": "b", "ratios": {"x": 2.0, "y": 5.0}},
               {"commit": "c", "ratios": {"y": 4.0}}]
    assert benchmarks.trend_series(history) == {"x": [(0, 1.0), (1, 2.0)], "y": [(1, 5.0), (2, 4.0)]}
    assert benchmarks.run_label({"commit": "0123456789abc", "dirty": True, "date": "2026-12-04T10:00"}) == \
        "0123456*\n2026-12-04"


def test_trend_draws_every_recorded_ratio_into_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    history = tmp_path / "history.jsonl"
    for i, insert in enumerate([10.0, 12.0, 11.0]):
        benchmarks.append_history(history, {"commit": f"{i:040d}", "dirty": False, "date": f"2026-12-0{i + 1}",
                                            "machine": "Test CPU", "ratios": {"insert": insert, "memory": 1.3}})
    output = tmp_path / "trend.png"
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps(_run(insert=11.0)))
    assert cli.main(["bench", "--trend", "--history", str(history), "--baseline", str(baseline),
                     "--output", str(output)]) == 0
    assert output.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_trend_without_history_is_one_line(tmp_path, capsys):
    assert cli.main(["bench", "--trend", "--history", str(tmp_path / "none.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--trend: no history at" in err


def test_committed_history_lines_are_runs():
    for entry in benchmarks.read_history(benchmarks.HISTORY):
        assert {"commit", "dirty", "date", "machine", "profile", "repeat", "ratios"} <= set(entry)
        assert entry["ratios"] and all(isinstance(v, float) for v in entry["ratios"].values())


# Every ratio the suites measure: bench/test_store_bench.py, test_train_bench.py, test_checkpoint_bench.py
# (8), test_tier_bench.py (4) and test_hot_bench.py (8); all 20 in the baseline of 2026-12-04; issue 16 adds
# 6 checkpoint ratios (test_checkpoint_bench.py: 8 in all) and the 26-table model (test_criteo26_bench.py).
EVERY_RATIO = {
    "insert: ref / fast | reference",
    "lookup-with-insert: TF / fast | DenseHashTable",
    "lookup-with-insert: TF / fast | MutableHashTable",
    "lookup+gather: fast / numpy.take | numpy.take",
    "memory: bytes per key / (8 + 4*dim) | 8 + 4*dim",
    "training: dynamic / static examples per second | tf.Variable + embedding_lookup",
    "training, 26-table model: dynamic / static examples per second | tf.Variable + embedding_lookup",
    "checkpoint save: fast / file copy | shutil.copytree",
    "checkpoint load: fast / file copy | shutil.copytree",
    # issue 16: the durable copy (copytree + fsync of every file) and the 100k-key table
    *(f"checkpoint {kind}{size}: fast / file copy | shutil.copytree{durable}"
      for kind in ("save", "load") for size in ("", " 100k") for durable in ("", " + fsync")
      if (size, durable) != ("", "")),
    "tiers: mode / HBM, same sequence | DDR",
    "tiers: mode / HBM, same sequence | SSD",
    "SSD write: disk tier / sequential file write | sequential file write",
    "SSD read: disk tier / sequential file read | sequential file read",
    *(f"hot {kind}, Zipf {exponent}, {layout} rows: hot_rows=0 / default | hot_rows=0"
      for kind in ("lookup+gather", "train lookup") for exponent in (1.05, 1.2) for layout in ("scattered", "rank")),
    # issue 17: sharded tables on virtual ranks (test_shard_bench.py)
    "sharded step, 2 virtual ranks / local step on the global batch | sharded",
    "all-to-alls of a step / sharded step, 2 virtual ranks | alltoall",
    *(f"hot replicas, {kind}, Zipf 1.05, 2 virtual ranks: off / on | off"
      for kind in ("training step", "evaluation lookup")),
    # issue 16: a tier step by table size (quick profile: 10k and 100k keys; test_tier_step_by_table_size)
    *(f"tier step, {size} keys: mode / HBM | {mode}" for size in ("10,000", "100,000")
      for mode in ("DDR", "SSD cold", "SSD hot")),
    *(f"tier step flatness, {mode}: largest / smallest table | 100,000 keys"
      for mode in ("HBM", "DDR", "SSD cold", "SSD hot")),
    # issue 33 item 5: a serving delta against the full export and the full load (bench/test_serving_bench.py)
    "serving delta write (1% of 10^6 rows) / full updatable export | full updatable export",
    "serving delta apply (1% of 10^6 rows) / full load | tf.saved_model.load",
    # issue 32: the key pipeline on and off, in the 26-table TF model and in its store loop (test_pipeline_bench.py)
    "training, 26-table model: key pipeline on / off examples per second | pipeline off (MXREC_KEY_PIPELINE=0)",
    *(f"key pipeline, 26-table store loop, tables {size}: pipelined / serial examples per second | {versus}"
      for size in ("empty", "1e5") for versus in ("serial", "pipelined, worker=False")),
    # issue 32: the 26-table store loop in DDR and SSD mode vs HBM mode, pipeline on and off (test_tier_pipeline_bench.py)
    *(f"tiers, 26-table store loop, pipeline {on}: {mode} / HBM examples per second | HBM"
      for on in ("on", "off") for mode in ("DDR", "SSD")),
    *(f"tiers, 26-table store loop, {mode}: pipelined / serial examples per second | serial"
      for mode in ("HBM", "DDR", "SSD")),
    # issue 32's targets: Wide&Deep with the pipeline on / off (test_train_bench.py), both models' pipeline-off
    # graph / static
    "training, Wide&Deep: key pipeline on / off examples per second | pipeline off (MXREC_KEY_PIPELINE=0)",
    *(f"training, {model}, key pipeline off: dynamic / static examples per second | tf.Variable + embedding_lookup"
      for model in ("Wide&Deep", "26-table model")),
}


def test_committed_baseline_has_every_ratio():
    assert len(EVERY_RATIO) == 58
    assert set(json.loads(benchmarks.BASELINE.read_text())["ratios"]) == EVERY_RATIO


def test_compare_against_the_committed_baseline_checks_every_ratio(capsys, tmp_path):
    """The committed baseline compared with itself: every ratio checked, no "no baseline"."""
    run = tmp_path / "run.json"
    run.write_text(benchmarks.BASELINE.read_text())
    assert cli.main(["bench", "--from-json", str(run), "--compare"]) == 0
    out = capsys.readouterr().out
    assert f"{len(EVERY_RATIO)} of {len(EVERY_RATIO)} ratios within 30% of the baseline; 0 problems" in out


def test_one_timing_counts_in_every_group_its_also_names():
    """A tier step is in its size's mode / HBM group and in its mode's flatness group."""
    report = {"benchmarks": [
        {"stats": {"min": 0.002}, "extra_info": {"ratio_group": "step 10k", "role": "candidate", "better": "lower"}},
        {"stats": {"min": 0.003}, "extra_info": {"ratio_group": "step 10k", "role": "DDR", "better": "lower",
                                                 "also": [["flatness DDR", "candidate"]]}},
        {"stats": {"min": 0.009}, "extra_info": {"ratio_group": "step 100k", "role": "DDR", "better": "lower",
                                                 "also": [["flatness DDR", "100k"]]}}]}
    rows = {(row["group"], row["versus"]): row["ratio"] for row in benchmarks.ratios(report)}
    assert rows == pytest.approx({("step 10k", "DDR"): 1.5, ("flatness DDR", "100k"): 3.0})


def test_ratio_reduction_lives_in_the_package_and_bench_ratios_prints_it(capsys, tmp_path):
    """mxrec_ref.benchmarks reduces a pytest-benchmark run to ratios (it imported bench/ratios.py
    through sys.path); bench/ratios.py, which `make bench` runs, imports that function."""
    import importlib.util
    from pathlib import Path

    report = {"machine_info": {"cpu": {"brand_raw": "cpu"}}, "datetime": "2026-12-04", "benchmarks": [
        {"stats": {"min": 0.002}, "extra_info": {"ratio_group": "lookup", "role": "candidate"}},
        {"stats": {"min": 0.010}, "extra_info": {"ratio_group": "lookup", "role": "ref"}},
        {"stats": {"min": 0.004}, "extra_info": {"ratio_group": "ddr", "role": "candidate", "better": "lower"}},
        {"stats": {"min": 0.002}, "extra_info": {"ratio_group": "ddr", "role": "hbm", "bytes_per_key": 144}},
        {"stats": {"min": 1.0}, "extra_info": {}}]}
    rows = {(row["group"], row["versus"]): row for row in benchmarks.ratios(report)}
    assert rows[("lookup", "ref")]["ratio"] == 5.0 and rows[("lookup", "ref")]["better"] == "higher"
    assert rows[("ddr", "hbm")]["ratio"] == 0.5 and rows[("ddr", "hbm")]["better"] == "lower"
    assert rows[("memory: bytes per key / (8 + 4*dim)", "8 + 4*dim")]["ratio"] == 144 / 72
    assert len(rows) == 3
    script = Path(benchmarks.REPO) / "bench" / "ratios.py"
    spec = importlib.util.spec_from_file_location("bench_ratios_script", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.ratios is benchmarks.ratios
    path = tmp_path / "latest.json"
    path.write_text(json.dumps(report))
    assert module.main([str(path)]) == 0
    assert "| lookup | ref | 5.00 | 2.00 | 10.00 |" in capsys.readouterr().out
