"""Model quality (issue 34): the parity table, the admission/eviction curve and its plot (bench/quality.py).

Not a timing: one round runs the profile (MXREC_BENCH_PROFILE, quick by default: a few minutes on an idle
2-core machine) and writes bench/quality.md, quality.json and quality.png; the AUCs and parity gaps go to
``extra_info["quality"]``, which `mxrec-ref bench --compare` checks against bench/baseline.json's noise bands.
"""
from __future__ import annotations

from pathlib import Path

import quality
from workloads import PROFILE


def test_model_quality(benchmark):
    profile = "full" if PROFILE == "full" else "quick"
    result = benchmark.pedantic(lambda: quality.run_profile(profile, Path(__file__).parent), rounds=1, iterations=1)
    benchmark.extra_info["quality"] = result["quality"]
