"""Issue 50 (round 5), items 5, 13 and 14: patterns' --minference and --duo follow the rules of every --out (never
a link, a pipe or a device replaced, one file per output), needle on an unreachable Ray address is one line in
bounded time (and SIGTERM stays attnviz's once Ray has started), and needle's picture and progress speak of
needle. Each test failed before its fix."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading

import copy_circuit as cc
import pytest
from conftest import TINY

SHORT = " ".join(cc.haystack().split()[:60])


@pytest.fixture(scope="module")
def circuit(tmp_path_factory, tiny_hf):
    """A causal model of 1,024 positions (tiny_hf's, built once per run: these checks never run it) and a haystack."""
    folder = tmp_path_factory.mktemp("round5_outputs")
    haystack = folder / "haystack.txt"
    haystack.write_text(cc.haystack(), encoding="utf-8")
    return tiny_hf["gpt2_long"], str(haystack)


def _one_line(r) -> str:
    assert r.exit_code != 0 and r.stderr.startswith("attnviz: error:") and r.stderr.count("\n") == 1, r.stderr
    assert "internal error" not in r.stderr, r.stderr
    return r.stderr


def _no_model_runs(monkeypatch):
    from attnviz.kv import patterns as kv_patterns

    def refused(*args, **kwargs):
        raise AssertionError("the model ran before the outputs were checked")

    monkeypatch.setattr(kv_patterns, "patterns", refused)


@pytest.mark.parametrize("option", ["--minference", "--duo", "--out"])
def test_patterns_outputs_never_replace_a_link_or_a_pipe(run_cli, circuit, tmp_path, monkeypatch, option):
    """`patterns --minference PATH` (and --duo) replaced a FIFO or a symbolic link at PATH with a regular file."""
    _no_model_runs(monkeypatch)
    outside = tmp_path / "outside.txt"
    outside.write_text("precious\n")
    link = tmp_path / "link.json"
    link.symlink_to(outside)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    for path, says in ((link, "symbolic link"), (fifo, "not a regular file")):
        r = run_cli("patterns", SHORT, "--model", circuit[0], "--budget", "8", option, str(path))
        assert says in _one_line(r), r.stderr
    assert link.is_symlink() and outside.read_text() == "precious\n"
    assert fifo.is_fifo()
    r = run_cli("patterns", SHORT, "--model", circuit[0], "--budget", "8", option, "/dev/null")
    assert r.exit_code != 0 and "/dev/null" in _one_line(r)


def test_every_out_refuses_a_link_and_a_pipe(run_cli, tmp_path):
    """The same rule for the older commands' --out (a config model: no checkpoint to load)."""
    outside = tmp_path / "outside.png"
    outside.write_bytes(b"precious")
    link = tmp_path / "link.png"
    link.symlink_to(outside)
    fifo = tmp_path / "fifo.png"
    os.mkfifo(fifo)
    for path, says in ((link, "symbolic link"), (fifo, "not a regular file")):
        r = run_cli("heatmap", "The cat sat.", "--model", TINY, "--out", str(path))
        assert says in _one_line(r)
    assert link.is_symlink() and outside.read_bytes() == b"precious" and fifo.is_fifo()


@pytest.mark.parametrize(("args", "says"), [
    (["--minference", "{x}.json", "--duo", "{x}.json"], "both --minference and --duo"),
    (["--out", "{x}.json", "--minference", "{x}.json"], "both --out and --minference"),
    (["--out", "{x}.tsv.csv", "--duo", "{dot}/{name}.tsv.csv"], "both --out and --duo"),
    (["--out", "{x}.csv", "--out", "{x}.csv"], "--out twice"),
])
def test_one_file_for_two_outputs_is_refused_before_the_model_runs(run_cli, circuit, tmp_path, monkeypatch, args,
                                                                   says):
    """`--minference X --duo X` and `--out X.json --minference X.json` silently kept only the second."""
    _no_model_runs(monkeypatch)
    x = tmp_path / "same"
    argv = [a.format(x=x, dot=f"{tmp_path}/.", name=x.name) for a in args]
    r = run_cli("patterns", SHORT, "--model", circuit[0], "--budget", "8", *argv)
    line = _one_line(r)
    assert r.exit_code == 2 and says in line and "its own file" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_distinct_regular_files_are_still_written_and_replaced(run_cli, circuit, tmp_path):
    config, tsv, table = tmp_path / "best.json", tmp_path / "heads.tsv", tmp_path / "rows.json"
    for path in (config, tsv, table):
        path.write_text("old\n")
    r = run_cli("patterns", SHORT, "--model", circuit[0], "--budget", "8", "--minference", str(config), "--duo",
                str(tsv), "--out", str(table), "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert len(json.loads(config.read_text())) == 2 and len(tsv.read_text().splitlines()) == 2
    assert json.loads(table.read_text())["budgets"] == [8]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_the_needle_picture_of_an_all_zero_grid_is_scaled_0_to_1(tmp_path, monkeypatch):
    """Every head scoring 0 drew a colour bar from 0 to 1e-9."""
    from matplotlib.figure import Figure

    from attnviz.render.needle import needle_figure

    tops: list[float] = []
    real = Figure.colorbar

    def colorbar(self, mappable, *args, **kwargs):
        tops.append(float(mappable.norm.vmax))
        return real(self, mappable, *args, **kwargs)

    monkeypatch.setattr(Figure, "colorbar", colorbar)
    needle_figure([[0.0, 0.0]], [100, 200], [0.5], [[0.0, 0.0], [0.0, 0.0]], title="t", path=tmp_path / "z.png")
    assert tops == [100.0, 1.0]  # the recall grid's bar in percent (as its cells), then the heads' scores, 0 to 1
    tops.clear()
    needle_figure([[1.0, 0.0]], [100, 200], [0.5], [[0.0, 0.4], [0.1, float("nan")]], title="t",
                  path=tmp_path / "s.png")
    assert tops == [100.0, pytest.approx(0.4)]  # scores drawn on their own range


def test_needles_progress_names_needle_not_export(run_cli, circuit, monkeypatch):
    """needle's progress bar said "exporting"."""
    from attnviz.render import progress

    monkeypatch.setattr(progress, "PLAIN_INTERVAL", 0.0)  # a plain line for every cell
    model, haystack = circuit
    argv = ["needle", "--model", model, "--haystack", haystack, "--needle", cc.NEEDLE, "--question", cc.QUESTION,
            "--lengths", "300", "--depths", "0,1", "-n", "4"]
    plain = run_cli(*argv)
    assert plain.exit_code == 0, plain.stderr
    lines = [line for line in plain.stderr.splitlines() if line.startswith("attnviz: needle")]
    assert [line.split(" cells")[0] for line in lines] == ["attnviz: needle 1/2", "attnviz: needle 2/2"], plain.stderr
    assert "export" not in plain.stderr and "cells/s" in lines[-1]
    bar = run_cli(*argv, env={"TTY_COMPATIBLE": "1"})
    assert bar.exit_code == 0, bar.stderr
    assert "needle" in bar.stderr and "2/2" in bar.stderr and "export" not in bar.stderr, bar.stderr


def _silent_server() -> tuple[str, threading.Event]:
    """A port that accepts a connection and never says a word (until ``done`` is set)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    done = threading.Event()

    def hold() -> None:
        with server:
            conn, _ = server.accept()
            with conn:
                done.wait(120)

    threading.Thread(target=hold, daemon=True).start()
    return f"127.0.0.1:{server.getsockname()[1]}", done


def test_needle_on_an_unreachable_ray_address_is_one_line_in_bounded_time(run_cli, circuit, monkeypatch):
    """`needle --backend ray --ray-address 127.0.0.1:1` waited 200 s and more without a word; a port that never
    answers is refused once its time to answer is up (3 s; 0.5 s here). The address is checked before Ray is imported,
    so this runs in the test's process with no Ray at all."""
    import time

    from attnviz import cluster

    monkeypatch.setattr(cluster, "REPLY_SECONDS", 0.5)
    model, _ = circuit
    silent, done = _silent_server()
    base = ["needle", "--model", model, "--lengths", "300", "--depths", "0", "--backend", "ray", "--ray-address"]
    try:
        began = time.monotonic()
        refused = run_cli(*base, "127.0.0.1:1")
        quiet = run_cli(*base, silent)
        took = time.monotonic() - began
    finally:
        done.set()
    assert refused.exit_code == 2 and refused.stderr.strip() == (
        "attnviz: error: cannot reach the Ray cluster at --ray-address 127.0.0.1:1: Connection refused; is a Ray head "
        "node running there?"), refused.stderr
    assert quiet.exit_code == 2 and quiet.stderr.strip().startswith(
        f"attnviz: error: --ray-address {silent} answers, but not as a Ray head node"), quiet.stderr
    assert quiet.stderr.strip().count("\n") == 0 and took < 60  # bounded (0.5 s to answer, the rest the model's load)


class _FakeRay:
    """As ``ray.init`` does: its own SIGTERM handler (``sys.exit(15)``) first; then, if told, a SIGTERM arrives
    while it starts."""

    def __init__(self, terminated_while_starting: bool = False) -> None:
        self.terminated_while_starting = terminated_while_starting
        self.shut_down = False

    def is_initialized(self) -> bool:
        return False

    def init(self, **kwargs) -> None:
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))
        if self.terminated_while_starting:
            os.kill(os.getpid(), signal.SIGTERM)  # Ray's handler runs at once: SystemExit(15) out of init

    def shutdown(self) -> None:
        self.shut_down = True


@pytest.fixture
def own_sigterm():
    """A SIGTERM handler of the test's own in place (as attnviz's is in a real run), put back after."""
    received: list[int] = []
    before = signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))
    yield received
    signal.signal(signal.SIGTERM, before)


def test_sigterm_stays_attnvizs_once_ray_has_started(own_sigterm):
    """ray.init put its own SIGTERM handler in place (sys.exit(15)): a SIGTERM during a Ray needle run exited 15
    without a line, after 24 s of Ray's shutdown."""
    from attnviz.cluster import start_ray

    mine = signal.getsignal(signal.SIGTERM)
    assert start_ray(_FakeRay(), "127.0.0.1:6379") is True
    assert signal.getsignal(signal.SIGTERM) is mine
    ray = _FakeRay(terminated_while_starting=True)
    with pytest.raises(SystemExit):
        start_ray(ray, "127.0.0.1:6379")
    assert own_sigterm == [signal.SIGTERM]  # handed on to attnviz's handler, which says it and exits 143
    assert signal.getsignal(signal.SIGTERM) is mine


def test_ctrl_c_during_an_import_says_what_the_run_kept(tmp_path):
    """A Ctrl-C that lands while a module imports (a lazy import in the middle of an export) ends the process at once;
    its line says what the run kept, as the line said after the blocks unwind does (the export's Ctrl-C test failed
    under load with a bare "interrupted")."""
    import subprocess
    import time

    from processes import interruptible

    ready = tmp_path / "ready"
    (tmp_path / "slowmod.py").write_text(f"import pathlib, time\npathlib.Path({str(ready)!r}).touch()\ntime.sleep(60)\n")
    code = ("import sys; sys.path.insert(0, sys.argv[1])\n"
            "from attnviz import interrupts\n"
            "interrupts.install_handlers()\n"
            "with interrupts.on_stop(note='what is finished is kept in OUT; rerun the same command to resume'):\n"
            "    import slowmod\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stderr=subprocess.PIPE, text=True,
                            preexec_fn=interruptible)
    deadline = time.monotonic() + 60
    while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)  # polling for the module's own sign that it is importing, not a fixed pause
    assert ready.exists(), proc.stderr.read() if proc.stderr else ""
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert err == "attnviz: error: interrupted; what is finished is kept in OUT; rerun the same command to resume\n"
