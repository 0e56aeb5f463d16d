"""Speech encoders (issue 61 item 6: wav2vec2, HuBERT, WavLM; attnviz/audio/encoders.py): their self-attention over
a clip's frames equals transformers' eager attention called here on features made here; the frames are labelled by
their start in seconds; every command that draws a result draws it with ``--audio`` (heatmap, heads, view); what does
not go with it is refused in one line. Tiny random models of each family, built offline."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch
from audio_models import clip

from attnviz.audio.encoders import is_speech_encoder, speech_encoder_attention, speech_encoder_types

FAMILIES = ("wav2vec2", "hubert", "wavlm")


def tiny(folder: Path, family: str) -> Path:
    import transformers

    config_class, model_class = {"wav2vec2": ("Wav2Vec2Config", "Wav2Vec2Model"),
                                 "hubert": ("HubertConfig", "HubertModel"),
                                 "wavlm": ("WavLMConfig", "WavLMModel")}[family]
    config = getattr(transformers, config_class)(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, conv_dim=(8,) * 7,
        num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2, initializer_range=0.5)
    torch.manual_seed(0)
    getattr(transformers, model_class)(config).eval().save_pretrained(folder)
    transformers.Wav2Vec2FeatureExtractor().save_pretrained(folder)
    return folder


@pytest.fixture(scope="module", params=FAMILIES)
def encoder(request, tmp_path_factory):
    return str(tiny(tmp_path_factory.mktemp(request.param) / request.param, request.param))


@pytest.fixture(scope="module")
def wav(tmp_path_factory):
    return clip(tmp_path_factory.mktemp("clips") / "clip.wav", 1.0, subtype="FLOAT")


def test_the_attention_is_transformers_eager_attention_over_the_frames(encoder, wav):
    from transformers import AutoFeatureExtractor, AutoModel

    result = speech_encoder_attention(wav, encoder)
    model = AutoModel.from_pretrained(encoder, attn_implementation="eager").eval()
    samples, rate = soundfile.read(wav, dtype="float32")
    inputs = AutoFeatureExtractor.from_pretrained(encoder)(samples, sampling_rate=rate, return_tensors="pt")
    with torch.no_grad():
        out = model(input_values=inputs.input_values, output_attentions=True)
    expected = torch.stack([a[0] for a in out.attentions])
    assert result.attentions.shape == expected.shape and expected.shape[-1] == 49  # 16,000 samples / 320, less one
    torch.testing.assert_close(result.attentions, expected, atol=1e-5, rtol=0)
    assert result.tokens[:3] == ["0.00s", "0.02s", "0.04s"] and not any(result.special)
    assert result.metadata["seconds_per_position"] == pytest.approx(0.02)
    assert float(result.attentions.std()) > 1e-3  # random weights that make the heads differ (not uniform)


def test_the_family_is_transformers_own_and_whisper_is_not_one(encoder, tmp_path):
    assert is_speech_encoder(encoder)
    assert {"wav2vec2", "hubert", "wavlm"} <= speech_encoder_types() and "whisper" not in speech_encoder_types()
    assert not is_speech_encoder(str(Path(__file__).parent.parent / "sample_configs" / "organism_whisper.toml"))
    assert not is_speech_encoder(str(tmp_path / "missing"))


def test_the_commands_draw_it_as_any_result(run_cli, encoder, wav, tmp_path):
    result = speech_encoder_attention(wav, encoder)
    drawn = run_cli("heatmap", "--audio", str(wav), "--model", encoder, "--layer", "1", "--head", "2", "--out",
                    str(tmp_path / "h.json"))
    assert drawn.exit_code == 0, drawn.stderr
    shown = json.loads((tmp_path / "h.json").read_text())
    np.testing.assert_allclose(np.array(shown["panels"][0]), result.attentions[1, 2].numpy(), atol=1e-6)
    assert shown["col_labels"][:2] == ["0.00s", "0.02s"]
    table = run_cli("heads", "--audio", str(wav), "--model", encoder, "--format", "json")
    assert table.exit_code == 0, table.stderr
    rows = json.loads(table.stdout)["heads"]
    assert len(rows) == 8
    first = 0.9999 * result.attentions[0, 0].double() + 0.0001 / 49  # Clark et al.'s smoothing (docs/commands.md)
    entropy = float(-(first * torch.log(first)).sum(-1).mean())
    assert rows[0]["entropy"] == pytest.approx(entropy, abs=1e-4)
    page = run_cli("view", "--audio", str(wav), "--model", encoder, "--page", str(tmp_path / "p.html"))
    assert page.exit_code == 0 and (tmp_path / "p.html").stat().st_size > 1000, page.stderr
    assert "Loading weights" not in drawn.stderr + table.stderr + page.stderr


@pytest.mark.parametrize(("args", "words"), [
    (["some text"], ["not a Whisper", "leave out TEXT"]),
])
def test_refusals_are_one_line(run_cli, encoder, wav, args, words):
    found = run_cli("heatmap", "--audio", str(wav), "--model", encoder, *args)
    assert found.exit_code != 0
    assert found.stderr.count("\n") == 1 and found.stderr.startswith("attnviz: error: "), found.stderr
    assert all(w in found.stderr for w in words), found.stderr


def test_a_model_that_hears_nothing_is_refused_by_name(run_cli, wav):
    found = run_cli("heatmap", "--audio", str(wav), "--model", "sample_configs/tiny.toml")
    assert found.exit_code != 0 and found.stderr.count("\n") == 1, found.stderr
    assert "not a Whisper nor a speech encoder" in found.stderr, found.stderr


def test_attention_that_would_not_fit_is_refused_before_the_model_runs(encoder, wav, monkeypatch):
    from attnviz.errors import ResourceError
    from attnviz.limits import MEMORY_ENV

    monkeypatch.setenv(MEMORY_ENV, "1000")
    with pytest.raises(ResourceError, match="frames needs about"):
        speech_encoder_attention(wav, encoder)
