"""Issue 12 at the command line's edge: one line always, and nothing hostile reaches the terminal raw."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import TINY

from attnviz.labels import printable


def test_bidi_and_invisible_format_characters_are_shown_escaped(run_cli):
    assert printable("\u202eevil") == "<U+202E>evil"
    assert printable("a\u2066b\u200fc\u061c") == "a<U+2066>b<U+200F>c<U+061C>"
    assert printable("👩\u200d💻") == "👩\u200d💻"  # a joiner inside an emoji only shapes it
    r = run_cli("heatmap", "\u202eevil [bold]cat[/bold]", "--model", TINY, "--layer", "0", "--width", "120")
    assert r.exit_code == 0, r.stderr
    assert "\u202e" not in r.stdout and any(line.startswith("<U+202E>") for line in r.stdout.splitlines())
    r = run_cli("heads", "\u202eevil [bold]cat[/bold]", "--model", TINY, "--format", "table", "--width", "200")
    assert r.exit_code == 0 and "\u202e" not in r.stdout


def test_rich_markup_in_text_is_printed_as_it_is(run_cli):
    from attnviz.cli.common import stdout_console

    console = stdout_console(80)
    with console.capture() as captured:
        console.print("[red]x[/red] :smile:")
    assert captured.get().strip() == "[red]x[/red] :smile:"
    r = run_cli("heatmap", "[red]x[/red] cat", "--model", TINY, "--layer", "0", "--width", "120")
    assert r.exit_code == 0 and sum(line.lstrip().startswith("[") for line in r.stdout.splitlines()) >= 2


def test_a_tiny_columns_value_never_squeezes_the_output_below_20(run_cli):
    r = run_cli("heatmap", "the cat", "--model", TINY, "--layer", "0", env={"COLUMNS": "5"})
    assert r.exit_code == 0 and r.stdout.splitlines()[0].startswith("tiny · layer 0")


def test_huge_vmax_gives_a_short_legend(run_cli):
    r = run_cli("heatmap", "the cat", "--model", TINY, "--layer", "0", "--vmax", "1e308", "--width", "80",
                env={"NO_COLOR": "1"})
    assert r.exit_code == 0, r.stderr
    legend = next(line for line in r.stdout.splitlines() if line.startswith("scale"))
    assert len(legend) < 120 and "1e+308" in legend


def test_text_that_is_not_utf8_is_one_line_exit_2(run_cli):
    r = run_cli("heatmap", "The cat \udc80 sat", "--model", TINY)
    assert r.exit_code == 2 and "TEXT is not valid UTF-8 (character 9 is the byte 0x80)" in r.stderr
    r = run_cli("heads", "the cat", "--pair", "x\udcff", "--model", TINY)
    assert r.exit_code == 2 and "--pair is not valid UTF-8" in r.stderr


def test_control_characters_in_a_file_name_stay_on_one_line(run_cli, tmp_path):
    r = run_cli("heatmap", "the cat", "--model", TINY, "--out", str(tmp_path / "a\nb.gif"))
    assert r.exit_code == 1 and r.stderr.count("\n") == 1 and "a\\nb.gif" in r.stderr
    r = run_cli("heads", "--file", str(tmp_path / "x\ny\x1b[31m.txt"), "--model", TINY)
    assert r.exit_code == 1 and r.stderr.count("\n") == 1 and "\x1b" not in r.stderr, r.stderr


def test_a_read_only_out_file_is_a_named_error(run_cli, tmp_path, monkeypatch):
    target = tmp_path / "ro.png"
    target.write_bytes(b"keep")
    target.chmod(0o444)
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: (  # as for a user other than root
        False if str(p) == str(target) and mode & os.W_OK else real(p, mode, **kw)))
    r = run_cli("heatmap", "the cat", "--model", TINY, "--layer", "0", "--out", str(target))
    assert r.exit_code == 1 and "exists and is read-only" in r.stderr, r.stderr
    assert target.read_bytes() == b"keep"


@pytest.mark.parametrize("delay", [0.05, 0.15, 0.3, 0.6])
def test_ctrl_c_while_starting_is_one_line(delay):
    """Ctrl-C while the modules are still importing, before any command runs: one line, exit 130."""
    proc = subprocess.Popen([sys.executable, "-m", "attnviz", "heatmap", "the cat", "--model", TINY],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert "Traceback" not in err, err
    if proc.returncode == 0:  # it finished first (a fast machine)
        return
    assert proc.returncode == 130 and err.startswith("attnviz: error: interrupted") and err.count("\n") == 1, \
        (proc.returncode, err)
