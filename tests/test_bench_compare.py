"""`mxrec-ref bench --compare` logic (issue 8), on synthetic ratios: no timing here."""
from mxrec_ref import benchmarks


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
    import json

    baseline = json.loads(benchmarks.BASELINE.read_text())
    groups = {name.split(" | ")[0] for name in baseline["ratios"]}
    assert {"insert: ref / fast", "lookup-with-insert: TF / fast", "lookup+gather: fast / numpy.take",
            "training: dynamic / static examples per second", "memory: bytes per key / (8 + 4*dim)"} <= groups
