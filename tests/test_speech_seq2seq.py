"""Speech encoder-decoders other than Whisper (issue 61 item 6; attnviz/audio/seq2seq.py): Speech2Text (log-mel
filter banks) and Moonshine (raw samples), tiny random models built offline. Their cross-attention over a clip equals
transformers' eager attention called here on features and ids made here, a given text teacher-forced and no text the
model's own greedy transcript (transformers' generate); ``heatmap --audio`` draws it as it draws Whisper's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch
from audio_models import clip, tiny_tokenizer

from attnviz.audio.encoders import hearing_kind
from attnviz.audio.seq2seq import speech_seq2seq_attention

FAMILIES = ("speech_to_text", "moonshine")


def tiny(folder: Path, family: str) -> Path:
    import transformers

    tokenizer = tiny_tokenizer()
    eot = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    ids = {"decoder_start_token_id": eot, "eos_token_id": eot, "pad_token_id": eot, "bos_token_id": eot}
    if family == "speech_to_text":
        config = transformers.Speech2TextConfig(
            vocab_size=len(tokenizer), d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, input_feat_per_channel=80,
            num_conv_layers=2, conv_channels=32, conv_kernel_sizes=[5, 5], init_std=0.5, **ids)
        model, features = transformers.Speech2TextForConditionalGeneration, transformers.Speech2TextFeatureExtractor(
            feature_size=80, num_mel_bins=80)
    else:
        config = transformers.MoonshineConfig(
            vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, encoder_num_hidden_layers=2,
            decoder_num_hidden_layers=2, encoder_num_attention_heads=4, decoder_num_attention_heads=4,
            initializer_range=0.5, **ids)
        model, features = transformers.MoonshineForConditionalGeneration, transformers.Wav2Vec2FeatureExtractor()
    torch.manual_seed(0)
    model(config).eval().save_pretrained(folder)
    features.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module", params=FAMILIES)
def model(request, tmp_path_factory):
    return str(tiny(tmp_path_factory.mktemp(request.param) / request.param, request.param))


@pytest.fixture(scope="module")
def wav(tmp_path_factory):
    return clip(tmp_path_factory.mktemp("clips") / "clip.wav", 1.5, subtype="FLOAT")


def transformers_run(folder: str, wav: Path, ids: list[int]):
    from transformers import AutoFeatureExtractor, AutoModelForSpeechSeq2Seq

    network = AutoModelForSpeechSeq2Seq.from_pretrained(folder, attn_implementation="eager").eval()
    samples, rate = soundfile.read(wav, dtype="float32")
    inputs = AutoFeatureExtractor.from_pretrained(folder)(samples, sampling_rate=rate, return_tensors="pt")
    with torch.no_grad():
        return network, inputs, network(**inputs, decoder_input_ids=torch.tensor([ids]), output_attentions=True)


def test_a_given_text_is_teacher_forced_and_the_weights_are_transformers(model, wav):
    from transformers import AutoTokenizer

    result = speech_seq2seq_attention(wav, model, text="the cat sat")
    tokenizer = AutoTokenizer.from_pretrained(model)
    eot = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    ids = [eot, *tokenizer("the cat sat", add_special_tokens=False).input_ids, eot]
    assert result.metadata["target_ids"] == ids and result.metadata["teacher_forced"]
    _, _, out = transformers_run(model, wav, ids)
    for ours, theirs in ((result.cross_attentions, out.cross_attentions),
                         (result.decoder_attentions, out.decoder_attentions),
                         (result.attentions, out.encoder_attentions)):
        torch.testing.assert_close(ours, torch.stack([a[0] for a in theirs]), atol=1e-5, rtol=0)
    positions = result.cross_attentions.shape[-1]
    assert result.metadata["audio_positions"] == positions == len(result.tokens)
    assert result.metadata["seconds_per_position"] == pytest.approx(1.5 / positions)
    assert float(result.cross_attentions.std()) > 1e-3  # heads that differ, not uniform


def test_no_text_is_the_models_own_greedy_transcript(model, wav):
    result = speech_seq2seq_attention(wav, model, max_new_tokens=8)
    network, inputs, _ = transformers_run(model, wav, result.metadata["target_ids"])
    with torch.no_grad():
        greedy = network.generate(**inputs, max_new_tokens=8, do_sample=False, num_beams=1)[0].tolist()
    eot = result.metadata["target_ids"][0]
    assert result.metadata["target_ids"][: len(greedy)] == greedy and result.metadata["target_ids"][-1] == eot
    assert not result.metadata["teacher_forced"]


def test_heatmap_draws_it_as_whispers(run_cli, model, wav, tmp_path):
    assert hearing_kind(model) == "seq2seq"
    found = run_cli("heatmap", "--audio", str(wav), "--model", model, "the cat sat", "--layer", "1", "--head", "2",
                    "--out", str(tmp_path / "h.json"), "--out", str(tmp_path / "h.png"))
    assert found.exit_code == 0, found.stderr
    shown = json.loads((tmp_path / "h.json").read_text())
    result = speech_seq2seq_attention(wav, model, text="the cat sat")
    np.testing.assert_allclose(np.array(shown["panels"][0]["weights"]), result.cross_attentions[1, 2, :-1].numpy(),
                               atol=1e-6)
    assert shown["tokens"] == result.target_tokens[1:] and (tmp_path / "h.png").stat().st_size > 10_000
    terminal = run_cli("heatmap", "--audio", str(wav), "--model", model, "the cat sat", "--layer", "0", "--width", "90")
    assert terminal.exit_code == 0 and "time in seconds" in terminal.stdout, terminal.stderr


def test_attention_that_would_not_fit_is_refused_before_the_encoder_runs(model, wav, monkeypatch):
    from attnviz.errors import ResourceError
    from attnviz.limits import MEMORY_ENV

    monkeypatch.setenv(MEMORY_ENV, "1000")
    with pytest.raises(ResourceError, match="encoder positions"):
        speech_seq2seq_attention(wav, model, text="the cat")
