"""Whisper's attention over a clip as an AttentionResult (attnviz/audio/whisper.py), checked against transformers'
eager attention (``output_attentions=True``, called here on features and tokens built independently of attnviz) and
against a hand computation of a cross-attention layer from its projections; the greedy transcript against
transformers' ``generate``; the language against its ``detect_language``; on tiny random Whispers of 80 mel bins and
of 128 with a decoder shallower than its encoder (large-v3-turbo's and distil-whisper's shape), built offline (tests/audio_models.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch
from audio_models import clip, tiny_whisper

from attnviz.audio.model import load_whisper
from attnviz.audio.transcript import detect_language
from attnviz.audio.whisper import encode, whisper_attention
from attnviz.errors import InputError, UsageError

SHAPES = {"80 mels, 2 and 4 heads": dict(mels=80, heads=(2, 4)),
          # large-v3-turbo's shape (128 mels, a decoder of fewer layers than its encoder: 32 and 4; distil-whisper's 2)
          "128 mels, 4 and 2 heads, 3 and 1 layers": dict(mels=128, heads=(4, 2), layers=(3, 1))}


@pytest.fixture(scope="module", params=list(SHAPES))
def model(request, tmp_path_factory):
    folder = tiny_whisper(tmp_path_factory.mktemp("whisper") / "tiny", **SHAPES[request.param], init_std=0.3)
    return load_whisper(str(folder))


@pytest.fixture(scope="module")
def wav(tmp_path_factory):
    return clip(tmp_path_factory.mktemp("clips") / "clip.wav", 1.5, subtype="FLOAT")


def _reference(model, samples: np.ndarray, text: str):
    """transformers' own run: features from its feature extractor, the prompt from its tokenizer's prefix tokens."""
    from transformers import WhisperFeatureExtractor, WhisperTokenizer

    folder = model.network.name_or_path  # the folder it was loaded from
    assert Path(folder).is_dir()
    features = WhisperFeatureExtractor.from_pretrained(folder)(samples, sampling_rate=16_000, return_tensors="pt")
    tokenizer = WhisperTokenizer.from_pretrained(folder)
    tokenizer.set_prefix_tokens(language="en", task="transcribe", predict_timestamps=False)
    ids = tokenizer(" " + text).input_ids  # prefix, the text, end of text
    with torch.no_grad():
        out = model.network(input_features=features.input_features, decoder_input_ids=torch.tensor([ids]),
                            output_attentions=True)
    return ids, out


def test_the_attention_equals_transformers_eager_attention(model, wav):

    samples = soundfile.read(wav, dtype="float32")[0]
    result = whisper_attention(wav, model, text="hello world the cat", language="en")
    ids, out = _reference(model, samples, "hello world the cat")
    assert result.metadata["target_ids"] == ids
    for got, want in ((result.attentions, out.encoder_attentions), (result.decoder_attentions, out.decoder_attentions),
                      (result.cross_attentions, out.cross_attentions)):
        want = torch.stack([w[0] for w in want])
        assert got.shape == want.shape
        assert (got - want).abs().max() < 1e-5
    config = model.config
    assert result.attentions.shape == (config.encoder_layers, config.encoder_attention_heads, 1500, 1500)
    assert result.cross_attentions.shape == (config.decoder_layers, config.decoder_attention_heads, len(ids), 1500)


def test_a_cross_attention_layer_equals_its_projections_by_hand(model, wav):
    """softmax(q_proj(h) · k_proj(encoder)ᵀ / √d) per head, from the decoder's hidden state going into the layer's
    cross-attention: no output_attentions involved."""
    captured = {}
    layer = model.config.decoder_layers - 1
    attention = model.network.model.decoder.layers[layer].encoder_attn

    def keep(module, args, kwargs):
        captured["h"] = kwargs.get("hidden_states", args[0] if args else None)
        captured["kv"] = kwargs["key_value_states"]

    hook = attention.register_forward_pre_hook(keep, with_kwargs=True)
    try:
        result = whisper_attention(wav, model, text="the cat sat on the mat", language="en")
    finally:
        hook.remove()
    heads = attention.num_heads
    d = attention.head_dim
    with torch.no_grad():
        q = attention.q_proj(captured["h"])[0].view(-1, heads, d).transpose(0, 1)
        k = attention.k_proj(captured["kv"])[0].view(-1, heads, d).transpose(0, 1)
        by_hand = torch.softmax((q * d**-0.5) @ k.transpose(1, 2), dim=-1)
    assert (result.cross_attentions[layer] - by_hand).abs().max() < 1e-5


def test_the_result_says_where_the_clip_is_in_time(model, wav):
    result = whisper_attention(wav, model, text="hello world", language="en")
    meta = result.metadata
    assert meta["seconds_per_position"] == pytest.approx(0.02)
    assert meta["duration"] == 1.5 and meta["audio_frames"] == 150 and meta["audio_positions"] == 75
    assert result.tokens[:2] == ["0.00s", "0.02s"] and result.tokens[-1] == "29.98s"
    assert result.special == [k >= 75 for k in range(1500)]
    assert result.target_tokens[:4] == ["<|startoftranscript|>", "<|en|>", "<|transcribe|>", "<|notimestamps|>"]
    assert result.target_tokens[4:6] == ["hello", "world"] and result.target_tokens[-1] == "<|endoftext|>"
    assert result.target_special == [True] * 4 + [False, False, True]
    assert meta["prompt_length"] == 4 and meta["teacher_forced"] and meta["transcript"] == " hello world"


def test_samples_in_memory_are_the_same_as_their_file(model, wav):

    samples = soundfile.read(wav, dtype="float32")[0]
    a = whisper_attention(wav, model, text="hello", language="en")
    b = whisper_attention(samples, model, text="hello", language="en")
    assert torch.equal(a.cross_attentions, b.cross_attentions)


def test_the_language_is_the_one_transformers_detects(model, wav):
    from attnviz.audio.hearing import hear

    heard = hear(wav, model)
    encoded, _ = encode(model, heard, attentions=False)
    found = detect_language(model, encoded)
    with torch.no_grad():
        want = int(model.network.detect_language(input_features=heard.features)[0])
    assert model.languages[found] == want
    result = whisper_attention(wav, model, text="hello")
    assert result.metadata["language"] == found and result.metadata["target_ids"][1] == want


def test_the_greedy_transcript_is_transformers_greedy_whatever_the_checkpoint_says(tmp_path, wav):
    """A checkpoint that asks for sampling, beams and penalties is read greedily: the tokens transformers' generate
    gives with explicit greedy settings on the same weights saved without them."""
    settings = {"do_sample": True, "temperature": 3.0, "num_beams": 3, "repetition_penalty": 5.0,
                "no_repeat_ngram_size": 1}
    ours = load_whisper(str(tiny_whisper(tmp_path / "ours", init_std=1.0, seed=3, generation=settings)))
    plain = load_whisper(str(tiny_whisper(tmp_path / "plain", init_std=1.0, seed=3)))
    from attnviz.audio.hearing import hear

    def generated() -> list[int]:
        with torch.no_grad():
            return plain.network.generate(hear(wav, plain).features, language="en", task="transcribe",
                                          do_sample=False, num_beams=1, max_new_tokens=15, return_timestamps=False,
                                          return_dict_in_generate=True).sequences[0].tolist()

    result = whisper_attention(wav, ours, language="en", max_new_tokens=15)
    want = generated()
    assert result.metadata["target_ids"][:-1] == want  # ours ends with end of text, read after the last token
    assert len(set(want[4:])) > 3  # a transcript of several tokens, not one repeated
    assert not result.metadata["teacher_forced"] and not result.metadata["ended"]
    # the checkpoint's suppressed tokens are kept: its first token suppressed at the first step, as transformers does
    for loaded in (ours, plain):
        loaded.network.generation_config.begin_suppress_tokens = [want[4]]
    result = whisper_attention(wav, ours, language="en", max_new_tokens=15)
    again = generated()
    assert again[4] != want[4] and result.metadata["target_ids"][:-1] == again


def test_a_clip_longer_than_the_window_is_refused_with_the_limit_and_the_fix(model, tmp_path):
    long = clip(tmp_path / "long.wav", 31.0)
    with pytest.raises(InputError, match=r"31\.0 s long, more than the 30 s .* cut it into clips") as caught:
        whisper_attention(long, model, text="hello", language="en")
    assert str(long) in str(caught.value)


def test_a_text_too_long_for_the_decoder_is_refused(model, wav):
    with pytest.raises(InputError, match="decoder reads at most 443"):
        whisper_attention(wav, model, text="hello " * 500, language="en")
    with pytest.raises(InputError, match="the text is empty"):
        whisper_attention(wav, model, text="  ", language="en")


def test_bad_options_are_one_line(model, wav):
    with pytest.raises(UsageError, match="language=xx"):
        whisper_attention(wav, model, text="hello", language="xx")
    with pytest.raises(UsageError, match="task=dance"):
        whisper_attention(wav, model, text="hello", language="en", task="dance")


def test_a_model_that_is_not_whisper_is_refused_by_name(tmp_path):
    folder = tmp_path / "bert"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "bert", "num_hidden_layers": 2}')
    with pytest.raises(UsageError, match="is a bert model; attnviz hears sound with Whisper"):
        load_whisper(str(folder))
    with pytest.raises(UsageError, match="not a Whisper checkpoint"):
        load_whisper("sample_configs/tiny.toml")


def test_attention_that_would_not_fit_is_refused_before_the_model_runs(model, wav, monkeypatch):
    monkeypatch.setenv("ATTNVIZ_MAX_MEMORY", "1M")
    from attnviz.errors import ResourceError

    with pytest.raises(ResourceError, match=r"over a 30-s window needs about .* set ATTNVIZ_MAX_MEMORY"):
        whisper_attention(wav, model, text="hello", language="en")


def test_samples_handed_in_are_checked(model):
    for samples, words in ((np.zeros((2, 100), np.float32), "one channel"), (np.zeros(0, np.float32), "empty"),
                           (np.array([0.0, np.nan], np.float32), "not numbers")):
        with pytest.raises(InputError, match=words):
            whisper_attention(samples, model, text="hello", language="en")


def test_a_hub_id_offline_is_one_line_naming_what_runs_offline():
    from attnviz.errors import ModelNotFoundError

    with pytest.raises(ModelNotFoundError, match="not in the local Hugging Face cache") as caught:
        load_whisper("openai/whisper-tiny-not-cached")
    assert "Whisper checkpoint folder" in str(caught.value)


def test_a_clip_of_exactly_the_window_at_another_rate_fills_it(model, tmp_path):

    from attnviz.audio.hearing import hear

    path = tmp_path / "thirty.wav"
    soundfile.write(path, (0.1 * np.sin(np.arange(44_100 * 30) / 10)).astype(np.float32), 44_100)
    heard = hear(path, model)
    assert (len(heard.samples), heard.frames, heard.positions) == (480_000, 3_000, 1_500)


def test_the_window_is_checked_from_the_header_before_decoding(model, tmp_path):
    """A FLAC whose header claims 45 s but holds 1 s: the window's refusal, not the truncation found by decoding."""
    flac = clip(tmp_path / "a.flac", 1.0)
    data = bytearray(flac.read_bytes())
    packed = int.from_bytes(data[18:26], "big")
    data[18:26] = ((packed & ~((1 << 36) - 1)) | 45 * 16_000).to_bytes(8, "big")
    flac.write_bytes(bytes(data))
    with pytest.raises(InputError, match=r"45\.0 s long, more than the 30 s"):
        whisper_attention(flac, model, text="hello", language="en")


def test_timings_read_the_text_tokens_of_a_transcript_that_holds_special_tokens(model, wav):
    """A random model writes language and task tokens inside its greedy transcript; the timings align its text
    tokens alone (openai-whisper's add_word_timestamps keeps ids below end of text), as if that text were given."""
    from attnviz.audio.timing import align

    result = whisper_attention(wav, model, language="en", max_new_tokens=20)
    written = result.metadata["target_ids"][result.metadata["prompt_length"]:-1]
    eot = model.eot
    found = align(wav, model, language="en", max_new_tokens=20)
    assert [t.id for t in found.tokens] == [t for t in written if t < eot]
    if any(t > eot for t in written):  # the case this test is for (seen on the turbo-shaped model)
        text = model.tokenizer.decode([t for t in written if t < eot])
        given = align(wav, model, text=text, language="en")
        if [t.id for t in given.tokens] == [t.id for t in found.tokens]:  # the text tokenizes back to the same ids
            assert [(t.start, t.end) for t in given.tokens] == [(t.start, t.end) for t in found.tokens]


def test_a_decoder_shallower_than_its_encoder_is_read_by_its_own_layers(model, wav, tmp_path, run_cli):
    """large-v3-turbo's shape: the encoder's layer 2 is drawn from a saved result, the decoder's cross-attention of
    its layer 0 is transformers' own, and asking for the decoder's layer 2 says how many it has, in one line."""
    layers = int(model.config.decoder_layers)
    result = whisper_attention(wav, model, text="hello world", language="en")
    saved = result.save(tmp_path / "r.npz")
    encoder_layers = int(model.config.encoder_layers)
    last = str(encoder_layers - 1)
    drawn = run_cli("heatmap", "--model", str(saved), "--layer", last)  # 1,500 positions, pooled to the terminal
    assert drawn.exit_code == 0 and f"layer {last}" in drawn.stdout, drawn.stderr
    cross = run_cli("heatmap", "--model", str(saved), "--kind", "cross", "--layer", "0", "--head", "1", "--out",
                    str(tmp_path / "c.json"))
    assert cross.exit_code == 0, cross.stderr
    import json

    weights = np.array(json.loads((tmp_path / "c.json").read_text())["panels"][0])
    _, out = _reference(model, soundfile.read(wav, dtype="float32")[0], "hello world")
    np.testing.assert_allclose(weights, out.cross_attentions[0][0, 1].numpy(), atol=1e-5)
    if encoder_layers > layers:
        refused = run_cli("heatmap", "--model", str(saved), "--kind", "cross", "--layer", last)
        assert refused.exit_code != 0 and refused.stderr.count("\n") == 1, refused.stderr
        assert f"has {layers} layer" in refused.stderr and f"layer {last} is not one of them" in refused.stderr
