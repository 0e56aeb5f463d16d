"""``attnviz atlas CORPUS --model WHISPER`` (attnviz/audio/atlas.py): each cross-attention head across a corpus of
clips, and with --vs-model which heads a fine-tuning changed. On the sound organism and a "fine-tuned" one whose
alignment head is planted at L1H3 instead of L1H0: the per-head means are the clips' own tables averaged, the two
moved heads lead the comparison with opposite changes, an untouched head's change is 0, and the page is offline."""

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
    shutil.copy(CLIP, tmp_path / "a.flac")
    shutil.copy(CLIP, tmp_path / "b.flac")
    (tmp_path / "corpus.csv").write_text(f"audio,text\na.flac,{TEXT}\nb.flac,the cat sat\n")
    return tmp_path / "corpus.csv"


@pytest.fixture
def tuned(tmp_path):
    text = Path(ORGANISM).read_text().replace('name = "whisper-organism"', 'name = "whisper-tuned"')
    text = text.replace("kind = \"alignment\"\nlayer = 1\nhead = 0", "kind = \"alignment\"\nlayer = 1\nhead = 3")
    assert "head = 3" in text
    path = tmp_path / "tuned.toml"
    path.write_text(text)
    return str(path)


def test_each_heads_numbers_are_its_clips_tables_averaged(run_cli, corpus):
    from attnviz.audio.cross_stats import STATISTICS, sound_head_statistics

    found = run_cli("atlas", str(corpus), "--model", ORGANISM, "--format", "json")
    assert found.exit_code == 0, found.stderr
    atlas = json.loads(found.stdout)
    assert atlas["clips"] == ["a.flac", "b.flac"] and len(atlas["heads"]) == 8
    tables = [sound_head_statistics(corpus.parent / name, ORGANISM, text=text).rows
              for name, text in (("a.flac", TEXT), ("b.flac", "the cat sat"))]
    for row in atlas["heads"]:
        alone = [next(r for r in t if (r["layer"], r["head"]) == (row["layer"], row["head"])) for t in tables]
        for name in STATISTICS:
            assert row[name] == pytest.approx(np.mean([r[name] for r in alone]), abs=1e-9)
    assert atlas["heads"][0]["layer"] == 1 and atlas["heads"][0]["head"] == 0 and atlas["heads"][0]["alignment"]


def test_a_fine_tuning_that_moved_the_alignment_head_is_found(corpus, tuned, tmp_path):
    from attnviz.audio.atlas import sound_atlas, sound_atlas_page

    atlas = sound_atlas(corpus, ORGANISM, vs_model=tuned, bootstrap=200)
    heads = json.loads(json.dumps(atlas.to_dict()))["heads"]
    first, second = heads[0], heads[1]
    assert {(first["layer"], first["head"]), (second["layer"], second["head"])} == {(1, 0), (1, 3)}
    moved = {(h["layer"], h["head"]): h for h in heads}
    assert moved[(1, 0)]["d_diagonal"] < -0.3 < 0.3 < moved[(1, 3)]["d_diagonal"]
    assert moved[(1, 0)]["d_monotonicity"] < 0 < moved[(1, 3)]["d_monotonicity"]
    for head in heads:
        assert head["d_diagonal_low"] <= head["d_diagonal"] + 1e-12 and head["d_diagonal"] <= head["d_diagonal_high"] + 1e-12
    assert moved[(0, 2)]["d_diagonal"] == 0.0 and moved[(1, 2)]["d_entropy"] == 0.0  # heads left as they were
    page = sound_atlas_page(atlas, tmp_path / "atlas.html")
    text = page.read_text()
    assert "<script" not in text and "http" not in text.replace('http-equiv', '') and text.count("<tr>") == 9
    assert "whisper-tuned" in text and "data:image/png;base64," in text


@pytest.mark.parametrize(("args", "words"), [
    (["--importance"], ["--importance", "atlas"]),
    (["--out", "x.json"], ["--out", ".html"]),
])
def test_refusals_are_one_line(run_cli, corpus, args, words):
    found = run_cli("atlas", str(corpus), "--model", ORGANISM, *args)
    assert found.exit_code != 0 and found.stderr.count("\n") == 1, found.stderr
    assert all(w in found.stderr for w in words), found.stderr


def test_two_models_of_different_shapes_are_refused(run_cli, corpus, tmp_path):
    other = tmp_path / "narrow.toml"
    other.write_text(Path(ORGANISM).read_text().replace('name = "whisper-organism"', 'name = "narrow"\nheads = 2')
                     .replace("kind = \"alignment\"\nlayer = 1\nhead = 0", "kind = \"alignment\"\nlayer = 1\nhead = 0")
                     .split("[[head]]              # L1H1")[0])
    found = run_cli("atlas", str(corpus), "--model", ORGANISM, "--vs-model", str(other))
    assert found.exit_code != 0 and found.stderr.count("\n") == 1 and "one shape" in found.stderr, found.stderr
