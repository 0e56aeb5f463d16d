"""Word timings of a clip longer than the model's 30-s window (attnviz/audio/long_form.py): window after window, on
sound organisms whose words and times are declared, so where each window starts and what it finds is known: the
organism says its text in every window it hears, at its declared times from the window's start; a last word ending
within a second of a window's end is heard again in the next window, which starts at that word's start."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile
from audio_models import ORGANISM

from attnviz.audio.long_form import CUT_SECONDS
from attnviz.audio.model import load_whisper
from attnviz.audio.timing import align
from attnviz.errors import InputError

ROOT = Path(__file__).resolve().parent.parent


def noise(path: Path, seconds: float) -> Path:
    soundfile.write(path, (0.01 * np.random.default_rng(0).standard_normal(int(seconds * 16_000))).astype(np.float32),
                    16_000)
    return path


def test_each_window_is_aligned_from_its_start(tmp_path):
    clip = noise(tmp_path / "long.wav", 62.0)
    found = align(clip, ORGANISM)
    starts = [w.start for w in found.words]
    said = [0.0, 0.3, 0.6, 0.9, 1.2, 1.5]  # the organism's declared starts (sample_configs/organism_whisper.toml)
    assert starts == pytest.approx([*said, *(30 + t for t in said), *(60 + t for t in said)], abs=1e-6)
    assert [w.word.strip() for w in found.words] == ["the", "cat", "sat", "on", "the", "mat"] * 3
    assert len(found.tokens) == 18 and found.duration == pytest.approx(62.0)
    assert found.tokens[6].start == pytest.approx(30.0) and found.language == "en"
    assert np.all(np.diff(found.rows) >= 0) and np.all(np.diff(found.columns) >= 0)  # one path through the windows
    assert found.columns.max() >= 60 * 50  # the last window's positions counted on from the windows before


def test_a_word_the_windows_end_may_cut_is_heard_again_in_the_next(tmp_path):
    toml = tmp_path / "late.toml"
    toml.write_text('[model]\ntype = "organism"\nfamily = "whisper"\nname = "late"\nlanguage = "en"\n'
                    'text = "the cat"\ntimes = [0.0, 28.8, 29.6]\n\n[[head]]\nkind = "alignment"\nlayer = 1\nhead = 0\n',
                    encoding="utf-8")
    model = load_whisper(str(toml))
    clip = noise(tmp_path / "long.wav", 45.0)
    found = align(clip, model)
    words = [(w.word.strip(), round(w.start, 2), round(w.end, 2)) for w in found.words]
    # window 1 (0-30 s): 'cat' ends at 29.6 s, within CUT_SECONDS of 30: dropped, the next window starts at 28.8 s
    assert CUT_SECONDS >= 30.0 - 29.6
    assert words[0] == ("the", 0.0, 28.8)
    assert words[1][0] == "the" and words[1][1] == pytest.approx(28.8)  # window 2 starts where 'cat' started
    assert [w for w, _, _ in words] == ["the", "the", "cat"]  # window 2 is the clip's last: nothing dropped


def test_a_given_text_for_a_long_clip_is_refused_with_the_fix(tmp_path, run_cli):
    clip = noise(tmp_path / "long.wav", 31.0)
    with pytest.raises(InputError, match="leave out the text"):
        align(clip, ORGANISM, text="the cat sat on the mat")
    found = run_cli("align", str(clip), "--model", ORGANISM, "--text", "the cat")
    assert found.exit_code != 0 and found.stderr.count("\n") == 1 and "31.0 s" in found.stderr, found.stderr
    shown = run_cli("align", str(clip), "--model", ORGANISM, "--format", "csv")
    assert shown.exit_code == 0 and shown.stdout.count("\n") == 1 + 12, shown.stderr  # two windows of six words
