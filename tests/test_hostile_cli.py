"""Issue 12 at the command line's edge: one line always, and nothing hostile reaches the terminal raw."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, TINY
from processes import interruptible

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
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "a\\nb.gif" in r.stderr
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
    """Ctrl-C while the modules are still importing, before any command runs: one line, exit 130.

    The delay counts from the moment attnviz's entry point is imported (``-X importtime`` reports each
    module as it finishes): before that, Python itself is starting and no program can catch Ctrl-C.
    Counted from the process's start, a busy machine once put 0.05 s inside Python's own start-up."""
    proc = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "attnviz", "heatmap", "the cat", "--model",
                             TINY], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=interruptible)
    for line in proc.stderr:  # "import time: self | cumulative | module", one line per module imported
        if line.rstrip().endswith("attnviz._entry"):
            break
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=60)
    err = "".join(line for line in rest.splitlines(keepends=True) if not line.startswith("import time:"))
    assert "Traceback" not in err, err
    if proc.returncode == 0:  # it finished first (a fast machine)
        return
    assert proc.returncode == 130 and err.startswith("attnviz: error: interrupted") and err.count("\n") == 1, \
        (proc.returncode, err)


def _hostile_config(tmp_path) -> str:
    """The tiny config under a name that holds ESC (``\\x1b[31m`` would turn the terminal red), a bidi
    override and markup."""
    text = (ROOT / "sample_configs" / "tiny.toml").read_text(encoding="utf-8")
    path = tmp_path / "hostile.toml"
    path.write_text(text.replace('name = "tiny"', 'name = "ti\\u001b[31m\\u202eny [bold]x"'), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("command", [["heatmap", "--layer", "0"], ["heatmap", "--layer", "0", "--head", "all"],
                                     ["heads"], ["rollout"], ["compare-heads"], ["explain"]])
def test_a_hostile_model_name_never_reaches_the_terminal_raw(run_cli, tmp_path, command):
    """Titles (model names) and tables are escaped like labels; explain's titles by the console itself."""
    r = run_cli(command[0], "the cat sat", "--model", _hostile_config(tmp_path), *command[1:], "--width", "120")
    assert r.exit_code == 0, r.stderr
    assert "\x1b" not in r.stdout and "\u202e" not in r.stdout
    assert "ti␛[31m<U+202E>ny [bold]x" in r.stdout


def test_the_console_escapes_what_reaches_it_another_way():
    from rich.text import Text

    from attnviz.cli.common import stdout_console

    console = stdout_console(80)
    with console.capture() as captured:
        console.print(Text("a\x1b[2Jb\u202ec\u2066d 👩\u200d💻"))
        console.print("two\nlines")
    assert captured.get() == "a␛[2Jb<U+202E>c<U+2066>d 👩\u200d💻\ntwo\nlines\n"


def test_a_hostile_out_name_is_escaped_in_the_wrote_line(run_cli, tmp_path):
    out = tmp_path / "o\x1b[1m\u202e.png"
    r = run_cli("heatmap", "the cat", "--model", TINY, "--layer", "0", "--out", str(out))
    assert r.exit_code == 0 and out.is_file(), r.stderr
    assert r.stdout == f"wrote {tmp_path}/o\\x1b[1m\\u202e.png\n"  # as an error names a path: escapes to retype


def test_a_warning_is_one_line(capsys):
    import warnings

    from attnviz.cli.common import cli_command
    from attnviz.errors import AttnvizWarning

    @cli_command
    def command() -> None:
        warnings.warn("label 'a\nb\x1b[31m' has no glyph", AttnvizWarning, stacklevel=1)

    command()
    assert capsys.readouterr().err == "attnviz: warning: label 'a\\nb\\x1b[31m' has no glyph\n"


def _run_entry(tmp_path, body: str, modules: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python -m`` a module that runs ``attnviz._entry.main`` with ``body`` as the command (``attnviz.cli``
    replaced), as the console script does; ``modules`` are written beside it to be imported."""
    import attnviz

    for name, text in (modules or {}).items():
        (tmp_path / f"{name}.py").write_text(text, encoding="utf-8")
    (tmp_path / "fake_attnviz.py").write_text(
        "import sys, types\n"
        "cli = types.ModuleType('attnviz.cli')\n"
        f"def main():\n{body}\n"
        "cli.main = main\n"
        "sys.modules['attnviz.cli'] = cli\n"
        "from attnviz._entry import main as entry\n"
        "entry()\n", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(Path(attnviz.__file__).parents[1])])}
    return subprocess.run([sys.executable, "-m", "fake_attnviz"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60, preexec_fn=interruptible)


SWALLOWS = """import os, signal
try:  # Ctrl-C while a library imports, and the library swallows the KeyboardInterrupt
    os.kill(os.getpid(), signal.SIGINT)
    for _ in range(10_000_000):
        pass
except BaseException:
    pass
"""


def test_ctrl_c_inside_an_import_stops_at_once(tmp_path):
    """A KeyboardInterrupt raised inside an import may be swallowed (the command then ran to the end,
    exit 0) or thrown through torch's C++ (abort, exit -6): Ctrl-C there ends the process at once."""
    r = _run_entry(tmp_path, "    import swallows\n    print('the command still ran')", {"swallows": SWALLOWS})
    assert (r.returncode, r.stderr, r.stdout) == (130, "attnviz: error: interrupted\n", "")


def test_ctrl_c_that_escaped_an_exec_still_exits_130(tmp_path):
    """A KeyboardInterrupt out of an ``exec`` of a string (dataclasses build methods so) set CPython's flag
    that makes ``python -m`` kill itself by SIGINT (exit -2) after the one line."""
    body = ("    exec('import os, signal\\nos.kill(os.getpid(), signal.SIGINT)\\nfor _ in range(10_000_000): pass')\n"
            "    print('not reached')")
    r = _run_entry(tmp_path, body)
    assert (r.returncode, r.stderr, r.stdout) == (130, "attnviz: error: interrupted\n", "")
