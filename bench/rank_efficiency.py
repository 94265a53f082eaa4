"""Per-rank efficiency at 2 ranks (issue 32's target: >= 0.9), with the key pipeline on and off:

    PYTHONPATH=$PWD .venv/bin/python bench/rank_efficiency.py [--repeats 3] [--steps 600] [--profile]

The Wide&Deep job (`mxrec-ref train`, synthetic data, its defaults; batch 512 per rank) as separate
processes, in rounds whose order rotates so drift on a shared machine hits every variant alike:

* ``1 rank``:  ``taskset -c 0 python -m mxrec_ref train ...`` (one rank pinned to one core);
* ``2 ranks``: ``mpirun --bind-to core -np 2 python -m mxrec_ref train ...`` (each rank pinned to its own
  core, the same per-rank batch);

each with ``MXREC_KEY_PIPELINE`` 1 and 0.  Efficiency = a rank's examples/s at 2 ranks over one rank's
(rank 0 reports; the job's own training examples/s, evaluations excluded).  Every pair of runs with the
pipeline on and off must give the same final test AUC and log loss and the same checkpoint files (the
tables' files byte for byte; TF's own bookkeeping files excepted, as tests/test_pipeline_tf.py does):
the script fails otherwise.  ``--profile`` runs the job under bench/rank_profile.py instead and prints
where a step's time goes on every rank (ms per step by category).  Prints one JSON object.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PYTHON = sys.executable
MPIRUN = str(Path(PYTHON).parent / "mpirun")
TF_OWN = ("checkpoint", "graph.pbtxt", "events.out.tfevents")
FINAL = re.compile(r"final: test AUC ([0-9.]+), test logloss ([0-9.]+), ([0-9,]+) training examples/s")
VARIANTS = [("1 rank", "1"), ("1 rank", "0"), ("2 ranks", "1"), ("2 ranks", "0")]


def command(ranks: str, program: list[str]) -> list[str]:
    if ranks == "1 rank":
        return ["taskset", "-c", "0", PYTHON, *program]
    return [MPIRUN, "--bind-to", "core", "-np", "2", "-x", "MXREC_KEY_PIPELINE", "-x", "PYTHONPATH",
            "-x", "TF_CPP_MIN_LOG_LEVEL", PYTHON, *program]


def files(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.name.startswith(TF_OWN) and not p.name.endswith(".meta")}


def run(ranks: str, pipeline: str, steps: int, folder: Path, profile: bool) -> dict:
    options = ["--steps", str(steps), "--eval-every", str(steps), "--save-checkpoint-steps", str(steps),
               "--no-progress", "--checkpoint-dir", str(folder / "checkpoints")]
    program = ([str(HERE / "rank_profile.py"), str(folder / "profile"), "train", *options] if profile
               else ["-m", "mxrec_ref", "train", *options])
    env = dict(os.environ, MXREC_KEY_PIPELINE=pipeline, TF_CPP_MIN_LOG_LEVEL="3",
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               PYTHONPATH=os.environ.get("PYTHONPATH", str(REPO)))
    done = subprocess.run(command(ranks, program), capture_output=True, text=True, env=env, cwd=REPO, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"{ranks}, pipeline {pipeline}: exit {done.returncode}\n{done.stdout[-2000:]}\n"
                           f"{done.stderr[-3000:]}")
    if profile:
        reports = [json.loads(p.read_text()) for p in sorted(folder.glob("profile.rank*.json"))]
        return {"examples_per_s": reports[0]["examples_per_second"], "profile": reports,
                "files": files(folder / "checkpoints")}
    match = FINAL.search(done.stdout)
    if match is None:
        raise RuntimeError(f"{ranks}, pipeline {pipeline}: no final line in\n{done.stdout[-2000:]}")
    return {"examples_per_s": float(match.group(3).replace(",", "")), "auc": match.group(1),
            "logloss": match.group(2), "files": files(folder / "checkpoints")}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench/rank_efficiency.py")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    runs = {f"{r}, pipeline {'on' if p == '1' else 'off'}": [] for r, p in VARIANTS}
    profiles = {name: [] for name in runs}
    for k in range(args.repeats):
        order = VARIANTS[k % 4:] + VARIANTS[:k % 4]
        results = {}
        for ranks, pipeline in order:
            name = f"{ranks}, pipeline {'on' if pipeline == '1' else 'off'}"
            with tempfile.TemporaryDirectory(prefix="mxrec-ranks-") as scratch:
                results[name] = run(ranks, pipeline, args.steps, Path(scratch), args.profile)
            runs[name].append(results[name]["examples_per_s"])
            if args.profile:
                profiles[name].append(results[name]["profile"])
            print(f"repeat {k + 1}: {name}: {results[name]['examples_per_s']:,.0f} examples/s", file=sys.stderr)
        for ranks in ("1 rank", "2 ranks"):
            on, off = results[f"{ranks}, pipeline on"], results[f"{ranks}, pipeline off"]
            same = {key: on[key] == off[key] for key in ("auc", "logloss", "files") if key in on}
            if not all(same.values()) or not on["files"]:
                raise RuntimeError(f"{ranks}: pipeline on and off differ: {same}")

    def ratio(a: str, b: str) -> dict:
        values = [x / y for x, y in zip(runs[a], runs[b])]
        return {"min": min(values), "median": statistics.median(values), "max": max(values), "runs": values}

    report = {"steps": args.steps, "repeats": args.repeats, "examples_per_s": runs,
              "efficiency, pipeline on": ratio("2 ranks, pipeline on", "1 rank, pipeline on"),
              "efficiency, pipeline off": ratio("2 ranks, pipeline off", "1 rank, pipeline off"),
              "2 ranks: pipeline on / off": ratio("2 ranks, pipeline on", "2 ranks, pipeline off"),
              "1 rank: pipeline on / off": ratio("1 rank, pipeline on", "1 rank, pipeline off"),
              "identical on/off": True}
    if args.profile:
        report["profile"] = profiles
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
