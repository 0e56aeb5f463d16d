"""Every ```python block of the README and docs/*.md runs as written, from an empty folder, in a fresh Python
process: as a reader who pastes it would (issue 41: an example asked for rows 4000-4060 of its own 492-token
text, and another read export folders it never made). Hub ids resolve against the tiny random models that
tests/test_readme_commands.py saves in a local Hugging Face cache; nothing is downloaded.

The bash blocks are held by tests/test_readme_commands.py, which runs every ``attnviz`` line from an empty
folder too."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from docs_text import DOCS, README
from test_readme_commands import hub_cache  # noqa: F401 (a fixture: the README's hub ids, offline)

BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
EXAMPLES = [(name, i, block) for name, text in [("README.md", README), *DOCS.items()]
            for i, block in enumerate(BLOCK.findall(text))]


def test_there_are_examples_to_run():
    assert {name for name, _, _ in EXAMPLES} >= {"README.md", "python-api.md"} and len(EXAMPLES) >= 5


@pytest.mark.parametrize(("name", "number", "block"), EXAMPLES, ids=[f"{n}#{i}" for n, i, _ in EXAMPLES])
def test_a_python_example_runs_as_written_from_an_empty_folder(name, number, block, tmp_path, hub_cache):  # noqa: F811
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(hub_cache), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, f"{name} python block {number}:\n{block}\n{done.stderr[-2000:]}"
    assert not any(Path(tmp_path).glob("**/*.tmp"))  # nothing half-written
