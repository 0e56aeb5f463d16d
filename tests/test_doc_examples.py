"""Every ```python block of the README and docs/*.md runs as written, from an empty folder, in a fresh Python
process (one per document: its blocks one after the other, each from an empty folder of its own with nothing
defined): as a reader who pastes it would (issue 41: an example asked for rows 4000-4060 of its own 492-token
text, and another read export folders it never made). Hub ids resolve against the tiny random models that
conftest's hub_cache holds in a local Hugging Face cache; nothing is downloaded.

The bash blocks are held by tests/test_readme_commands.py, which runs every ``attnviz`` line from an empty
folder too."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from docs_text import DOCS, README

BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
EXAMPLES = [(name, i, block) for name, text in [("README.md", README), *DOCS.items()]
            for i, block in enumerate(BLOCK.findall(text))]


def test_there_are_examples_to_run():
    assert {name for name, _, _ in EXAMPLES} >= {"README.md", "python-api.md"} and len(EXAMPLES) >= 5


# Runs the blocks given as a JSON list, each with fresh globals in an empty folder of its own (numbered under the
# folder given); on the first that fails, its traceback and "@@@ block N failed" on stderr, and exit 1.
_BLOCKS = """
import json, os, sys, traceback
for number, block in enumerate(json.loads(sys.argv[1])):
    folder = os.path.join(sys.argv[2], str(number))
    os.mkdir(folder)
    os.chdir(folder)
    try:
        exec(compile(block, f"<python block {number}>", "exec"), {"__name__": "__main__"})
    except BaseException:
        traceback.print_exc()
        sys.stderr.write(f"@@@ block {number} failed\\n")
        sys.exit(1)
"""

DOCUMENTS = sorted({name for name, _, _ in EXAMPLES})


@pytest.mark.parametrize("name", DOCUMENTS)
def test_the_python_examples_run_as_written_from_empty_folders(name, tmp_path, hub_cache):
    blocks = [block for document, _, block in EXAMPLES if document == name]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(hub_cache), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", _BLOCKS, json.dumps(blocks), str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=300)
    failed = re.search(r"@@@ block (\d+) failed", done.stderr)
    shown = f"{name} python block {failed.group(1)}:\n{blocks[int(failed.group(1))]}\n" if failed else ""
    assert done.returncode == 0, f"{shown}{done.stderr[-2000:]}"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(str(n) for n in range(len(blocks)))  # each ran
    assert not any(Path(tmp_path).glob("**/*.tmp"))  # nothing half-written
