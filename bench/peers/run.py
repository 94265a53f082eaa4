"""`make bench-peers`: TFRA vs mxrec-ref, each in its own environment, run as interleaved
processes (TFRA, mxrec-ref, ..., the order alternating by round) so machine drift hits both.

Two workloads:
* ``store``: lookup + update of one 65,536-key Zipf batch on a 500k-key table (workload.py;
  worker_tfra.py, worker_mxrec.py); each side's per-round minimum step, median over rounds.
* ``criteo26``: issue 16's 26-table model trained from empty tables (bench/criteo26.py): TFRA's
  TF2 ``tf.function`` path (worker_criteo26_tfra.py) vs mxrec-ref's TF1 graph with FeatureSpec
  (worker_criteo26_tf1.py mxrec), and the same model on static tf.Variable tables
  (worker_criteo26_tf1.py static, in mxrec-ref's environment) as the floor; mxrec-ref twice, with the
  key pipeline on and off (``MXREC_KEY_PIPELINE`` 1 / 0 in the process's environment, spec/pipeline.md
  PIPE-7: always set, so the result does not depend on the machine's cores). Examples/s over the
  60 timed steps of each process; ratios per round, then their median and range.

Usage: python bench/peers/run.py PEER_PYTHON MXREC_PYTHON [ROUNDS] [--only store|criteo26]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent
sys.path.insert(0, str(BENCH))
import criteo26  # noqa: E402


PIPELINE = "MXREC_KEY_PIPELINE"


def worker(python: str, script: str, *args: str, env: dict | None = None) -> dict:
    env = {"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin", **(env or {})}
    if "PYTHONPATH" in os.environ:       # a checkout run without installing it (mxrec-ref's side)
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    out = subprocess.run([python, str(HERE / script), *args], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"bench-peers: {script} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def store_workload(peer_python: str, mxrec_python: str, rounds: int) -> dict:
    tfra, mxrec = [], []
    for _ in range(rounds):
        tfra.append(worker(peer_python, "worker_tfra.py", str(HERE)))
        mxrec.append(worker(mxrec_python, "worker_mxrec.py", str(HERE)))
    t = statistics.median(r["min_step_s"] for r in tfra)
    m = statistics.median(r["min_step_s"] for r in mxrec)
    return {"tfra_tf_version": tfra[0]["tf"], "tfra_min_step_ms": t * 1e3, "mxrec_min_step_ms": m * 1e3,
            "ratio_tfra_over_mxrec": t / m, "rounds": rounds}


def criteo26_workload(peer_python: str, mxrec_python: str, rounds: int) -> dict:
    off = "mxrec-ref, pipeline off"
    runs = {"tfra": [], "mxrec-ref": [], off: [], "static": []}
    traces = []                  # TFRA: times its step function was traced (1 = no retracing)
    commands = {"tfra": (peer_python, "worker_criteo26_tfra.py"), "mxrec-ref": (mxrec_python, "worker_criteo26_tf1.py"),
                off: (mxrec_python, "worker_criteo26_tf1.py"), "static": (mxrec_python, "worker_criteo26_tf1.py")}
    environments = {"mxrec-ref": {PIPELINE: "1"}, off: {PIPELINE: "0"}}
    with tempfile.TemporaryDirectory(prefix="mxrec-peers-") as scratch:
        stream_path = Path(scratch) / "stream.npz"
        stream = criteo26.make_stream(criteo26.WARM_STEPS + criteo26.TIMED_STEPS)
        criteo26.save_stream(stream, stream_path)
        order = list(runs)
        for k in range(rounds):
            for system in order if k % 2 == 0 else order[::-1]:
                python, script = commands[system]
                extra = {"mxrec-ref": ["mxrec"], off: ["mxrec"], "static": ["static"]}.get(system, [])
                result = worker(python, script, str(BENCH), str(stream_path), *extra, env=environments.get(system))
                if result["keys"] != int(stream["sizes"].sum()):
                    raise RuntimeError(f"bench-peers: {system} holds {result['keys']} keys, the stream has "
                                       f"{int(stream['sizes'].sum())}")
                runs[system].append(result["examples_per_s"])
                traces.extend([result["traces"]] if "traces" in result else [])
                print(f"round {k + 1}: {system} {result['examples_per_s']:,.0f} examples/s", file=sys.stderr)

    def ratio(a: str, b: str) -> dict:
        per_round = [x / y for x, y in zip(runs[a], runs[b])]
        return {"median": statistics.median(per_round), "min": min(per_round), "max": max(per_round)}

    return {"examples_per_s_median": {s: statistics.median(v) for s, v in runs.items()},
            "examples_per_s": runs, "mxrec_over_tfra": ratio("mxrec-ref", "tfra"),
            "mxrec_over_static": ratio("mxrec-ref", "static"), "tfra_over_static": ratio("tfra", "static"),
            "mxrec_pipeline_off_over_tfra": ratio(off, "tfra"), "mxrec_pipeline_off_over_static": ratio(off, "static"),
            "mxrec_pipeline_on_over_off": ratio("mxrec-ref", off),
            "tfra_traces": traces, "keys": int(stream["sizes"].sum()), "batch": criteo26.BATCH, "timed_steps": criteo26.TIMED_STEPS,
            "rounds": rounds}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench/peers/run.py")
    parser.add_argument("peer_python")
    parser.add_argument("mxrec_python")
    parser.add_argument("rounds", nargs="?", type=int, default=3)
    parser.add_argument("--only", choices=["store", "criteo26"])
    args = parser.parse_args(argv)
    report = {}
    if args.only in (None, "store"):
        report["store"] = store_workload(args.peer_python, args.mxrec_python, args.rounds)
    if args.only in (None, "criteo26"):
        report["criteo26"] = criteo26_workload(args.peer_python, args.mxrec_python, args.rounds)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
