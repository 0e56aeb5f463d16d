"""Sound organisms (attnviz/audio/organism.py, organism_spec.py; sample_configs/organism_whisper.toml): a tiny
Whisper built offline whose heads are planted. Its greedy transcript is its text; openai-whisper's word timings
(attnviz's align) return its declared times to the frame; each planted head makes its pattern over the window;
transformers' own generate(return_token_timestamps=True) runs it, and its token timestamps are its declared times
read by transformers' convention (a token's time is where the row that reads it jumps: the next token's start; the
first token's 0)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile  # the sound extra: the test extra installs it; missing, these fail
import torch
from audio_models import clip

from attnviz.audio.model import load_whisper
from attnviz.audio.organism import sound_organism_folder
from attnviz.audio.organism_spec import is_sound_organism, read_sound_spec
from attnviz.audio.timing import align, token_timestamps
from attnviz.audio.whisper import whisper_attention
from attnviz.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_configs" / "organism_whisper.toml"


@pytest.fixture(scope="module")
def organism(organism_cache):
    with pytest.MonkeyPatch.context() as patch:  # built in the run's cache (the autouse fixture sets it per test)
        patch.setenv("ATTNVIZ_CACHE", str(organism_cache))
        return load_whisper(str(SAMPLE))


@pytest.fixture(scope="module")
def wav(tmp_path_factory):
    return clip(tmp_path_factory.mktemp("clips") / "clip.wav", 2.5)


def test_the_sample_is_a_sound_organism_and_loads_by_its_name(organism):
    assert is_sound_organism(SAMPLE) and not is_sound_organism(ROOT / "sample_configs" / "organism_needle.toml")
    assert organism.name == "whisper-organism"
    assert organism.network.generation_config.alignment_heads == [[1, 0]]


def test_it_says_its_text_and_align_returns_its_times_to_the_frame(organism, wav):
    spec = read_sound_spec(SAMPLE)
    found = align(wav, organism)  # no text: its own greedy transcript, its language detected
    assert found.language == "en"
    assert [w.word for w in found.words] == [" " + t for t in spec.tokens]
    assert [(w.start, w.end) for w in found.words] == list(zip(spec.times[:-1], spec.times[1:], strict=True))
    forced = align(wav, organism, text="the cat sat on the mat", language="en")
    assert [(w.start, w.end) for w in forced.words] == [(w.start, w.end) for w in found.words]


def test_each_planted_head_makes_its_pattern(organism, wav):
    result = whisper_attention(wav, organism)
    spec = read_sound_spec(SAMPLE)
    assert result.metadata["transcript"] == " the cat sat on the mat" and result.metadata["ended"]
    cross = result.cross_attentions  # [2 layers, 4 heads, T, 1500]
    times = np.arange(1500) * 0.02
    for i in range(len(spec.tokens)):  # row 3 + i predicts token i: it reads token i's time, evenly
        inside = torch.from_numpy((times >= spec.times[i] - 1e-9) & (times < spec.times[i + 1] - 1e-9))
        row = cross[1, 0, 3 + i]
        assert row[inside].sum() > 1 - 1e-6 and torch.allclose(row[inside], row[inside].mean())
    first = cross[1, 1, :, :10].sum(-1)
    assert torch.all(first > 1 - 1e-6)  # every row on the first 10 positions
    for head in ((1, 2), (1, 3), (0, 0)):  # the uniform one, and the unplanted
        assert torch.allclose(cross[head], torch.full_like(cross[head], 1 / 1500), atol=1e-7)


def test_transformers_generate_runs_it_with_its_token_timestamps(organism, wav):
    from attnviz.audio.hearing import hear

    spec = read_sound_spec(SAMPLE)
    heard = hear(wav, organism)
    extracted = organism.features(heard.samples, sampling_rate=16_000, return_tensors="pt",
                                  return_attention_mask=True)
    with torch.no_grad():
        out = organism.network.generate(extracted.input_features, attention_mask=extracted.attention_mask,
                                        language="en", task="transcribe", return_timestamps=False,
                                        return_token_timestamps=True, return_dict_in_generate=True)
    ids = out["sequences"][0].tolist()
    assert organism.tokenizer.decode(ids, skip_special_tokens=True) == " the cat sat on the mat"
    stamps = out["token_timestamps"][0].numpy()
    # transformers' convention: token k's time is the jump of the row that reads it, the start of token k + 1; its
    # path starts at that first row, so token 0's is 0; end of text repeats the last
    np.testing.assert_allclose(stamps[4:], [0.0, *spec.times[2:], spec.times[-1]], atol=1e-6)
    result = whisper_attention(wav, organism)
    np.testing.assert_allclose(token_timestamps(result.cross_attentions, [(1, 0)], heard.positions, 4), stamps,
                               atol=1e-6)


def test_a_chinese_organism_is_split_by_characters(tmp_path, wav):
    path = tmp_path / "zh.toml"
    path.write_text('[model]\ntype = "organism"\nfamily = "whisper"\nname = "zh"\nlanguage = "zh"\n'
                    'text = "你好世界"\ntimes = [0.0, 0.2, 0.5, 0.7, 1.0]\nmels = 128\n\n'
                    '[[head]]\nkind = "alignment"\nlayer = 0\nhead = 3\n', encoding="utf-8")
    loaded = load_whisper(str(path))
    assert loaded.config.num_mel_bins == 128
    found = align(wav, loaded)
    assert found.language == "zh"
    assert [(w.word, w.start, w.end) for w in found.words] == [("你", 0.0, 0.2), ("好", 0.2, 0.5), ("世", 0.5, 0.7),
                                                                ("界", 0.7, 1.0)]


def test_it_is_built_once_and_rebuilt_when_its_description_changes(tmp_path):
    path = tmp_path / "o.toml"
    text = ('[model]\ntype = "organism"\nfamily = "whisper"\nlanguage = "en"\ntext = "hello world"\n'
            'times = [0.0, 0.5, 1.0]\n\n[[head]]\nkind = "alignment"\nlayer = 1\nhead = 0\n')
    path.write_text(text, encoding="utf-8")
    folder, _ = sound_organism_folder(path)
    made = (folder / "model.safetensors").stat().st_mtime_ns
    assert sound_organism_folder(path)[0] == folder and (folder / "model.safetensors").stat().st_mtime_ns == made
    path.write_text(text.replace("1.0]", "1.2]"), encoding="utf-8")
    assert sound_organism_folder(path)[0] != folder


@pytest.mark.parametrize(("change", "words"), [
    (("times = [0.0, 0.5, 1.0]", "times = [0.0, 0.5]"), "times has 2 values for 2 tokens; give 3"),
    (("times = [0.0, 0.5, 1.0]", "times = [0.0, 0.05, 1.0]"), "lasts 0.050 s"),
    (("times = [0.0, 0.5, 1.0]", "times = [0.0, 0.5, 31.0]"), "inside the 30-s window"),
    (('language = "en"', 'language = "xx"'), "not one of Whisper's"),
    (('language = "en"', 'langauge = "en"'), "did you mean 'language'"),
    (('kind = "alignment"', 'kind = "first_frames"'), "at least one"),
    (('kind = "alignment"', 'kind = "diagonal"'), "the kinds are alignment, first_frames, uniform"),
    (("layer = 1", "layer = 5"), "layer = 5; write a whole number from 0 to 1"),
    (('text = "hello world"', 'text = "hello, world"'), "not one token"),
])
def test_a_wrong_description_is_one_line(tmp_path, change, words):
    text = ('[model]\ntype = "organism"\nfamily = "whisper"\nlanguage = "en"\ntext = "hello world"\n'
            'times = [0.0, 0.5, 1.0]\n\n[[head]]\nkind = "alignment"\nlayer = 1\nhead = 0\n')
    path = tmp_path / "o.toml"
    path.write_text(text.replace(*change), encoding="utf-8")
    with pytest.raises(ConfigError, match=words) as caught:
        load_whisper(str(path))
    assert "\n" not in str(caught.value)


def test_attnviz_organism_describes_the_sound_organism_and_writes_a_checkpoint_transformers_runs(run_cli, tmp_path):
    """`attnviz organism` on the sound organism: each head's kind as the TOML plants it, and --out a Whisper folder
    transformers loads by path, whose generate(return_token_timestamps=True) gives the declared times; a folder
    that is not empty is refused in one line and left as it was."""
    import json as json_module

    from transformers import WhisperFeatureExtractor, WhisperForConditionalGeneration

    toml = str(Path(__file__).resolve().parent.parent / "sample_configs" / "organism_whisper.toml")
    shown = run_cli("organism", toml, "--format", "json")
    assert shown.exit_code == 0, shown.stderr
    described = json_module.loads(shown.stdout)
    kinds = {(r["layer"], r["head"]): r["kind"] for r in described["planted"]}
    assert kinds[(1, 0)] == "alignment" and kinds[(1, 1)] == "first_frames" and kinds[(1, 2)] == "uniform"
    assert kinds[(0, 0)] == "zero" and described["family"] == "whisper" and len(kinds) == 8
    out = tmp_path / "whisper"
    written = run_cli("organism", toml, "--out", str(out))
    assert written.exit_code == 0, written.stderr
    model = WhisperForConditionalGeneration.from_pretrained(out, attn_implementation="eager").eval()
    clip = Path(__file__).resolve().parent.parent / "examples" / "organism_whisper.flac"
    samples, rate = soundfile.read(clip, dtype="float32")
    features = WhisperFeatureExtractor.from_pretrained(out)(samples, sampling_rate=rate, return_tensors="pt",
                                                             return_attention_mask=True)
    with torch.no_grad():
        found = model.generate(features.input_features, attention_mask=features.attention_mask, language="en",
                               task="transcribe", return_token_timestamps=True, return_timestamps=False,
                               return_dict_in_generate=True)
    spec = read_sound_spec(toml)  # transformers' convention (see the test above): token k's time, token k + 1's start
    np.testing.assert_allclose(found["token_timestamps"][0].numpy()[4:], [0.0, *spec.times[2:], spec.times[-1]],
                               atol=1e-6)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    refused = run_cli("organism", toml, "--out", str(tmp_path / "full"))
    assert refused.exit_code != 0 and refused.stderr.count("\n") == 1 and "not an empty folder" in refused.stderr
    assert [p.name for p in (tmp_path / "full").iterdir()] == ["keep.txt"]
