"""attnviz export: outputs, manifest, resume after SIGKILL, failures, shards and merge, input formats."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from processes import interruptible

from attnviz.export.items import Item, blocks, read_items, slug
from attnviz.result import AttentionResult

SENTENCES = [
    "The cat sat on the mat.",
    "Attention is all you need.",
    "注意力机制很重要。",
    "A quick brown fox jumps over the lazy dog.",
    "Colorless green ideas sleep furiously.",
    "She sells sea shells by the sea shore.",
]


def _texts(tmp_path: Path, lines: list[str], name: str = "texts.txt") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def test_export_writes_images_npz_json_and_manifest(run_cli, tmp_path):
    out = tmp_path / "out"
    # Tiles: the same files, fast (labelled figures are drawn by the SIGKILL, Ctrl-C and README tests).
    r = run_cli("export", str(_texts(tmp_path, SENTENCES[:3])), "--out", str(out), "--layer", "0,5", "--jobs", "1",
                "--style", "tiles")
    assert r.exit_code == 0, r.stderr
    entries = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    assert [e["index"] for e in entries] == [0, 1, 2] and all(e["status"] == "ok" for e in entries)
    first = entries[0]
    assert first["hash"] == Item(0, SENTENCES[0]).hash
    assert sorted(first["files"]) == sorted([
        "000000-the-cat-sat-on-the-mat.npz", "000000-the-cat-sat-on-the-mat.stats.json",
        "000000-the-cat-sat-on-the-mat.L0.png", "000000-the-cat-sat-on-the-mat.L5.png",
    ])
    result = AttentionResult.load(out / "000000-the-cat-sat-on-the-mat.npz")
    assert result.attentions.shape[:2] == (2, 12) and result.metadata["layers"] == [0, 5]
    assert result.tokens[0] == "[CLS]"
    stats = json.loads((out / "000000-the-cat-sat-on-the-mat.stats.json").read_text())
    assert len(stats["heads"]) == 24 and {row["layer"] for row in stats["heads"]} == {0, 5}
    assert entries[2]["files"][0].startswith("000002-text")  # no ASCII letters: a neutral slug


def test_export_numbers_equal_the_text_alone_and_images_equal_heatmap_on_the_same_path(run_cli, tmp_path):
    """What is promised: an item of a padded batch has the numbers of the text alone, to 1e-5 (padding
    changes matmul blocking, so the last bits may differ on another CPU); byte-identical images only
    where the computation is the same (batch size 1 against the text alone, on one machine)."""
    out = tmp_path / "out"
    r = run_cli("export", str(_texts(tmp_path, SENTENCES[:2])), "--out", str(out), "--layer", "3",
                "--formats", "npz", "--batch-size", "2", "--quiet")
    assert r.exit_code == 0, r.stderr
    batched = AttentionResult.load(out / "000001-attention-is-all-you-need.npz")
    import attnviz

    alone = attnviz.extract(SENTENCES[1], layers=[3])
    assert batched.tokens == alone.tokens
    assert torch.allclose(batched.attentions, alone.attentions, atol=1e-5)
    one = tmp_path / "one"
    r = run_cli("export", str(_texts(tmp_path, SENTENCES[:1])), "--out", str(one), "--layer", "2", "--head", "4",
                "--formats", "png", "--batch-size", "1", "--jobs", "1", "--quiet")
    assert r.exit_code == 0, r.stderr
    head = tmp_path / "head.png"
    assert run_cli("heatmap", SENTENCES[0], "--layer", "2", "--head", "4", "--out", str(head)).exit_code == 0
    # The same figure: same size, and pixels equal but for float noise (on another CPU the two paths
    # may round a weight differently by 1e-7, which can move a cell by one colour step).
    from matplotlib import image

    exported, drawn = image.imread(one / "000000-the-cat-sat-on-the-mat.L2H4.png"), image.imread(head)
    assert exported.shape == drawn.shape
    assert np.abs(exported - drawn).mean() < 1e-3 and (np.abs(exported - drawn) > 0.02).mean() < 1e-3


def test_rerun_skips_finished_items_and_redoes_changed_ones(run_cli, tmp_path):
    out = tmp_path / "out"
    texts = _texts(tmp_path, SENTENCES[:3])
    args = ["export", str(texts), "--out", str(out), "--layer", "0", "--formats", "npz,json", "--jobs", "1"]
    assert run_cli(*args).exit_code == 0
    again = run_cli(*args)
    assert "0 exported, 3 already done" in again.stdout
    _texts(tmp_path, [SENTENCES[0], "A changed second text.", SENTENCES[2]])
    changed = run_cli(*args)
    assert "1 exported, 2 already done" in changed.stdout


def test_failed_items_are_recorded_and_the_run_goes_on(run_cli, tmp_path):
    long_text = " ".join(["word"] * 600)  # over MiniLM's 512 positions
    out = tmp_path / "out"
    r = run_cli("export", str(_texts(tmp_path, [SENTENCES[0], long_text, SENTENCES[1]])), "--out", str(out),
                "--layer", "0", "--formats", "json", "--jobs", "1")
    assert r.exit_code == 1
    assert r.stderr.startswith("attnviz: error: 1 of 3 items failed (2 exported, 0 already done)")
    assert "takes at most 512" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    entries = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    assert [e["status"] for e in entries] == ["ok", "failed", "ok"]
    assert "shorten it, or pass --truncate" in r.stderr  # the command speaks in flags,
    assert "shorten it, or pass truncate=True" in entries[1]["error"]  # the manifest in the library's terms


def _export_process(args: list[str], out: Path) -> int:
    """The export as a user runs it: a fresh process. The reference runs of the two tests below are
    processes too, so they compare what users get, not the state a test runner's process has
    accumulated (under pytest-xdist, an in-process run once drew a CJK label differently)."""
    return subprocess.run([sys.executable, "-m", "attnviz", "export", *args, "--out", str(out)],
                          capture_output=True, text=True, timeout=300).returncode


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> tuple[list[str], dict[str, bytes]]:
    """The arguments of an export with drawing processes at work, and the files of a run of it that
    was never interrupted (a fresh process): what the interrupted runs below must end with."""
    folder = tmp_path_factory.mktemp("uninterrupted")
    texts = _texts(folder, SENTENCES)
    args = [str(texts), "--layer", "0", "--formats", "png,npz,json", "--batch-size", "1", "--jobs", "2", "--quiet"]
    assert _export_process(args, folder / "clean") == 0
    return args, _tree(folder / "clean")


def test_two_shards_merged_equal_one_run(run_cli, tmp_path):
    texts = _texts(tmp_path, SENTENCES)
    common = [str(texts), "--layer", "1", "--formats", "npz,json", "--jobs", "1", "--batch-size", "2", "--quiet"]
    whole, a, b, merged = (tmp_path / n for n in ("whole", "a", "b", "merged"))
    assert run_cli("export", *common, "--out", str(whole)).exit_code == 0
    assert run_cli("export", *common, "--shard", "1/2", "--out", str(a)).exit_code == 0
    assert run_cli("export", *common, "--shard", "2/2", "--out", str(b)).exit_code == 0
    assert (a / "manifest.1-of-2.jsonl").exists() and (b / "manifest.2-of-2.jsonl").exists()
    r = run_cli("export", "--merge", str(a), "--merge", str(b), "--out", str(merged))
    assert r.exit_code == 0, r.stderr
    assert _tree(merged) == _tree(whole)


def test_merge_refuses_an_unfinished_shard(run_cli, tmp_path):
    folder = tmp_path / "shard"
    folder.mkdir()
    (folder / "manifest.1-of-2.jsonl.journal").write_text("")
    r = run_cli("export", "--merge", str(folder), "--out", str(tmp_path / "m"))
    assert r.exit_code == 1 and "shows an unfinished run; rerun that shard" in r.stderr


def test_sharding_is_deterministic_and_complete():
    items = [Item(i, f"t{i}") for i in range(10)]
    parts = [blocks(items, 2, k, 3) for k in (1, 2, 3)]  # blocks [0,1] [2,3] [4,5] [6,7] [8,9]
    assert sorted(i.index for p in parts for block in p for i in block) == list(range(10))
    assert [[i.index for i in block] for block in parts[1]] == [[2, 3], [8, 9]]
    assert blocks(items, 4) == [items[0:4], items[4:8], items[8:10]]


def test_slugs_never_escape_the_folder():
    for text in ["../../etc/passwd", "/abs/path", "..", "C:\\Windows\\x", "a/b\\c", "\x00", "ünïcödé ok"]:
        name = slug(text)
        assert name and all(ch.isascii() and (ch.isalnum() or ch == "-") for ch in name)
        assert Item(3, text).stem.startswith("000003-") and "/" not in Item(3, text).stem
    assert slug("ünïcödé ok") == "unicode-ok"
    assert len(slug("word " * 50)) <= 32


def test_inputs_jsonl_csv_and_stdin(run_cli, tmp_path):
    jsonl = tmp_path / "x.jsonl"
    jsonl.write_text('{"sentence": "one"}\n\n{"sentence": "two", "id": 5}\n')
    assert [i.text for i in read_items(str(jsonl), field="sentence")] == ["one", "two"]
    csv_path = tmp_path / "x.csv"
    csv_path.write_text('id,body\n1,"hello, world"\n2,second\n')
    assert [i.text for i in read_items(str(csv_path), column="body")] == ["hello, world", "second"]
    out = tmp_path / "out"
    r = run_cli("export", "-", "--out", str(out), "--layer", "0", "--formats", "json", "--jobs", "1",
                input="from stdin\n")
    assert r.exit_code == 0, r.stderr
    assert (out / "000000-from-stdin.stats.json").exists()


@pytest.mark.parametrize(
    ("content", "name", "flags", "expected"),
    [
        ('{"text": "ok"}\nnot json\n', "x.jsonl", [], "line 2 is not JSON"),
        ('{"body": "x"}\n', "x.jsonl", [], "line 1 has no field 'text' (body); choose it with --field"),
        ("a,b\n1,2\n", "x.csv", ["--column", "c"], "has no column 'c' (columns: a, b)"),
        ("text\n", "x.txt", ["--shard", "3/2"], "--shard 3/2: K must be between 1 and N"),
        ("text\n", "x.txt", ["--batch-size", "0"], "--batch-size 0 must be at least 1"),
        ("text\n", "x.txt", ["--formats", "gif"], "--formats 'gif': use some of png, svg, pdf, html, npz, json"),
        ("text\n", "x.txt", ["--layer", "0,99"], "--layer 99 is out of range"),  # export's own flag
    ],
)
def test_export_input_errors(run_cli, tmp_path, content, name, flags, expected):
    path = tmp_path / name
    path.write_text(content)
    r = run_cli("export", str(path), "--out", str(tmp_path / "out"), "--jobs", "1", *flags)
    assert r.exit_code in (1, 2), r.stdout
    assert expected in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_config_file_and_flags_override_it(run_cli, tmp_path):
    config = tmp_path / "batch.toml"
    config.write_text('[export]\nlayers = "2"\nformats = ["npz"]\nfloat16 = true\njobs = 1\n')
    out = tmp_path / "out"
    r = run_cli("export", str(_texts(tmp_path, SENTENCES[:1])), "--out", str(out), "--config", str(config),
                "--layer", "4")
    assert r.exit_code == 0, r.stderr
    data = np.load(out / "000000-the-cat-sat-on-the-mat.npz")
    assert data["attentions"].dtype == np.float16 and data["attentions"].shape[0] == 1
    assert AttentionResult.load(out / "000000-the-cat-sat-on-the-mat.npz").metadata["layers"] == [4]
    bad = tmp_path / "bad.toml"
    bad.write_text("[export]\nlayerz = 1\n")
    r = run_cli("export", str(_texts(tmp_path, SENTENCES[:1])), "--out", str(out), "--config", str(bad))
    assert r.exit_code == 1 and "unknown key 'layerz'" in r.stderr


def test_sample_batch_config_documents_every_option():
    from dataclasses import fields

    from attnviz.export import ExportSettings, build_settings

    path = Path(__file__).resolve().parent.parent / "sample_configs" / "batch.toml"
    text = path.read_text()
    for f in fields(ExportSettings):
        assert f"{f.name} =" in text, f"sample_configs/batch.toml does not document {f.name}"
    assert build_settings(path, {}) == build_settings(None, {})  # the sample shows the defaults


def _run_in_a_terminal(commands: list[list[str]]) -> list[str]:
    """Run attnviz ``commands`` in one process with a pseudo-terminal as stdout, as a person at a
    terminal would; return what each drew."""
    import pty

    from processes import SEPARATOR, each_command

    argv = each_command(commands)
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        os.execvpe(argv[0], argv, {**os.environ, "COLUMNS": "100"})
    chunks = []
    while True:
        try:
            data = os.read(fd, 4096)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    os.waitpid(pid, 0)
    return b"".join(chunks).decode("utf-8", "replace").split(SEPARATOR)[: len(commands)]


def test_progress_bar_at_a_terminal_and_not_otherwise(run_cli, tmp_path):
    texts = _texts(tmp_path, SENTENCES[:2])
    common = ["export", str(texts), "--layer", "0", "--formats", "json", "--jobs", "1"]
    shown, quiet = _run_in_a_terminal([[*common, "--out", str(tmp_path / "a")],
                                       [*common, "--out", str(tmp_path / "b"), "--quiet"]])
    assert "exporting" in shown and "items/s" in shown and "2/2" in shown
    assert "items/s" not in quiet
    piped = run_cli("export", str(texts), "--out", str(tmp_path / "c"), "--layer", "0", "--formats", "json")
    assert "items/s" not in piped.stdout and "2 exported" in piped.stdout


def _wait_for_journal(path: Path, lines: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if path.exists() and len(path.read_text().splitlines()) >= lines:
            return
        time.sleep(0.05)


def test_ctrl_c_then_sigkill_then_rerun_is_byte_identical(uninterrupted, tmp_path):
    """Ctrl-C (SIGINT to the process group, drawing processes included) stops cleanly in one line; the
    rerun, killed with SIGKILL after it finished more items, leaves a journal and no manifest; a third
    run ends byte-identical to a run that was never interrupted (same batch size, same machine)."""
    args, clean = uninterrupted
    out = tmp_path / "out"
    journal = out / "manifest.jsonl.journal"
    command = [sys.executable, "-m", "attnviz", "export", *args, "--out", str(out)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=interruptible)
    _wait_for_journal(journal, 1, proc)
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole process group
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert err.strip().splitlines() == [
        f"attnviz: error: interrupted; what is finished is kept in {out}; rerun the same command to resume"
    ], err  # the whole of stderr: a line more (it failed once under load with 16) says what printed it
    stopped_at = len(journal.read_text().splitlines())
    assert stopped_at < len(SENTENCES) - 1, "the run was too near its end when it was stopped"
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_for_journal(journal, stopped_at + 1, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert journal.exists(), "the rerun finished before it could be killed"
    assert not (out / "manifest.jsonl").exists()
    assert _export_process(args, out) == 0
    assert _tree(out) == clean


def test_rerun_with_other_settings_redoes_the_items(run_cli, tmp_path):
    out = tmp_path / "out"
    texts = _texts(tmp_path, SENTENCES[:2])
    base = ["export", str(texts), "--out", str(out), "--jobs", "1", "--formats", "npz,json"]
    assert run_cli(*base, "--layer", "0").exit_code == 0
    r = run_cli(*base, "--layer", "0,1")
    assert "2 exported, 0 already done" in r.stdout
    assert AttentionResult.load(out / "000000-the-cat-sat-on-the-mat.npz").metadata["layers"] == [0, 1]


def _shard_folder(tmp_path: Path, name: str, entries: list[dict]) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "manifest.1-of-1.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries))
    return folder


def test_merge_never_writes_outside_out(run_cli, tmp_path):
    evil = {"index": 0, "hash": "h", "status": "ok", "settings": "s", "of": 1, "files": ["../../escaped.txt"]}
    folder = _shard_folder(tmp_path, "evil", [evil])
    (tmp_path / "escaped.txt").write_text("original")
    r = run_cli("export", "--merge", str(folder), "--out", str(tmp_path / "merged" / "deep"))
    assert r.exit_code == 1 and "is not an entry attnviz wrote" in r.stderr
    assert (tmp_path / "escaped.txt").read_text() == "original"


def test_merge_refuses_mixed_or_incomplete_shards(run_cli, tmp_path):
    ok = {"hash": "h", "status": "ok", "files": []}
    a = _shard_folder(tmp_path, "a", [{**ok, "index": 0, "settings": "one", "of": 2}])
    b = _shard_folder(tmp_path, "b", [{**ok, "index": 1, "settings": "two", "of": 2}])
    r = run_cli("export", "--merge", str(a), "--merge", str(b), "--out", str(tmp_path / "m"))
    assert r.exit_code == 1 and "other settings or another input" in r.stderr
    r = run_cli("export", "--merge", str(a), "--out", str(tmp_path / "m2"))
    assert r.exit_code == 1 and "cover 1 of 2 items" in r.stderr


def test_input_edge_cases(run_cli, tmp_path):
    bom = tmp_path / "bom.csv"
    bom.write_bytes("\ufefftext,id\nhello,1\n".encode())
    assert [i.text for i in read_items(str(bom))] == ["hello"]
    big = tmp_path / "big.csv"
    big.write_text("text\n" + '"' + "word " * 40000 + '"\n')
    assert len(read_items(str(big))[0].text) == 200000
    crlf = tmp_path / "crlf.txt"
    crlf.write_bytes(b"one\r\ntwo\r\n")
    assert [i.text for i in read_items(str(crlf))] == ["one", "two"]
    out = tmp_path / "out"
    r = run_cli("export", "-", "--field", "body", "--out", str(out), "--layer", "0", "--formats", "json",
                input='{"body": "from json"}\n')
    assert r.exit_code == 0, r.stderr
    assert (out / "000000-from-json.stats.json").exists()  # --field means JSONL, even on stdin


def test_tiles_are_the_colour_mapped_weights(run_cli, tmp_path):
    from PIL import Image

    from attnviz.render.colors import ColorScale
    from attnviz.render.tiles import tile_pixels
    from attnviz.render.view import matrix_view

    eye = np.stack([np.eye(3), np.full((3, 3), 1 / 3)])  # two panels
    view = matrix_view(eye, list("abc"), list("abc"), title="t", panel_titles=["", ""])
    pixels = tile_pixels(view)
    cell = 256 // 3
    assert pixels.shape == (3 * cell, 2 * 3 * cell + 2, 3)
    scale = ColorScale(0.0, 1.0)
    assert pixels[0, 0].tolist() == scale.rgb(np.array([1.0]))[0].tolist()  # a one on the diagonal
    assert pixels[0, cell].tolist() == scale.rgb(np.array([0.0]))[0].tolist()
    assert pixels[0, 3 * cell].tolist() == [255, 255, 255]  # the line between panels
    out = tmp_path / "out"
    r = run_cli("export", str(_texts(tmp_path, SENTENCES[:1])), "--out", str(out), "--layer", "0",
                "--formats", "png", "--style", "tiles")
    assert r.exit_code == 0, r.stderr
    with Image.open(out / "000000-the-cat-sat-on-the-mat.L0.png") as im:
        assert im.size[0] > 200 and im.mode == "RGB"
    r = run_cli("export", str(_texts(tmp_path, SENTENCES[:1])), "--out", str(out), "--formats", "svg",
                "--style", "tiles")
    assert r.exit_code == 2 and "--style tiles writes PNG only" in r.stderr


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="zombies are read from /proc (Linux)")
def test_a_dead_unreaped_writer_leaves_no_temporary(tmp_path):
    """A killed export's drawing process may stay a zombie (in a container whose PID 1 never reaps):
    it writes nothing more, so its temporary files are stale and a rerun removes them."""
    import time

    from attnviz.fileio import remove_stale_temporaries

    pid = os.fork()
    if pid == 0:
        os._exit(0)
    try:
        stale = tmp_path / f".000002-text.L0.png.{pid}.abcd.tmp.png"
        stale.write_bytes(b"")
        mine = tmp_path / f".000003-text.L0.png.{os.getppid()}.abcd.tmp.png"  # another live writer: kept
        mine.write_bytes(b"")
        for _ in range(100):  # until the child has exited (it is a zombie: not reaped yet)
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] == "Z":
                break
            time.sleep(0.01)
        assert remove_stale_temporaries(tmp_path) == 1
        assert not stale.exists() and mine.exists()
    finally:
        os.waitpid(pid, 0)


def test_an_abort_before_the_writer_thread_started_does_not_hang(tmp_path):
    """A Ctrl-C between making the npz writer's thread and starting it left a block pending that no thread would
    take: abort waited for ever (seen once in the suite: an export stuck in ResultWriter._stop after Ctrl-C)."""
    import threading

    from attnviz.result.writer import ResultWriter

    writer = ResultWriter.__new__(ResultWriter)
    writer._ready = threading.Condition()
    writer._pending = b"a block"
    writer._thread = threading.Thread(target=lambda: None)  # made, never started: as the interrupt left it
    writer._open = writer.archive = None
    writer.tmp = str(tmp_path / "partial.npz.tmp")
    done = threading.Event()
    threading.Thread(target=lambda: (writer.abort(), done.set()), daemon=True).start()
    assert done.wait(5), "abort hung waiting for a writer thread that never ran"
    assert writer._thread is None


def test_an_interrupted_wait_still_waits_for_the_layer_being_taken(monkeypatch):
    """Ctrl-C while the block waits for its layer thread: the layer stays pending, and settling waits for it before
    the block's files are aborted (aborting them under the thread left it waiting on a stopped npz writer, and the
    process hung at exit joining the thread)."""
    import threading
    from concurrent.futures import Future

    from attnviz.export.blocks import _Taker

    taker = _Taker()
    started, release, finished = threading.Event(), threading.Event(), threading.Event()

    def layer() -> None:
        started.set()
        release.wait(30)
        finished.set()

    taker.pending = taker.pool.submit(layer)
    assert started.wait(30)

    def interrupted(self, timeout=None):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(Future, "result", interrupted)
        with pytest.raises(KeyboardInterrupt):
            taker.finish()
    assert taker.pending is not None and not finished.is_set()
    threading.Thread(target=release.set).start()  # the layer ends on its own thread, while settle() waits
    taker.settle()
    assert finished.is_set() and taker.pending is None
    taker.close()
