"""The suite does not depend on the user's environment: the terminal tests pass in a shell with
NO_COLOR, FORCE_COLOR, a narrow COLUMNS and a dumb TERM set, as a newcomer's shell may have."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_terminal_tests_pass_whatever_the_shell_sets():
    env = {**os.environ, "NO_COLOR": "1", "FORCE_COLOR": "1", "COLUMNS": "50", "TERM": "dumb", "ATTNVIZ_DEBUG": "1",
           "HF_HUB_OFFLINE": "0"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
                           str(ROOT / "tests" / "test_render_terminal.py")],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:]
    assert " passed" in done.stdout and "failed" not in done.stdout
