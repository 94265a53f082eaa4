"""`mxrec-ref rules` (issue 15, item 6): a rule's text, the tests that name it and the code that
cites it, read by mxrec_ref.rule_index (the reader tests/test_rule_index.py uses too)."""
from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mxrec_ref import cli, rule_index

REPO = Path(__file__).resolve().parent.parent


def _rules(*argv):
    args = cli.build_parser().parse_args(["rules", *argv])
    out, err = io.StringIO(), io.StringIO()
    status = rule_index.main(args, out, err)
    return status, out.getvalue(), err.getvalue()


def _sites(section: str) -> list[tuple[str, int, str]]:
    """(path, line, what) of each `  path:line  what` entry of one section of the output."""
    rows = []
    for entry in section.splitlines()[1:]:
        where, _, what = entry.strip().partition("  ")
        path, _, line = where.rpartition(":")
        rows.append((path, int(line), what))
    return rows


def test_a_rule_prints_its_text_its_tests_and_its_code_sites():
    status, out, err = _rules("adm-2")                   # any case
    assert status == 0 and err == ""
    head, tests, code = out.split("\n\n")
    line = next(n for n, text in enumerate((REPO / "spec/admission.md").read_text().splitlines(), 1)
                if text.startswith("- **ADM-2**"))
    assert head.splitlines()[0] == f"ADM-2  (spec/admission.md:{line})"
    assert "count reaches `access_threshold`" in head and "already gets its row" in head   # the continuation line
    assert tests.startswith("tests (") and code.startswith("code (")
    names = [what for _, _, what in _sites(tests)]
    assert {"test_adm_2_crossing_access_gets_its_row", "test_adm_2_admission_off_admits_on_first_access"} <= set(names)
    # a test naming the rule only in its docstring is found too (ADM-2 in the broken-store CLI test)
    assert "test_conformance_names_the_rule_a_broken_store_violates" in names
    sites = _sites(code)
    assert any(path.startswith("mxrec_ref/ref/") for path, _, _ in sites)      # the reference cites it
    for path, line, _ in _sites(tests) + sites:          # every entry points at a line of a real file
        assert (REPO / path).is_file() and line >= 1, (path, line)
    for path, line, _ in sites:                          # and a code site's line cites the rule itself
        assert "ADM-2" in (REPO / path).read_text().splitlines()[line - 1], (path, line)
    assert not any(path.startswith("tests/") or "/test_" in path for path, _, _ in sites)


def test_code_sites_cover_the_kernels_in_cext():
    """Code sites cover cext/ as well as the package."""
    kernels = "\n".join(path.read_text() for path in rule_index.files(REPO, "cext/*.pyx", "cext/*.pxi", "cext/*.pxd"))
    rule = next(r for r in rule_index.defined_rules(REPO) if r in rule_index.rule_ids_in(kernels, {r.split("-")[0]}))
    entry = rule_index.lookup(REPO, rule)
    assert any(site.path.startswith("cext/") for site in entry.code), rule


def test_without_a_rule_every_family_and_rule_id_is_listed():
    status, out, _ = _rules()
    assert status == 0
    listed = out.split()
    assert set(rule_index.defined_rules(REPO)) <= set(listed)
    assert out.splitlines()[0].startswith("admission (")


def test_a_family_lists_its_rules_with_their_first_words():
    status, out, _ = _rules("EVI")
    assert status == 0 and out.splitlines()[0] == "spec/eviction.md"
    assert [line.split()[0] for line in out.splitlines()[1:]] == [
        r for r in rule_index.defined_rules(REPO) if r.startswith("EVI-")]


@pytest.mark.parametrize("text", ["adm-99", "xyz-1", "nonsense"])
def test_an_unknown_rule_is_one_line_naming_it_with_status_2(text):
    status, out, err = _rules(text)
    assert status == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and f"unknown rule {text!r}" in err


def test_without_a_checkout_it_says_spec_not_found_in_one_line(tmp_path, monkeypatch):
    """An installed package has no spec/ beside it (tests/test_packaging.py runs the installed command)."""
    monkeypatch.setattr(rule_index, "PACKAGE_ROOT", tmp_path / "site-packages")
    monkeypatch.chdir(tmp_path)
    status, out, err = _rules("ADM-2")
    assert status == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("mxrec-ref rules: spec not found: ")
    status, out, _ = _rules("ADM-2", "--root", str(REPO))        # pointed at a checkout, it reads that
    assert status == 0 and out.startswith("ADM-2  (spec/admission.md:")


def test_the_command_from_another_folder_reads_the_checkout_it_was_imported_from(tmp_path):
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-m", "mxrec_ref", "rules", "EVI-1"], cwd=tmp_path, env=environment,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("EVI-1  (spec/eviction.md:") and "\ncode (" in result.stdout
    unknown = subprocess.run([sys.executable, "-m", "mxrec_ref", "rules", "evi-999"], cwd=tmp_path, env=environment,
                             capture_output=True, text=True, timeout=120)
    assert unknown.returncode == 2 and unknown.stderr.count("\n") == 1 and "'evi-999'" in unknown.stderr


def test_rules_is_a_subcommand_with_help():
    parser = cli.build_parser()
    assert isinstance(parser.parse_args(["rules"]), argparse.Namespace)
