"""Every ```python block of the README and docs/*.md runs as written, from an empty folder, in a fresh Python
process (one per document: its blocks one after the other, each from an empty folder of its own with nothing
defined): as a reader who pastes it would (issue 41: an example asked for rows 4000-4060 of its own 492-token
text, and another read export folders it never made). The processes are forks of one that imported torch, attnviz
(as `import attnviz` does) and the transformers modules the documents' models need, and did nothing else (no block has run, no plugin is
registered, no model loaded): each document's process starts as a fresh one would, without starting Python and
importing torch and transformers again (each 1-3 s, in three of the five documents). Hub ids
resolve against the tiny random models that conftest's hub_cache holds in a local Hugging Face cache; nothing is
downloaded.

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


# Imports torch, attnviz and transformers' modules, then forks one process per document (a JSON object: document → its blocks), one at a
# time: it runs the document's blocks, each with fresh globals in an empty folder of its own (FOLDER/DOCUMENT/N), up
# to the first that fails, and writes FOLDER/DOCUMENT.json: null (every block ran) or [N, its traceback].
_BLOCKS = """
import json, os, sys, traceback
import torch, attnviz
import transformers  # modules only: no model, no plugin, nothing run (no attnviz module a plain import would not)
from transformers import (AutoTokenizer, GPT2LMHeadModel, T5ForConditionalGeneration, WhisperFeatureExtractor,
                          WhisperForConditionalGeneration, WhisperTokenizerFast)
documents, root = json.loads(sys.argv[1]), sys.argv[2]
for name, blocks in documents.items():
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        failed = None
        try:
            for number, block in enumerate(blocks):
                folder = os.path.join(root, name, str(number))
                os.makedirs(folder)
                os.chdir(folder)
                try:
                    exec(compile(block, f"<{name} python block {number}>", "exec"), {"__name__": "__main__"})
                except BaseException:
                    failed = [number, traceback.format_exc()]
                    break
            with open(os.path.join(root, name + ".json"), "w", encoding="utf-8") as f:
                json.dump(failed, f)
        finally:
            sys.stdout.flush(); sys.stderr.flush()
            os._exit(0)
    os.waitpid(pid, 0)
"""

DOCUMENTS = sorted({name for name, _, _ in EXAMPLES})


def _blocks(name: str) -> list[str]:
    return [block for document, _, block in EXAMPLES if document == name]


@pytest.fixture(scope="module")
def examples_run(tmp_path_factory, hub_cache) -> tuple[Path, dict, subprocess.CompletedProcess]:
    """Every document's blocks run, each document in a process of its own (forks of one): the folder, each
    document's outcome, the first process."""
    root = tmp_path_factory.mktemp("doc_examples")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(hub_cache), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", _BLOCKS, json.dumps({name: _blocks(name) for name in DOCUMENTS}),
                           str(root)], env=env, capture_output=True, text=True, timeout=600)
    outcome = {name: json.loads((root / f"{name}.json").read_text(encoding="utf-8")) for name in DOCUMENTS
               if (root / f"{name}.json").exists()}
    return root, outcome, done


@pytest.mark.parametrize("name", DOCUMENTS)
def test_the_python_examples_run_as_written_from_empty_folders(name, examples_run):
    root, outcome, done = examples_run
    blocks = _blocks(name)
    assert name in outcome, f"{name}'s process ended before its outcome (exit {done.returncode}):\n{done.stderr[-2000:]}"
    if outcome[name] is not None:
        number, trace = outcome[name]
        pytest.fail(f"{name} python block {number}:\n{blocks[number]}\n{trace[-2000:]}")
    folder = root / name
    assert sorted(p.name for p in folder.iterdir()) == sorted(str(n) for n in range(len(blocks)))  # each ran
    assert not any(folder.glob("**/*.tmp"))  # nothing half-written


def test_the_processes_of_the_examples_end_cleanly(examples_run):
    _, outcome, done = examples_run
    assert done.returncode == 0 and sorted(outcome) == DOCUMENTS, done.stderr[-2000:]
