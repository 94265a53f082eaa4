"""Benchmarks are not tests: they time, and mxrec_ref.benchmarks.ratios turns the times
of one run into the ratios reported in bench/README.md."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
