"""`mxrec-ref conformance` (issue 8): the spec as a product.  The command runs forked from a
process that imported TensorFlow (tests/forked_cli.py); test_cli.py runs it as a fresh process."""


def _run(mxrec_ref_command, *args):
    return mxrec_ref_command(["conformance", *args], timeout=600, cwd="/")


def test_conformance_passes_on_the_reference(mxrec_ref_command):
    result = _run(mxrec_ref_command, "--backend", "ref", "--rules", "ADM,EVI,EXP")
    assert result.returncode == 0, result.stdout[-3000:]
    assert "ADM-8      pass" in result.stdout
    assert ", 0 failed, 0 n/a" in result.stdout.rstrip().splitlines()[-2]


def test_conformance_names_the_rule_a_broken_store_violates(mxrec_ref_command):
    result = _run(mxrec_ref_command, "--backend", "mxrec_ref.conformance.examples:EarlyAdmissionStore", "--rules",
                  "ADM,BE")
    assert result.returncode != 0
    assert "ADM-2      FAIL" in result.stdout and "ADM-8      FAIL" in result.stdout
    assert "BE-1       FAIL" in result.stdout          # the differential run against the reference disagrees
    assert "ADM-1      pass" in result.stdout          # the rules it keeps still pass


def test_the_quick_hypothesis_profile_is_ci_without_shrinking():
    """HYPOTHESIS_PROFILE=quick (README, environment variables): ci's examples, no shrink phase."""
    from hypothesis import Phase, settings

    import mxrec_ref.conformance.plugin  # noqa: F401 - registers the profiles

    ci, quick = settings.get_profile("ci"), settings.get_profile("quick")
    assert (quick.max_examples, quick.derandomize, quick.deadline) == (ci.max_examples, ci.derandomize, ci.deadline)
    assert Phase.shrink in ci.phases and set(quick.phases) == set(ci.phases) - {Phase.shrink}
