"""Every Python block of the README runs as pasted (issue 19, item 2).

The blocks are found automatically (every fenced ```python block, whoever adds it), written
verbatim to a file in an empty temporary folder and run there in a fresh interpreter, so a
block that leans on a name it never defines, on graph mode it never enables, or on a path
outside its own temporary folders fails here.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)


def python_blocks(text: str) -> list[tuple[int, str]]:
    """(first line number, source) of every ```python block."""
    return [(text.count("\n", 0, m.start()) + 2, m.group(1)) for m in FENCE.finditer(text)]


BLOCKS = python_blocks(README.read_text(encoding="utf-8"))


def test_the_readme_has_python_blocks_and_keeps_its_set_up_first():
    assert len(BLOCKS) >= 3
    first = README.read_text(encoding="utf-8").split("```sh\n", 1)[1].split("```", 1)[0].splitlines()
    assert first[0].startswith("make demo") and first[1].startswith("make test")


def test_block_extraction_finds_every_python_block_verbatim():
    text = "intro\n```python\nx = 1\n\ny = 2\n```\n```sh\nls\n```\n```python\nprint(3)\n```\n"
    assert python_blocks(text) == [(3, "x = 1\n\ny = 2\n"), (11, "print(3)\n")]


@pytest.mark.parametrize("line,source", BLOCKS, ids=[f"README.md:{line}" for line, _ in BLOCKS])
def test_readme_block_runs_as_pasted(line, source, tmp_path):
    script = tmp_path / "block.py"
    script.write_text(source, encoding="utf-8")
    scratch = tmp_path / "tmp"                     # the blocks' tempfile folders land here, checked below
    scratch.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
           "TMPDIR": str(scratch), "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("MXREC_REF_BACKEND", None)
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, f"README.md line {line}:\n{result.stderr[-4000:]}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["block.py", "tmp"], "a block wrote into its current folder"


def test_no_readme_example_uses_a_fixed_system_path():
    for line, source in BLOCKS:
        assert "/mnt" not in source and "/tmp/" not in source, f"README.md:{line}: use tempfile folders"
