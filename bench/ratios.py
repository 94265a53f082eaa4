"""Ratios from one pytest-benchmark JSON run (bench/README.md).

Usage: python bench/ratios.py .benchmarks/latest.json [--markdown]

Every benchmark tagged with ``extra_info["ratio_group"]`` is divided by the
``candidate`` of its group (min time over min time: the minimum is the least
disturbed by other load on a shared machine).  A ratio above 1 means the
candidate (the fast store) is that many times faster.
"""
from __future__ import annotations

import json
import sys
from collections import defaultdict


def ratios(report: dict) -> list[dict]:
    groups = defaultdict(dict)
    better = {}      # a group whose ratio is a cost (e.g. tiers vs HBM) says better="lower"
    extra = {}
    for bench in report["benchmarks"]:
        info = bench.get("extra_info", {})
        if "ratio_group" in info:
            groups[info["ratio_group"]][info["role"]] = bench["stats"]["min"]
            better[info["ratio_group"]] = info.get("better", better.get(info["ratio_group"], "higher"))
            extra.update({k: v for k, v in info.items() if k not in ("ratio_group", "role", "better")})
    rows = []
    for group, members in groups.items():
        candidate = members.get("candidate")
        for role, seconds in members.items():
            if role == "candidate" or candidate is None:
                continue
            rows.append({"group": group, "versus": role, "ratio": seconds / candidate,
                         "candidate_ms": candidate * 1e3, "other_ms": seconds * 1e3, "better": better[group]})
    if "bytes_per_key" in extra:
        floor = 8 + 4 * 16
        rows.append({"group": "memory: bytes per key / (8 + 4*dim)", "versus": "8 + 4*dim",
                     "ratio": extra["bytes_per_key"] / floor, "candidate_ms": None, "other_ms": None,
                     "better": "lower"})
    return rows


def main(argv: list[str]) -> int:
    report = json.load(open(argv[0]))
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
