"""`make bench-peers`: TFRA vs mxrec-ref on the same lookup + update workload,
run interleaved (TFRA, mxrec-ref, TFRA, ...) so machine drift hits both.

Usage: python bench/peers/run.py PEER_PYTHON MXREC_PYTHON [ROUNDS]
"""
import json
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def worker(python: str, script: str) -> dict:
    out = subprocess.run([python, str(HERE / script), str(HERE)], capture_output=True, text=True, check=True,
                         env={"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin"})
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(peer_python: str, mxrec_python: str, rounds: int = 3) -> int:
    tfra, mxrec = [], []
    for _ in range(rounds):
        tfra.append(worker(peer_python, "worker_tfra.py"))
        mxrec.append(worker(mxrec_python, "worker_mxrec.py"))
    t = statistics.median(r["min_step_s"] for r in tfra)
    m = statistics.median(r["min_step_s"] for r in mxrec)
    print(json.dumps({"tfra_tf_version": tfra[0]["tf"], "tfra_min_step_ms": t * 1e3, "mxrec_min_step_ms": m * 1e3,
                      "ratio_tfra_over_mxrec": t / m, "rounds": rounds}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 3))
