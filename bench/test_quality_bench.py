"""Model quality (issue 34): the parity table, the admission/eviction curve and its plot (bench/quality.py).

Not a timing: one round runs the quality profile and writes bench/quality.md, quality.json and quality.png
(the full profile: quality-full.*); the AUCs and parity gaps go to ``extra_info["quality"]``, which
`mxrec-ref bench --compare` checks against bench/baseline.json's noise bands.  The profile is the quick one
(a few minutes on an idle 2-core machine) under `make bench` and `mxrec-ref bench` alike, so that a run
compares with the quick baseline; MXREC_QUALITY_PROFILE=full opts in to the full one (every storage mode,
every eviction; ~15 minutes idle).
"""
from __future__ import annotations

from pathlib import Path

import quality


def test_model_quality(benchmark):
    result = benchmark.pedantic(lambda: quality.run_profile(quality.profile_name(), Path(__file__).parent),
                                rounds=1, iterations=1)
    benchmark.extra_info["quality"] = result["quality"]
