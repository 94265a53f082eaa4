"""The repository's mxRec-style example, run through `mxrec-ref run` in every mode (issue 6, item 6).
The upstream-shaped two-tower example is in test_example_two_tower.py (a file to an xdist process:
the two halves run side by side)."""
import itertools
import os
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "mxrec_two_tables.py"
MODES = [("fast", *combo) for combo in itertools.product(["feature_spec", "modify_graph"], ["0", "1"],
                                                          ["hbm", "ddr", "ssd"])]
MODES += [("ref", "feature_spec", "1", "hbm"), ("ref", "modify_graph", "1", "ddr")]


@pytest.mark.parametrize("backend_name,mode,multi_lookup,storage", MODES)
def test_graph_4_example_runs_through_the_alias(mxrec_ref_command, backend_name, mode, multi_lookup, storage):
    env = dict(os.environ, MXREC_REF_BACKEND=backend_name, MXREC_EXAMPLE_MODE=mode,
               MXREC_EXAMPLE_MULTI_LOOKUP=multi_lookup, MXREC_EXAMPLE_STORAGE=storage, TF_CPP_MIN_LOG_LEVEL="3")
    result = mxrec_ref_command(["run", EXAMPLE], env=env, timeout=300, cwd="/")
    assert result.returncode == 0, result.stderr[-3000:]
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith(f"SUCCESS mode={mode} multi_lookup={multi_lookup} storage={storage}")
    assert "[mx_rec] INFO trained" in result.stderr
