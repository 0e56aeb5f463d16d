"""The real ``attnviz tui`` under tmux (issue 31): a terminal as a user has it, keys sent with ``send-keys``,
the screen read with ``capture-pane``. Needs Debian's tmux (CI installs it; elsewhere the test skips)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid

import pytest

pytestmark = pytest.mark.slow

TMUX = shutil.which("tmux")


def _require_tmux() -> str:
    if TMUX is None:
        if os.environ.get("CI"):
            pytest.fail("tmux is not installed; .ci/run installs it")
        pytest.skip("tmux is not installed (apt-get install tmux)")
    return TMUX


def _capture(tmux: list[str], session: str) -> str:
    return subprocess.run([*tmux, "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout


def _wait_for(tmux: list[str], session: str, wanted: str, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        screen = _capture(tmux, session)
        if wanted in screen:
            return screen
        time.sleep(0.05)
    raise AssertionError(f"{wanted!r} never appeared; the screen:\n{_capture(tmux, session)}")


@pytest.mark.parametrize("leave", ["q", "C-c"])
def test_the_real_command_answers_keys_and_leaves_the_terminal_as_it_was(leave):
    session = f"attnviz-{uuid.uuid4().hex[:8]}"
    # a tmux server of its own (-L): the default one exits when another test kills its last session, and a
    # session started while it exits fails ("server exited unexpectedly")
    tmux = [_require_tmux(), "-L", session]
    command = (f"{sys.executable} -m attnviz tui 'The cat sat on the mat.' --model sample_configs/tiny.toml; "
               "echo EXITED $?; sleep 60")
    env = {**os.environ, "TERM": "xterm-256color"}
    subprocess.run([*tmux, "new-session", "-d", "-s", session, "-x", "100", "-y", "30", command], check=True, env=env,
                   cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        screen = _wait_for(tmux, session, "layer 0 of 2 · head 0 of 4")
        assert "tiny · layer 0 · head 0" in screen and "←→ layer" in screen
        subprocess.run([*tmux, "send-keys", "-t", session, "Right"], check=True)
        screen = _wait_for(tmux, session, "layer 1 of 2")
        assert "tiny · layer 1 · head 0" in screen
        subprocess.run([*tmux, "send-keys", "-t", session, "2"], check=True)
        screen = _wait_for(tmux, session, "every head · every layer")
        subprocess.run([*tmux, "send-keys", "-t", session, leave], check=True)
        screen = _wait_for(tmux, session, "EXITED")
        assert "EXITED 0" in screen and "every head" not in screen  # the app's screen is gone: the shell's is back
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)


def test_with_no_color_the_real_command_draws_shades_and_exits_cleanly():
    """`NO_COLOR=1 attnviz tui` crashed in Textual's monochrome filter (a traceback, then exit 0): the grid is drawn
    in shade characters with its scale, and q leaves with exit 0 and nothing on stderr."""
    session = f"attnviz-{uuid.uuid4().hex[:8]}"
    tmux = [_require_tmux(), "-L", session]
    command = (f"NO_COLOR=1 {sys.executable} -m attnviz tui 'The cat sat on the mat.' --model sample_configs/tiny.toml; "
               "echo EXITED $?; sleep 60")
    env = {**os.environ, "TERM": "xterm-256color"}
    subprocess.run([*tmux, "new-session", "-d", "-s", session, "-x", "100", "-y", "30", command], check=True, env=env,
                   cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        screen = _wait_for(tmux, session, "scale ' '")
        assert "█" in screen and "rows: queries" in screen
        subprocess.run([*tmux, "send-keys", "-t", session, "q"], check=True)
        screen = _wait_for(tmux, session, "EXITED")
        assert "EXITED 0" in screen  # what the app printed on leaving (a traceback) stays on the shell's screen:
        assert "Traceback" not in screen and "Error" not in screen and "attnviz: error" not in screen, screen
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)


def test_without_a_terminal_the_command_says_so_instead_of_waiting(tmp_path):
    """With its output piped, `attnviz tui` drew once and never exited: one line, exit 2, at once."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, "-m", "attnviz", "tui", "The cat sat.", "--model", "sample_configs/tiny.toml"],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, cwd=root, timeout=120)
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert done.stderr.count("\n") == 1 and "runs in a terminal" in done.stderr, done.stderr
