"""`mxrec-ref conformance` (issue 8): the spec as a product."""
import subprocess
import sys


def _run(*args):
    return subprocess.run([sys.executable, "-m", "mxrec_ref", "conformance", *args], capture_output=True, text=True,
                          timeout=600, cwd="/")


def test_conformance_passes_on_the_reference():
    result = _run("--backend", "ref", "--rules", "ADM,EVI,EXP")
    assert result.returncode == 0, result.stdout[-3000:]
    assert "ADM-8      pass" in result.stdout
    assert ", 0 failed, 0 n/a" in result.stdout.rstrip().splitlines()[-2]


def test_conformance_names_the_rule_a_broken_store_violates():
    result = _run("--backend", "mxrec_ref.conformance.examples:EarlyAdmissionStore", "--rules", "ADM,BE")
    assert result.returncode != 0
    assert "ADM-2      FAIL" in result.stdout and "ADM-8      FAIL" in result.stdout
    assert "BE-1       FAIL" in result.stdout          # the differential run against the reference disagrees
    assert "ADM-1      pass" in result.stdout          # the rules it keeps still pass
