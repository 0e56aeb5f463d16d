"""Issue 12 on export: bounded work for small inputs, no silent corruption, nothing lost on failure,
nothing read or written outside --out. Each test failed before its fix."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import TINY

from attnviz.export.lock import folder_lock
from attnviz.export.settings import build_settings

TEXTS = ["the cat sat on the mat", "a dog ran after the cat", "the bird sang"]


def _texts(tmp_path: Path, lines: list[str] = TEXTS) -> Path:
    path = tmp_path / "texts.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _export(run_cli, tmp_path: Path, out: Path, *extra: str):
    return run_cli("export", str(_texts(tmp_path)), "--out", str(out), "--model", TINY, "--formats", "npz,json",
                   "--jobs", "1", "--quiet", *extra)


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def test_huge_layer_and_head_ranges_are_refused_before_they_are_expanded(run_cli, tmp_path):
    started = time.monotonic()
    for option, value in (("--layer", "0-100000000"), ("--head", "0-10000000000"), ("--layer", "5,99999")):
        r = _export(run_cli, tmp_path, tmp_path / "o", option, value)
        assert r.exit_code == 2 and "no model has more than 10,000" in r.stderr, r.stderr
    assert time.monotonic() - started < 30  # (it took 27 s and 8 GB each; this bound only catches a return of that)
    assert build_settings(None, {"layers": "0-3,5"}).layers == (0, 1, 2, 3, 5)


def test_a_second_export_with_other_settings_is_refused_while_one_writes(run_cli, tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    other = build_settings(None, {"model": TINY, "formats": "npz,json", "layers": "1"})
    with folder_lock(out, f"{other.fingerprint()}/3"):  # an export with --layer 1 is writing
        r = _export(run_cli, tmp_path, out, "--layer", "0")
        assert r.exit_code == 1 and "another attnviz export" in r.stderr and "is writing to" in r.stderr
        assert not (out / "manifest.jsonl").exists()
    r = _export(run_cli, tmp_path, out, "--layer", "0")  # once it is done (or killed), this one runs
    assert r.exit_code == 0, r.stderr
    assert not list(out.glob(".attnviz*")), "the lock files go with the last writer"


def test_resume_trusts_only_files_of_the_recorded_size(run_cli, tmp_path):
    out = tmp_path / "o"
    assert _export(run_cli, tmp_path, out).exit_code == 0
    clean = _tree(out)
    entry = json.loads((out / "manifest.jsonl").read_text().splitlines()[1])
    assert entry["sizes"] == [(out / name).stat().st_size for name in entry["files"]]
    npz = out / entry["files"][0]
    npz.write_bytes(npz.read_bytes()[:100])  # damaged after the run
    r = run_cli("export", str(_texts(tmp_path)), "--out", str(out), "--model", TINY, "--formats", "npz,json",
                "--jobs", "1")
    assert r.exit_code == 0 and "1 exported, 2 already done" in r.stdout, r.stdout
    assert _tree(out) == clean


def test_a_broken_manifest_entry_is_redone_not_a_crash(run_cli, tmp_path):
    out = tmp_path / "o"
    assert _export(run_cli, tmp_path, out).exit_code == 0
    clean = _tree(out)
    lines = (out / "manifest.jsonl").read_text().splitlines()
    broken = {**json.loads(lines[0]), "files": 5}
    (out / "manifest.jsonl").write_text("\n".join([json.dumps(broken), *lines[1:]]) + "\n")
    r = _export(run_cli, tmp_path, out)
    assert r.exit_code == 0, r.stderr
    assert _tree(out) == clean


def test_a_linked_journal_is_never_written_through(run_cli, tmp_path):
    out, outside = tmp_path / "o", tmp_path / "outside.txt"
    out.mkdir()
    outside.write_text("precious\n")
    (out / "manifest.jsonl.journal").symlink_to(outside)
    r = _export(run_cli, tmp_path, out)
    assert r.exit_code == 1 and "symbolic link" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert outside.read_text() == "precious\n"


def test_a_failed_image_write_is_the_items_failure_on_every_path(run_cli, tmp_path, monkeypatch):
    """--jobs 1 and --style tiles draw in the main process: a full disk there fails the item, recorded,
    and the run goes on, as with drawing processes."""
    from attnviz.errors import RenderError
    from attnviz.export import blocks  # where a block draws in the main process

    real = blocks.render_task

    def full_disk(view, path, style="figure"):
        if "000001-" in Path(path).name:
            raise RenderError(f"cannot write {path}: No space left on device; check free space and permissions")
        return real(view, path, style)

    monkeypatch.setattr(blocks, "render_task", full_disk)
    for style in ("tiles", "figure"):
        out = tmp_path / style
        r = run_cli("export", str(_texts(tmp_path)), "--out", str(out), "--model", TINY, "--formats", "png,json",
                    "--layer", "0", "--jobs", "1", "--style", style, "--quiet")
        assert r.exit_code == 1 and "1 of 3 items failed" in r.stderr, r.stderr
        entries = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
        assert [e["status"] for e in entries] == ["ok", "failed", "ok"]
        assert "No space left" in entries[1]["error"]
        assert not list(out.glob("000001-*")), "the failed item leaves no file behind"


# --- merge ---------------------------------------------------------------------------------------


def _shards(run_cli, tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "a", tmp_path / "b"
    for k, folder in ((1, a), (2, b)):
        r = _export(run_cli, tmp_path, folder, "--shard", f"{k}/2", "--batch-size", "1")
        assert r.exit_code == 0, r.stderr
    return a, b


def test_merge_refuses_to_overwrite_an_existing_export(run_cli, tmp_path):
    a, b = _shards(run_cli, tmp_path)
    existing = tmp_path / "existing"
    assert _export(run_cli, tmp_path, existing, "--layer", "1").exit_code == 0
    before = _tree(existing)
    r = run_cli("export", "--merge", str(a), str(b), "--out", str(existing))
    assert r.exit_code == 1 and "already holds an export" in r.stderr
    assert _tree(existing) == before


def test_merge_is_all_or_nothing_and_never_follows_links(run_cli, tmp_path):
    a, b = _shards(run_cli, tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("outside the shard")
    victim = next(b.glob("*.npz"))
    victim.unlink()
    victim.symlink_to(secret)
    out = tmp_path / "merged"
    r = run_cli("export", "--merge", str(a), str(b), "--out", str(out))
    assert r.exit_code == 1 and "symbolic link" in r.stderr
    assert not out.exists() or not any(out.iterdir()), "nothing is copied when the merge is refused"
    victim.unlink()
    r = run_cli("export", "--merge", str(a), str(b), "--out", str(out))
    assert r.exit_code == 1 and "does not have" in r.stderr  # listed but missing: refused before any copy
    assert not out.exists() or not any(out.iterdir())


def test_merge_refuses_entries_attnviz_did_not_write(run_cli, tmp_path):
    good = {"index": 0, "hash": "h", "status": "ok", "settings": "s", "of": 1, "files": []}
    for name, entries, expected in (
        ("twice", [good, {**good, "hash": "other"}], "appears twice with different texts"),
        ("list-hash", [{**good, "hash": ["h"]}], "'hash' is a list"),
        ("huge", [{**good, "of": 10_000_000_000}], "cover 1 of 10000000000 items"),
        ("deep", None, "not an entry attnviz wrote"),
    ):
        folder = tmp_path / name
        folder.mkdir()
        text = "[" * 100_000 + "]" * 100_000 + "\n" if entries is None else "".join(json.dumps(e) + "\n" for e in entries)
        (folder / "manifest.1-of-1.jsonl").write_text(text)
        r = run_cli("export", "--merge", str(folder), "--out", str(tmp_path / f"m-{name}"))
        assert r.exit_code == 1 and expected in r.stderr, (name, r.stderr)


def test_no_drawing_process_outlives_a_killed_export(tmp_path):
    """SIGKILL the parent while its drawing processes work: they exit too, within seconds."""
    texts = _texts(tmp_path, [f"sentence number {i} about a cat" for i in range(12)])
    proc = subprocess.Popen([sys.executable, "-m", "attnviz", "export", str(texts), "--out", str(tmp_path / "o"),
                             "--model", TINY, "--formats", "png", "--jobs", "2", "--batch-size", "1", "--quiet"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    children: set[int] = set()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(children) < 2 and proc.poll() is None:
        children = _children(proc.pid)
        time.sleep(0.05)
    assert len(children) >= 2, "the drawing processes never started"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(_alive(pid) for pid in children):
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in children), "a drawing process outlived its parent"


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found.update(int(p) for p in (task / "children").read_text().split())
        except OSError:
            continue
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie waiting for a reaper is dead for our purpose
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return False


def test_links_planted_at_output_names_are_replaced_not_written_through(run_cli, tmp_path):
    out, outside = tmp_path / "o", tmp_path / "outside.txt"
    out.mkdir()
    outside.write_text("precious\n")
    (out / "manifest.jsonl").symlink_to(outside)
    r = _export(run_cli, tmp_path, out)
    assert r.exit_code == 1 and "manifest.jsonl is a symbolic link" in r.stderr  # never read through either
    (out / "manifest.jsonl").unlink()
    for name in ("000000-the-cat-sat-on-the-mat.npz", "000000-the-cat-sat-on-the-mat.stats.json"):
        (out / name).symlink_to(outside)
    r = _export(run_cli, tmp_path, out)
    assert r.exit_code == 0, r.stderr
    assert outside.read_text() == "precious\n"
    assert not any(p.is_symlink() for p in out.iterdir())
