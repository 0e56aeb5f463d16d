"""Issue 26 (hostile inputs, round 3) on export, inputs, files and signals. Each test failed before its fix."""

from __future__ import annotations

from pathlib import Path

from conftest import TINY

from attnviz.export.items import input_fingerprint, read_items
from attnviz.export.lock import folder_lock
from attnviz.export.settings import build_settings


def _export(run_cli, source: Path, out: Path, *extra: str):
    return run_cli("export", str(source), "--out", str(out), "--model", TINY, "--formats", "json", "--jobs", "1",
                   "--quiet", *extra)


def test_two_exports_of_different_inputs_never_share_a_folder(run_cli, tmp_path):
    """Same settings and the same number of texts, different texts: the second is refused while the first writes."""
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_text("the cat sat\na dog ran\n", encoding="utf-8")
    second.write_text("birds sing\nfish swim\n", encoding="utf-8")
    out = tmp_path / "o"
    out.mkdir()
    settings = build_settings(None, {"model": TINY, "formats": "json", "jobs": 1})
    with folder_lock(out, f"{settings.fingerprint()}/{input_fingerprint(read_items(str(first)))}"):
        r = _export(run_cli, second, out)
        assert r.exit_code == 1 and "another attnviz export" in r.stderr, r.stderr
        assert not (out / "manifest.jsonl").exists()
        r = _export(run_cli, first, out)  # a shard or a rerun of the same input may join
        assert r.exit_code == 0, r.stderr
    assert input_fingerprint(read_items(str(first))) != input_fingerprint(read_items(str(second)))
