"""``attnviz export CORPUS --model WHISPER`` (issue 61 item 1): a corpus of clips, each row's transcript teacher-forced
or the model's own; per clip its words' times (as ``align``), each cross-attention head's statistics over time (as
``heads --audio``), a PNG per decoder layer and the whole result, each equal to what the library computes alone; a
parquet table; resumable; a clip the model cannot hear fails alone; refusals in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from audio_models import CLIP, ORGANISM, TEXT

pytest.importorskip("soundfile")

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def corpus(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    shutil.copy(CLIP, folder / "a.flac")
    shutil.copy(CLIP, folder / "b.flac")
    (folder / "corpus.csv").write_text(f"audio,text\na.flac,{TEXT}\nb.flac,\n")
    return folder / "corpus.csv"


def test_each_clips_files_are_what_the_library_computes(run_cli, corpus, tmp_path):
    from attnviz.audio.cross_stats import sound_head_statistics
    from attnviz.audio.timing import align
    from attnviz.audio.whisper import whisper_attention
    from attnviz.result import AttentionResult

    out = tmp_path / "out"
    done = run_cli("export", str(corpus), "--model", ORGANISM, "--out", str(out), "--formats", "json,npz,parquet")
    assert done.exit_code == 0, done.stderr
    names = sorted(p.name for p in out.iterdir())
    assert names == ["000000-a.json", "000000-a.npz", "000001-b.json", "000001-b.npz", "manifest.jsonl",
                     "sounds.parquet"]
    for stem, text in (("000000-a", TEXT), ("000001-b", None)):
        doc = json.loads((out / f"{stem}.json").read_text())
        assert doc["teacher_forced"] is (text is not None)
        clip = corpus.parent / f"{stem[-1]}.flac"
        words = align(clip, ORGANISM, text=text).words
        assert [(w["word"], w["start"], w["end"]) for w in doc["words"]] == [(w.word, w.start, w.end) for w in words]
        table = sound_head_statistics(clip, ORGANISM, text=text)
        assert doc["heads"] == json.loads(json.dumps(table.rows))
        saved = AttentionResult.load(out / f"{stem}.npz")
        alone = whisper_attention(clip, ORGANISM, text=text)
        kept = alone.metadata["audio_positions"]  # the clip's 100 positions: the window's padding left out
        assert saved.metadata["cropped_to_clip"] and len(saved.tokens) == kept == 100
        np.testing.assert_allclose(saved.cross_attentions.numpy(), alone.cross_attentions[..., :kept].numpy(),
                                   atol=1e-6)
        np.testing.assert_allclose(saved.attentions.numpy(), alone.attentions[:, :, :kept, :kept].numpy(), atol=1e-6)
    import pyarrow.parquet as pq

    rows = pq.read_table(out / "sounds.parquet").to_pylist()
    assert len(rows) == 2 * 8 and {r["index"] for r in rows} == {0, 1}
    planted = [r for r in rows if (r["layer"], r["head"]) == (1, 0)]
    assert all(r["alignment"] and r["monotonicity"] > 0.95 for r in planted)
    again = run_cli("export", str(corpus), "--model", ORGANISM, "--out", str(out), "--formats", "json,npz,parquet")
    assert again.exit_code == 0 and "0 exported, 2 already done" in again.stdout, again.stdout


def test_a_png_per_layer_asked_readable_at_first_sight(run_cli, tmp_path):
    """--layer 1 --formats png: one picture of layer 1's heads under the spectrogram, large enough to read."""
    from PIL import Image

    shutil.copy(CLIP, tmp_path / "a.flac")
    (tmp_path / "one.csv").write_text(f"audio,text\na.flac,{TEXT}\n")
    done = run_cli("export", str(tmp_path / "one.csv"), "--model", ORGANISM, "--out", str(tmp_path / "out"),
                   "--formats", "png", "--layer", "1")
    assert done.exit_code == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["000000-a.L1.png", "manifest.jsonl"]
    with Image.open(tmp_path / "out" / "000000-a.L1.png") as picture:
        shades = np.unique(np.asarray(picture.convert("L")))
        assert min(picture.size) >= 600 and len(shades) > 50  # drawn, not blank


def test_a_changed_clip_is_exported_again_and_a_clip_too_long_fails_alone(run_cli, corpus, tmp_path):
    from audio_models import clip

    out = tmp_path / "out"
    assert run_cli("export", str(corpus), "--model", ORGANISM, "--out", str(out), "--formats", "json").exit_code == 0
    clip(corpus.parent / "b.flac", 1.0)  # b's bytes change: b is a new item
    (corpus.parent / "long.wav").unlink(missing_ok=True)
    clip(corpus.parent / "long.wav", 31.0)
    corpus.write_text(corpus.read_text() + "long.wav,\n")
    found = run_cli("export", str(corpus), "--model", ORGANISM, "--out", str(out), "--formats", "json")
    assert found.exit_code == 1
    assert "1 of 3 items failed" in found.stderr and "item 2" in found.stderr and "30" in found.stderr, found.stderr
    assert (out / "000001-b.json").is_file() and not (out / "000002-long.json").exists()
    doc = json.loads((out / "000001-b.json").read_text())
    assert doc["duration"] == pytest.approx(1.0)


@pytest.mark.parametrize(("args", "words"), [
    (["--formats", "html"], ["html", "png, npz, json, parquet"]),
    (["--engine", "native"], ["--engine", "hf"]),
    (["--layer", "5"], ["layer", "5"]),
    (["--pair", "x"], ["--pair"]),
])
def test_refusals_are_one_line(run_cli, corpus, tmp_path, args, words):
    found = run_cli("export", str(corpus), "--model", ORGANISM, "--out", str(tmp_path / "out"), *args)
    assert found.exit_code != 0
    assert found.stderr.count("\n") == 1 and found.stderr.startswith("attnviz: error: "), found.stderr
    assert all(w in found.stderr for w in words), found.stderr
    assert not (tmp_path / "out").exists()


def test_a_damaged_clip_is_refused_before_the_model_loads(run_cli, corpus, tmp_path):
    (corpus.parent / "a.flac").write_bytes(b"fLaC" + b"\0" * 20)
    found = run_cli("export", str(corpus), "--model", ORGANISM, "--out", str(tmp_path / "out"))
    assert found.exit_code != 0 and found.stderr.count("\n") == 1 and "a.flac" in found.stderr, found.stderr
    assert not (tmp_path / "out").exists()
