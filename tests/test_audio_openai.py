"""Word timings against openai-whisper itself: ``whisper.timing.find_alignment`` (openai-whisper 20250625, installed
with ``pip install --no-deps openai-whisper tiktoken numba llvmlite more-itertools``: it borrows the installed torch)
run on a random multilingual ``Whisper`` of its own, and attnviz's ``align`` on the same weights mapped by name to
transformers' ``WhisperForConditionalGeneration``, with openai's tokenizer made a transformers one
(tests/audio_models.py). The same words, tokens, starts and ends; the log-mel window openai-whisper computes is the
one attnviz hears."""

from __future__ import annotations

import numba  # noqa: F401  (openai-whisper's DTW)
import numpy as np
import pytest
import soundfile  # noqa: F401  (the sound extra: the test extra installs it; missing, these fail)
import torch
import whisper  # openai-whisper, installed as the README's second command says
from audio_models import clip, openai_whisper_pair
from whisper.timing import find_alignment
from whisper.tokenizer import get_tokenizer

from attnviz.audio.heads_format import openai_mask
from attnviz.audio.hearing import hear
from attnviz.audio.model import load_whisper
from attnviz.audio.timing import align


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    theirs, folder = openai_whisper_pair(tmp_path_factory.mktemp("openai") / "whisper", seed=0, std=0.2)
    return theirs, load_whisper(str(folder))


@pytest.fixture(scope="module")
def wav(tmp_path_factory):
    return clip(tmp_path_factory.mktemp("clips") / "clip.wav", 3.0)


def _theirs(model, language: str, text: str, heard):
    tokenizer = get_tokenizer(multilingual=True, num_languages=99, language=language, task="transcribe")
    tokens = tokenizer.encode(text if language == "zh" else " " + text)
    return tokens, find_alignment(model, tokenizer, tokens, heard.features[0], heard.frames)


def _same(ours, theirs, tokens):
    assert [t.id for t in ours.tokens] == tokens
    assert [(w.word, list(w.tokens), w.start, w.end) for w in ours.words] == \
        [(w.word, list(w.tokens), float(w.start), float(w.end)) for w in theirs]
    np.testing.assert_allclose([w.probability for w in ours.words], [w.probability for w in theirs], rtol=1e-4)
    assert len({w.start for w in ours.words}) > 2  # a path that moves through the clip


def test_the_window_openai_whisper_computes_is_the_one_attnviz_hears(pair, wav):
    _, loaded = pair
    heard = hear(wav, loaded)
    theirs = whisper.log_mel_spectrogram(whisper.pad_or_trim(torch.from_numpy(heard.samples)))
    assert heard.frames == len(heard.samples) // whisper.audio.HOP_LENGTH == 300
    assert (theirs - heard.features[0]).abs().max() < 1e-5


def test_word_timings_equal_find_alignment_with_openais_default_heads(pair, wav):
    """No heads given, none in the checkpoint: both read every head of the last half of the decoder's layers."""
    model, loaded = pair
    text = "hello world, this is a test of the alignment"
    tokens, theirs = _theirs(model, "en", text, hear(wav, loaded))
    _same(align(wav, loaded, text=text, language="en"), theirs, tokens)


def test_word_timings_equal_find_alignment_with_heads_set_by_a_mask_written_here(pair, wav):
    model, loaded = pair
    heads = [(0, 1), (0, 3), (1, 2)]
    saved = model.alignment_heads
    model.set_alignment_heads(openai_mask(heads, 2, 4).encode())
    try:
        text = "the quick brown fox jumps over the lazy dog"
        tokens, theirs = _theirs(model, "en", text, hear(wav, loaded))
        _same(align(wav, loaded, text=text, language="en", heads=heads), theirs, tokens)
    finally:
        model.register_buffer("alignment_heads", saved, persistent=False)


def test_chinese_words_are_split_by_characters_as_openai_splits_them(pair, wav):
    model, loaded = pair
    text = "你好世界，今天天气很好"
    tokens, theirs = _theirs(model, "zh", text, hear(wav, loaded))
    ours = align(wav, loaded, text=text, language="zh")
    _same(ours, theirs, tokens)
    assert "".join(w.word for w in ours.words) == text
