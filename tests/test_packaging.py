"""The package as it ships (issue 19, item 1): sdist -> wheel -> a fresh virtual environment
-> a fast store opens; the metadata is complete and has one version.

Nothing is downloaded: the sdist comes from the PEP 517 backend in this environment, the
wheel is built from the unpacked sdist with ``--no-build-isolation`` (this environment's
setuptools, Cython and numpy), and it is installed ``--no-deps --no-index`` into a venv
that sees only this environment's numpy (through a .pth file), not TensorFlow.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import mxrec_ref

REPO = Path(__file__).resolve().parent.parent


def _run(args, **kwargs):
    result = subprocess.run(args, capture_output=True, text=True, timeout=300, **kwargs)
    assert result.returncode == 0, f"{args}:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    return result


def _clean_env(**extra):
    """No PYTHONPATH: the fresh environment must import its installed copy, not this checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    return {**env, **extra}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("packaging")
    dist = root / "dist"
    _run([sys.executable, "-c", f"from setuptools import build_meta; build_meta.build_sdist({str(dist)!r})"],
         cwd=REPO, env=_clean_env())
    (sdist,) = dist.glob("mxrec_ref-*.tar.gz")
    # the wheel from the sdist alone (as a user's pip does it), not from the checkout
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
          "-w", str(dist), str(sdist)], cwd=root, env=_clean_env())
    (wheel,) = dist.glob("mxrec_ref-*.whl")
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    # numpy (and nothing else) from this environment: a folder with links to its packages
    import numpy

    shared = root / "shared-numpy"
    shared.mkdir()
    numpy_dir = Path(numpy.__file__).resolve().parent
    for sibling in numpy_dir.parent.iterdir():
        if sibling.name == "numpy" or sibling.name.startswith("numpy.libs") or sibling.name.startswith("numpy-"):
            (shared / sibling.name).symlink_to(sibling)
    (site / "shared-numpy.pth").write_text(str(shared) + "\n")
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index",
          str(wheel)], env=_clean_env())
    return {"sdist": sdist, "wheel": wheel, "venv": venv, "python": python, "root": root}


def test_sdist_carries_the_extension_sources_license_and_typing_marker(built):
    names = tarfile.open(built["sdist"]).getnames()
    top = f"mxrec_ref-{mxrec_ref.__version__}"
    for path in ("cext/_fast.pyx", "cext/mxrec_ref._fast.pxd", "cext/_lookup.pxi", "cext/_fast_helpers.h", "LICENSE",
                 "pyproject.toml", "setup.py", "mxrec_ref/py.typed", "mxrec_ref/compat/mx_rec/__init__.py"):
        assert f"{top}/{path}" in names, path
    for source in sorted((Path(__file__).resolve().parent.parent / "cext").glob("*.p*")):   # every family file
        assert f"{top}/cext/{source.name}" in names, source.name
    # the examples the README points to and the rule book (issue 33, item 7)
    for shipped in sorted(REPO.glob("examples/*.py")) + sorted(REPO.glob("spec/*.md")):
        assert f"{top}/{shipped.relative_to(REPO)}" in names, shipped.name


def test_wheel_built_from_the_sdist_has_the_fast_path_and_metadata(built):
    with zipfile.ZipFile(built["wheel"]) as wheel:
        names = wheel.namelist()
        metadata = wheel.read(f"mxrec_ref-{mxrec_ref.__version__}.dist-info/METADATA").decode()
    assert any(n.startswith("mxrec_ref/_fast") and n.endswith(".so") for n in names)
    assert "mxrec_ref/py.typed" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert f"Version: {mxrec_ref.__version__}" in metadata
    assert "License-Expression: Apache-2.0" in metadata
    assert "Requires-Python: >=3.10" in metadata
    classifiers = [line for line in metadata.splitlines() if line.startswith("Classifier: ")]
    assert len(classifiers) >= 8 and "Classifier: Programming Language :: Python :: 3.11" in classifiers
    tf = [line for line in metadata.splitlines() if line.startswith("Requires-Dist: tensorflow")]
    assert tf and all("<2.22" in line and ">=2.20" in line for line in tf), tf


def test_the_installed_wheel_opens_a_fast_store_in_a_fresh_venv(built, tmp_path):
    probe = ("import numpy as np, mxrec_ref\n"
             "from mxrec_ref import TableConfig, Adagrad, open_store, available_backends\n"
             "store = open_store(TableConfig('t', dim=4, dynamic_expansion=True), Adagrad(0.1), backend='fast')\n"
             "r = store.lookup(np.array([3, 5, 3]), step=0)\n"
             "print(mxrec_ref.__file__); print(type(store).__name__, r.embeddings().shape, available_backends())\n")
    out = _run([str(built["python"]), "-c", probe], cwd=tmp_path, env=_clean_env()).stdout.splitlines()
    assert out[0].startswith(str(built["venv"]))          # the installed copy, not this checkout
    assert out[1] == "FastStore (3, 4) ['fast', 'ref']"


def test_the_installed_command_reports_its_version_and_bench_outside_a_checkout_in_one_line(built, tmp_path):
    command = built["venv"] / "bin" / "mxrec-ref"
    version = _run([str(command), "--version"], cwd=tmp_path, env=_clean_env())
    assert version.stdout.strip() == f"mxrec-ref {mxrec_ref.__version__}"
    bench = subprocess.run([str(command), "bench"], cwd=tmp_path, env=_clean_env(), capture_output=True, text=True,
                           timeout=120)
    assert bench.returncode == 2
    assert [line for line in bench.stderr.splitlines() if line] == [
        f"mxrec-ref bench: no bench/ folder at {built['venv']}/lib/python{sys.version_info.major}."
        f"{sys.version_info.minor}/site-packages/bench: the benchmarks run from a source checkout "
        f"(--verbose shows the cause)"]
    # the spec, the tests and cext/ are not in the wheel: the rule index says so, or reads a checkout it is given
    rules = subprocess.run([str(command), "rules", "ADM-2"], cwd=tmp_path, env=_clean_env(), capture_output=True,
                           text=True, timeout=120)
    assert rules.returncode == 2 and rules.stdout == ""
    assert [line for line in rules.stderr.splitlines() if line] == [
        f"mxrec-ref rules: spec not found: no folder {built['venv']}/lib/python{sys.version_info.major}."
        f"{sys.version_info.minor}/site-packages/spec or {tmp_path}/spec; the rule index reads a source checkout "
        f"of mxrec-ref (an installed package has no spec/): run it there or pass --root"]
    rules = _run([str(command), "rules", "ADM-2", "--root", str(REPO)], cwd=tmp_path, env=_clean_env())
    assert rules.stdout.startswith("ADM-2  (spec/admission.md:") and "test_adm_2_" in rules.stdout
    # without the 'test' extra (pytest, hypothesis) the conformance suite says which extra, in one line
    conformance = subprocess.run([str(command), "conformance"], cwd=tmp_path, env=_clean_env(), capture_output=True,
                                 text=True, timeout=120)
    assert conformance.returncode == 2 and conformance.stdout == ""
    assert [line for line in conformance.stderr.splitlines() if line] == [
        "mxrec-ref conformance: needs pytest and hypothesis, which the 'test' extra installs: "
        "pip install 'mxrec-ref[test]'"]


def test_the_version_is_written_once():
    pyproject = (REPO / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject and "version = { attr = \"mxrec_ref.__version__\" }" in pyproject
    tools_only = (REPO / "setup.cfg").read_text()                 # the design's setup.cfg: tools' settings only
    assert "[metadata]" not in tools_only and "[options" not in tools_only
    assert "version=" not in (REPO / "setup.py").read_text()


def test_the_license_file_is_the_declared_license():
    assert 'license = "Apache-2.0"' in (REPO / "pyproject.toml").read_text()
    assert "Apache License\n                           Version 2.0" in (REPO / "LICENSE").read_text()
