"""export --backend ray on a local Ray cluster of 2 CPUs: the same files as a local run, byte for byte,
a failing text recorded and the run going on, resume and the manifest kept, progress fed per item."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")  # the test extra installs it; test_ci_installs_ray keeps that true

TEXTS = ["the cat sat on the mat .", "a dog ran to the cat", " ".join(["cat"] * 400), "birds sing",
         "the dog sat on the mat again ."]


def test_ci_installs_ray():
    extras = Path(__file__).resolve().parent.parent.joinpath("pyproject.toml").read_text(encoding="utf-8")
    assert "ray" in extras.split("test = [", 1)[1].split("]", 1)[0]


@pytest.fixture
def cluster(ray_cluster):
    return ray_cluster


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def test_ray_gives_the_files_of_a_local_run(cluster, run_cli, tmp_path, tiny_hf):
    """The same blocks through the same code on two actors: the manifest, Parquet parts and tables, npz and
    JSON equal a local run's byte for byte; the too-long text fails in both and the run goes on; the
    progress callback hears every item as its block comes back. (Which blocks a rerun skips is decided
    before either backend runs: test_export.py and test_parquet.py hold resume.)

    Asked for 50 jobs on the cluster's 2 CPUs, it says so and runs 2 actors: --jobs past the cluster's CPUs once
    handed blocks to actors that could never be placed (3 blocks here: a hang at the third)."""
    from attnviz.errors import AttnvizWarning
    from attnviz.export import build_settings, run_export

    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    local, on_ray = tmp_path / "local", tmp_path / "ray"
    done = run_cli("export", str(texts), "--model", tiny_hf["gpt2"], "--formats", "parquet,json,npz", "--batch-size",
                   "2", "--quiet", "--out", str(local))
    assert done.exit_code == 1 and "1 of 5 items failed" in done.stderr, done.stderr
    settings = build_settings(None, {"model": tiny_hf["gpt2"], "formats": "parquet,json,npz", "batch_size": 2,
                                     "backend": "ray", "jobs": 50})
    ticks: list[int] = []
    with pytest.warns(AttnvizWarning, match="is more than the Ray cluster's 2 CPUs: at most 2 actors run"):
        summary = run_export(str(texts), on_ray, settings, on_start=lambda total, already: ticks.append(-total),
                             on_item=lambda: ticks.append(1))
    assert ticks == [-5, 1, 1, 1, 1, 1] and summary.exported == 4 and [i for i, _ in summary.failed] == [2]
    assert _tree(local) == _tree(on_ray)


def test_ray_errors_are_one_line(run_cli, tmp_path, tiny_hf, monkeypatch):
    texts = tmp_path / "texts.txt"
    texts.write_text("one text\n", encoding="utf-8")
    base = ["export", str(texts), "--out", str(tmp_path / "o"), "--formats", "json"]
    wrong = run_cli(*base, "--ray-address", "auto")
    assert wrong.exit_code == 2 and "--ray-address names a Ray cluster; it goes with --backend ray" in wrong.stderr
    nowhere = run_cli(*base, "--backend", "ray", "--ray-address", "127.0.0.1:1")  # refused at once, no retries
    assert nowhere.exit_code == 2 and "cannot reach the Ray cluster at --ray-address 127.0.0.1:1" in nowhere.stderr
    assert len(nowhere.stderr.strip().splitlines()) == 1, nowhere.stderr
    unknown = run_cli(*base, "--backend", "spark")
    assert unknown.exit_code == 2 and "--backend 'spark': use local or ray" in unknown.stderr
    from conftest import refuse_import

    refuse_import(monkeypatch, "ray")
    missing = run_cli(*base, "--backend", "ray")
    assert missing.exit_code == 2 and "pip install ray (or pip install -e '.[ray]' in attnviz's clone)" in missing.stderr


def test_an_address_that_is_not_ray_is_refused_quickly(run_cli, tmp_path, monkeypatch):
    """A port that answers but is not Ray (an HTTP server; a server that never speaks) once made Ray retry
    past 120 s with a warning every 5 s. (The silent one is refused when its time to answer is up: half a
    second here, not the 3 s a real address gets.)"""
    import socket
    import threading

    from attnviz.export import ray_backend

    monkeypatch.setattr(ray_backend, "REPLY_SECONDS", 0.5)

    texts = tmp_path / "texts.txt"
    texts.write_text("one text\n", encoding="utf-8")
    for reply in (b"HTTP/1.1 400 Bad Request\r\n\r\n", None):
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen(4)

        def answer(server=server, reply=reply):
            with server:
                conn, _ = server.accept()
                with conn:
                    conn.recv(100)
                    if reply:
                        conn.sendall(reply)
                    else:
                        conn.recv(100)  # silent until the client gives up

        threading.Thread(target=answer, daemon=True).start()
        address = f"127.0.0.1:{server.getsockname()[1]}"
        r = run_cli("export", str(texts), "--out", str(tmp_path / "o"), "--formats", "json", "--backend", "ray",
                    "--ray-address", address)
        assert r.exit_code == 2 and "not as a Ray head node" in r.stderr and r.stderr.count("\n") == 1, r.stderr


def test_align_heads_on_ray_finds_what_a_local_run_finds(cluster, run_cli, tmp_path):
    """align-heads with --backend ray: each clip read on one of two actors (a model each), the search the same as a
    local run's, number for number; a clip named twice, three clips, the planted head first."""
    import shutil

    root = Path(__file__).resolve().parent.parent
    folder = tmp_path / "clips"
    folder.mkdir()
    for name in ("a", "b", "c"):
        shutil.copy(root / "examples" / "organism_whisper.flac", folder / f"{name}.flac")
        shutil.copy(root / "examples" / "organism_whisper.csv", folder / f"{name}.csv")
    organism = str(root / "sample_configs" / "organism_whisper.toml")
    local = run_cli("align-heads", str(folder), "--model", organism, "--format", "json")
    on_ray = run_cli("align-heads", str(folder), "--model", organism, "--format", "json", "--backend", "ray",
                     "--jobs", "2")
    assert local.exit_code == 0 and on_ray.exit_code == 0, local.stderr + on_ray.stderr
    found, again = json.loads(local.stdout), json.loads(on_ray.stdout)
    assert found == again and found["chosen"][0] == [1, 0] and len(found["clips"]) == 3
    wrong = run_cli("align-heads", str(folder), "--model", organism, "--backend", "local", "--ray-address", "auto")
    assert wrong.exit_code != 0 and wrong.stderr.count("\n") == 1 and "--backend ray" in wrong.stderr, wrong.stderr
