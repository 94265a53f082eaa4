"""Ratios from one pytest-benchmark JSON run (bench/README.md), as a markdown table.

Usage: python bench/ratios.py .benchmarks/latest.json [--markdown]

The reduction itself (``ratios``: each benchmark tagged with ``extra_info["ratio_group"]``
divided by the ``candidate`` of its group, min time over min time) lives in the package,
``mxrec_ref.benchmarks``, which ``mxrec-ref bench`` uses too.  A ratio above 1 means the
candidate (the fast store) is that many times faster.
"""
from __future__ import annotations

import json
import sys

from mxrec_ref.benchmarks import ratios

__all__ = ["ratios", "main"]


def main(argv: list[str]) -> int:
    with open(argv[0]) as handle:
        report = json.load(handle)
    print(f"machine: {report['machine_info'].get('cpu', {}).get('brand_raw', '?')}, "
          f"{report['datetime']}")
    print("| measure | versus | ratio | fast (min ms) | other (min ms) |")
    print("|---|---|---:|---:|---:|")
    for row in ratios(report):
        ms = lambda v: "" if v is None else f"{v:.2f}"  # noqa: E731
        print(f"| {row['group']} | {row['versus']} | {row['ratio']:.2f} | {ms(row['candidate_ms'])} | "
              f"{ms(row['other_ms'])} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
