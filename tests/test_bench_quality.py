"""Quality tracked like speed (issue 34 item 3) and a load-aware `bench --compare` (issue 33 item 7):
quality entries regress beyond their noise band, a deliberately broken optimizer is caught as a quality
regression, and a run whose load exceeded the cores is recorded as such and judged by nobody."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from mxrec_ref import backends, benchmarks, cli


def _run(load=0.5, cores=2, quality=None, **ratios):
    return {"profile": "quick", "machine": "Test CPU (2 CPUs)", "cores": cores, "load_average": load,
            "datetime": "2026-12-07T13:00:00",
            "ratios": {name: {"ratio": value, "better": "higher", "fast_ms": 1.0, "other_ms": value}
                       for name, value in ratios.items()},
            "quality": quality or {}}


def _compare(tmp_path, run, baseline):
    (tmp_path / "run.json").write_text(json.dumps(run))
    (tmp_path / "baseline.json").write_text(json.dumps(baseline))
    return cli.main(["bench", "--from-json", str(tmp_path / "run.json"), "--compare",
                     "--baseline", str(tmp_path / "baseline.json")])


# ------------------------------------------------------------------ quality entries
def test_an_auc_drop_within_the_noise_band_passes_and_beyond_it_regresses():
    baseline = {"auc": {"value": 0.750, "band": 0.004}}
    assert benchmarks.compare_quality({"auc": {"value": 0.747, "band": 0.004}}, baseline) == []
    assert benchmarks.compare_quality({"auc": {"value": 0.760, "band": 0.004}}, baseline) == []
    problems = benchmarks.compare_quality({"auc": {"value": 0.740, "band": 0.004}}, baseline)
    assert problems == ["auc: 0.7400 vs baseline 0.7500 (a drop of 0.0100, beyond the noise band 0.0040): "
                        "a quality regression"]


def test_a_quality_entry_missing_or_without_baseline_is_a_problem():
    assert benchmarks.compare_quality({}, {"auc": {"value": 0.7, "band": 0.01}}) == ["auc: missing from this run"]
    assert benchmarks.compare_quality({"new": {"value": 0.7, "band": 0.01}}, {}) == [
        "new: no baseline (regenerate bench/baseline.json; bench/README.md)"]


def test_compare_exits_1_on_a_quality_regression(tmp_path, capsys):
    baseline = _run(insert=2.0, quality={"quality x hbm: dynamic AUC": {"value": 0.75, "band": 0.003}})
    run = _run(insert=2.0, quality={"quality x hbm: dynamic AUC": {"value": 0.70, "band": 0.003}})
    assert _compare(tmp_path, run, baseline) == 1
    out = capsys.readouterr().out
    assert "REGRESSION quality x hbm: dynamic AUC: 0.7000 vs baseline 0.7500" in out
    assert "1 of 1 ratios within 30% of the baseline; 1 problems" in out


def test_quality_entries_are_read_from_the_benchmark_report_and_their_median_kept():
    report = {"benchmarks": [{"stats": {"min": 1.0}, "extra_info": {"quality": {"a": {"value": 0.7, "band": 0.01}}}},
                             {"stats": {"min": 1.0}, "extra_info": {"ratio_group": "g", "role": "candidate"}}]}
    assert benchmarks.quality(report) == {"a": {"value": 0.7, "band": 0.01}}
    runs = [_run(quality={"a": {"value": v, "band": b}}, load=load) for v, b, load in
            [(0.70, 0.01, 0.5), (0.60, 0.02, 4.0), (0.72, 0.01, 1.0)]]
    combined = benchmarks.median_of_runs(runs)
    assert combined["quality"]["a"] == {"value": 0.70, "band": 0.02, "runs": [0.70, 0.60, 0.72]}
    assert combined["load_average"] == 4.0 and combined["cores"] == 2


# ------------------------------------------------------------------ the load (issue 33 item 7)
def test_a_run_records_its_load_average_and_machine(monkeypatch):
    """run_suites reads the load before and after the suites (injected here) and keeps the larger."""
    loads = iter([0.7, 3.5])
    monkeypatch.setattr(benchmarks, "load_average", lambda: next(loads))

    def fake_pytest(command, **kwargs):
        raw = next(arg.split("=", 1)[1] for arg in command if arg.startswith("--benchmark-json="))
        Path(raw).write_text(json.dumps({"machine_info": {"cpu": {"brand_raw": "Test CPU", "count": 2}},
                                         "datetime": "2026-12-07", "benchmarks": []}))
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(benchmarks.subprocess, "run", fake_pytest)
    result = benchmarks.run_suites(full=False)
    assert (result["load_average"], result["cores"], result["machine"]) == (3.5, 2, "Test CPU (2 CPUs)")
    entry = benchmarks.history_entry(result, "c" * 40, False)
    assert entry["load_average"] == 3.5 and entry["cores"] == 2 and entry["machine"] == "Test CPU (2 CPUs)"


def test_no_regression_is_called_when_the_load_exceeded_the_cores(tmp_path, capsys):
    baseline = _run(insert=20.0)
    assert _compare(tmp_path, _run(insert=5.0, load=5.0, cores=2), baseline) == 3
    out = capsys.readouterr().out
    assert "REGRESSION" not in out and "NOT JUDGED insert: 5.00 vs baseline 20.00" in out
    assert "load average 5.0 over the machine's 2 cores during the run" in out and "no regression is called" in out
    # the same run on a quiet machine is a regression; a loaded run without problems passes
    assert _compare(tmp_path, _run(insert=5.0, load=1.9, cores=2), baseline) == 1
    assert "REGRESSION insert: 5.00" in capsys.readouterr().out
    assert _compare(tmp_path, _run(insert=20.0, load=5.0, cores=2), baseline) == 0


# ------------------------------------------------------------------ a mutant caught (issue 34 item 3)
def _quality_module():
    path = Path(benchmarks.REPO) / "bench" / "quality.py"
    spec = importlib.util.spec_from_file_location("bench_quality", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module           # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_compare_catches_a_broken_optimizer_as_a_quality_regression(tmp_path, capsys):
    """The parity harness on tiny data: the reference backend's entries are the baseline; a store whose
    optimizer climbs the loss (conformance.broken_stores.AscendingGradientStore) passes every apply call
    but its AUC falls beyond the noise band, and --compare says so."""
    pytest.importorskip("tensorflow")
    from mxrec_ref.conformance.broken_stores import AscendingGradientStore

    quality = _quality_module()
    profile = quality.Profile(synthetic_rows=0, seeds=(0,), parity_modes=("hbm",), curve_data=(),
                              curve_evictions=())
    backends.register_backend("ascending-gradient", AscendingGradientStore)
    try:
        entries = {}
        for backend in ("ref", "ascending-gradient"):
            rows = quality.parity(profile, ("tiny",), backend=backend, echo=lambda line: None)
            entries[backend] = quality.quality_entries(quality.summarize(rows, []))
    finally:
        backends._BACKENDS.pop("ascending-gradient", None)
    assert set(entries["ref"]) == {"quality tiny hbm: dynamic AUC", "quality tiny hbm: AUC dynamic - static"}
    # the correct backend matches the static model; the mutant does not
    assert abs(entries["ref"]["quality tiny hbm: AUC dynamic - static"]["value"]) <= 0.002
    assert _compare(tmp_path, _run(quality=entries["ref"]), _run(quality=entries["ref"])) == 0
    capsys.readouterr()
    assert _compare(tmp_path, _run(quality=entries["ascending-gradient"]), _run(quality=entries["ref"])) == 1
    out = capsys.readouterr().out
    assert "REGRESSION quality tiny hbm: dynamic AUC" in out and "a quality regression" in out
    assert "REGRESSION quality tiny hbm: AUC dynamic - static" in out


def test_the_committed_baseline_tracks_parity_and_the_curve():
    """bench/baseline.json's quality entries (bench/quality.py's quick profile): each data set's dynamic AUC and
    parity gap, and every curve point, each with a band of at least 0.002."""
    entries = json.loads(benchmarks.BASELINE.read_text())["quality"]
    for data in ("movielens", "synthetic"):
        assert {f"quality {data} hbm: dynamic AUC", f"quality {data} hbm: AUC dynamic - static"} <= set(entries)
        assert sum(name.startswith(f"quality {data} curve:") for name in entries) == 12
    assert all(entry["band"] >= 0.002 and 0 < entry["value"] < 1 or "static" in name
               for name, entry in entries.items())


def test_the_training_graph_clocks_its_tables_by_data_time_or_by_steps():
    """train.build_training_graph(data_time=False), the curve's step-clock eviction: no timestamp FeatureSpec,
    so the tables' clock counts steps (EVI-1); by default the batches' timestamps drive it."""
    tf = pytest.importorskip("tensorflow")
    import mxrec_ref.tf as mx
    from mxrec_ref import data, train

    dataset = data.synthetic_criteo(512, scale=1 / 4000)
    config = train.TrainConfig(backend="ref", storage="hbm", steps=1, batch_size=64, dim=4, progress=False)
    timestamped = []
    for data_time in (True, False):
        if mx.is_initialized():
            mx.terminate_config_initializer()
        mx.init(backend="ref", use_dynamic_expansion=False)
        try:
            with tf.Graph().as_default():
                graph = train.build_training_graph(tf, mx, config, dataset, data_time=data_time)
                timestamped.append([spec.index_key for spec in graph.all_specs if spec.is_timestamp])
        finally:
            mx.terminate_config_initializer()
    assert timestamped == [["timestamp"], []]
