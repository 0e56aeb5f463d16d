"""Word and token timings (attnviz/audio/timing.py, dtw.py, words.py): the DTW against every monotone path of small
matrices and against transformers' ``_dynamic_time_warping``, the median filter against a hand computation and
transformers' ``_median_filter``, token timestamps against transformers' ``_extract_token_timestamps`` called on
``generate``'s own output as ``generate`` calls it, word timings on a cross-attention whose alignment is known, and
words split as openai-whisper splits them."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from attnviz.audio.dtw import dtw, median_filter
from attnviz.audio.model import load_whisper
from attnviz.audio.timing import align, alignment_heads, checked_heads, token_timestamps, word_alignment
from attnviz.audio.transcript import Transcript
from attnviz.audio.whisper import forward
from attnviz.audio.words import split_words
from attnviz.errors import UsageError


def _paths(n: int, m: int):
    """Every monotone path from (0, 0) to (n − 1, m − 1) by steps down, right or diagonal."""
    def walk(i, j):
        if (i, j) == (n - 1, m - 1):
            yield [(i, j)]
            return
        for di, dj in ((1, 0), (0, 1), (1, 1)):
            if i + di < n and j + dj < m:
                for rest in walk(i + di, j + dj):
                    yield [(i, j), *rest]
    return list(walk(0, 0))


def test_dtw_is_the_cheapest_of_every_monotone_path():
    rng = np.random.default_rng(0)
    for n, m in ((1, 1), (1, 4), (4, 1), (2, 3), (3, 3), (3, 5), (4, 5)):
        for _ in range(5):
            x = rng.standard_normal((n, m))
            rows, columns = dtw(x)
            best = min(_paths(n, m), key=lambda path: sum(x[i, j] for i, j in path))
            assert list(zip(rows.tolist(), columns.tolist(), strict=True)) == best


def test_dtw_follows_a_known_path():
    x = np.ones((3, 5))
    for i, j in ((0, 0), (0, 1), (1, 2), (2, 3), (2, 4)):
        x[i, j] = 0.0
    rows, columns = dtw(x)
    assert rows.tolist() == [0, 0, 1, 2, 2] and columns.tolist() == [0, 1, 2, 3, 4]


def test_dtw_equals_transformers_ties_included():
    from transformers.models.whisper.generation_whisper import _dynamic_time_warping

    rng = np.random.default_rng(1)
    shapes = [(20, 150), (7, 3), (1, 9)] + [tuple(rng.integers(1, 7, 2)) for _ in range(60)]
    for k, (n, m) in enumerate(shapes):
        x = rng.standard_normal((n, m)) if k < 3 else rng.integers(0, 3, (n, m)).astype(float)  # ties
        for got, want in zip(dtw(x), _dynamic_time_warping(x), strict=True):
            np.testing.assert_array_equal(got, want)


def test_the_median_filter_by_hand_and_as_transformers():
    from transformers.models.whisper.generation_whisper import _median_filter

    x = torch.tensor([1.0, 5.0, 2.0, 8.0, 3.0])
    # width 3, reflected edges: [5, 1, 5, 2, 8, 3, 8] → medians of each three
    assert median_filter(x, 3).tolist() == [5.0, 2.0, 5.0, 3.0, 8.0]
    assert torch.equal(median_filter(x[:1], 3), x[:1])  # no longer than the half-width: left as it is
    weights = torch.randn(2, 3, 9, 40)
    assert torch.equal(median_filter(weights, 7), _median_filter(weights, 7))
    with pytest.raises(ValueError, match="odd"):
        median_filter(x, 4)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    import soundfile  # noqa: F401  (the test extra installs the sound extra)
    from audio_models import tiny_whisper

    return load_whisper(str(tiny_whisper(tmp_path_factory.mktemp("whisper") / "tiny", init_std=0.4, seed=2,
                                         layers=(2, 3), heads=(2, 4))))


@pytest.fixture(scope="module")
def wav(tmp_path_factory):
    from audio_models import clip

    return clip(tmp_path_factory.mktemp("clips") / "clip.wav", 1.5)


@pytest.mark.parametrize("heads", [[(2, 0), (2, 1), (2, 2), (2, 3)], [(1, 3), (0, 2), (2, 1)]])
def test_token_timestamps_equal_transformers_extract_token_timestamps(model, wav, heads):
    """transformers' own function on ``generate``'s own output, called as ``generate`` calls it (its frames and the
    prompt's length), against ours on the teacher-forced pass over the tokens it generated."""
    from attnviz.audio.hearing import hear

    heard = hear(wav, model)
    with torch.no_grad():
        out = model.network.generate(heard.features, language="en", task="transcribe", do_sample=False, num_beams=1,
                                     max_new_tokens=20, return_timestamps=False, return_dict_in_generate=True,
                                     output_attentions=True)
        want = model.network._extract_token_timestamps(out, [list(h) for h in heads], num_frames=heard.frames,
                                                       num_input_ids=4)[0].numpy()
    generated = out.sequences[0].tolist()
    run = forward(wav, model, text=None, language="en", task="transcribe", max_new_tokens=len(generated) - 5,
                  encoder=False)
    assert run.read.ids[:-1] == generated[:-1]  # generate never reads its last token; ours reads end of text there
    got = token_timestamps(run.cross, heads, heard.positions, len(run.read.prompt))
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert len(set(np.round(want, 2))) > 3  # a path that moves, not one column


def test_token_timestamps_equal_generates_own(model, wav):
    """What ``generate(return_token_timestamps=True)`` itself returns, with the frames its attention mask gives."""
    heard = __import__("attnviz.audio.hearing", fromlist=["hear"]).hear(wav, model)
    extracted = model.features(heard.samples, sampling_rate=16_000, return_tensors="pt", return_attention_mask=True)
    with torch.no_grad():
        out = model.network.generate(extracted.input_features, attention_mask=extracted.attention_mask, language="en",
                                     task="transcribe", do_sample=False, num_beams=1, max_new_tokens=12,
                                     return_timestamps=False, return_dict_in_generate=True,
                                     return_token_timestamps=True)
    run = forward(wav, model, text=None, language="en", task="transcribe", max_new_tokens=11, encoder=False)
    got = token_timestamps(run.cross, alignment_heads(model), heard.positions, 4)
    np.testing.assert_allclose(got, out["token_timestamps"][0].numpy(), atol=1e-6)


def _decode(ids):
    """A byte-level decoder for the hand-made transcripts: each id its bytes, end of text (9) written out."""
    table = {0: b" hello", 1: b" world", 2: b",", 3: b" wh", 4: b"ere", 9: b"<|endoftext|>",
             5: "你".encode()[:2], 6: "你".encode()[2:] + "好".encode()[:1], 7: "好".encode()[1:]}
    return b"".join(table[i] for i in ids).decode("utf-8", errors="replace")


def test_words_are_split_as_openai_whisper_splits_them():
    words, groups = split_words([0, 3, 4, 2, 1, 9], _decode, 9, "en")
    assert words == [" hello", " where", ",", " world", "<|endoftext|>"]
    assert groups == [[0], [3, 4], [2], [1], [9]]
    words, groups = split_words([5, 6, 7, 9], _decode, 9, "zh")  # characters cut across tokens
    assert words == ["你好", "<|endoftext|>"] and groups == [[5, 6, 7], [9]]


def test_word_timings_follow_a_known_alignment():
    """A cross-attention whose k-th text row (from no-timestamps on) looks at positions 10k to 10k + 9 of 50: each
    token starts where its row's block starts, openai-whisper's steps put the path there, and each word spans its
    tokens."""
    prompt, text, eot = (7, 8, 9 + 100, 10 + 100), (0, 3, 4, 1), 9
    read = Transcript(prompt, text, eot, "en", "transcribe", True, True)
    rows = len(prompt) + len(text) + 1
    cross = torch.full((1, 1, rows, 1500), 1e-6)
    for k in range(len(text) + 1):  # row 3 (no-timestamps) predicts text[0], ..., the last text row end of text
        cross[0, 0, len(prompt) - 1 + k, 10 * k : 10 * k + 10] = 1.0
    logits = torch.zeros(rows, 200)
    alignment = word_alignment(cross.log(), logits, read, 50, _decode, 50.0, [(0, 0)])
    assert [(t.id, t.start, t.end) for t in alignment.tokens] == [(0, 0.0, 0.2), (3, 0.2, 0.4), (4, 0.4, 0.6),
                                                                     (1, 0.6, 0.8)]
    assert [(w.word, w.tokens, w.start, w.end) for w in alignment.words] == [
        (" hello", (0,), 0.0, 0.2), (" where", (3, 4), 0.2, 0.6), (" world", (1,), 0.6, 0.8)]
    assert alignment.words[0].probability == pytest.approx(1 / eot)  # uniform logits over the text tokens


def test_align_end_to_end_gives_the_texts_words_in_order(model, wav):
    alignment = align(wav, model, text="hello world, the cat", language="en")
    assert [w.word for w in alignment.words] == [" hello", " world", ",", " the", " cat"]
    starts = [w.start for w in alignment.words]
    assert starts == sorted(starts) and all(0 <= w.start <= w.end <= 1.5 for w in alignment.words)
    assert alignment.heads == tuple(alignment_heads(model)) and alignment.duration == 1.5


def test_the_heads_default_to_the_config_then_the_last_half_of_the_layers(model, tmp_path):
    assert alignment_heads(model) == [(2, 0), (2, 1), (2, 2), (2, 3)]  # the tiny model's generation config
    assert alignment_heads(model, [[1, 2], (0, 1)]) == [(1, 2), (0, 1)]
    saved = model.network.generation_config.alignment_heads
    try:
        del model.network.generation_config.alignment_heads
        assert alignment_heads(model) == [(1, h) for h in range(4)] + [(2, h) for h in range(4)]  # layers 3 // 2 on
    finally:
        model.network.generation_config.alignment_heads = saved


def test_bad_heads_are_one_line():
    for heads, words in (([(3, 0)], "outside the decoder's 3 layers"), ([(0, 4)], "outside"),
                         ([(0, 1), (0, 1)], "named twice"), ([], "names no head"), ([(0,)], r"not a \(layer, head\)"),
                         ([(0.5, 1)], r"not a \(layer, head\)")):
        with pytest.raises(UsageError, match=words):
            checked_heads(heads, 3, 4)


def test_an_empty_transcript_has_no_timings():
    read = Transcript((1, 2, 3, 4), (), 9, "en", "transcribe", True, True)
    alignment = word_alignment(torch.rand(1, 1, 5, 1500), torch.zeros(5, 20), read, 50, _decode, 50.0, [(0, 0)])
    assert alignment.words == () and alignment.tokens == ()


def test_every_path_of_a_small_matrix_is_enumerated():
    """The brute force above is complete: the Delannoy number of paths."""
    assert len(_paths(3, 3)) == 13 and len(_paths(4, 5)) == 129
    assert all(p[0] == (0, 0) and p[-1] == (3, 4) for p in _paths(4, 5))
    assert len({tuple(p) for p in _paths(4, 5)}) == 129
    assert list(itertools.islice(_paths(1, 3), 2)) == [[(0, 0), (0, 1), (0, 2)]]


def test_a_column_the_same_for_every_token_is_zero_not_nan():
    """openai-whisper divides such a column by a standard deviation of 0; here it carries no alignment and is 0."""
    from attnviz.audio.timing import alignment_matrix

    weights = torch.rand(1, 1, 6, 30)
    weights[..., 4] = 0.25  # every token the same at position 4
    matrix = alignment_matrix(weights, [(0, 0)], 30, scores=False, width=1)
    assert torch.isfinite(matrix).all() and torch.equal(matrix[:, 4], torch.zeros(6))
    by_hand = (weights[0, 0] - weights[0, 0].mean(0)) / weights[0, 0].std(0, unbiased=False)
    assert torch.allclose(matrix[:, :4], by_hand[:, :4], atol=1e-6)


def test_the_alignment_matrix_by_hand():
    """Steps 1 to 4 and the mean over heads, with numpy: a softmax over the clip's positions, the z-score over tokens,
    a median of 7 with reflected edges, the mean of two heads."""
    from attnviz.audio.timing import alignment_matrix

    scores = torch.randn(2, 3, 5, 40, dtype=torch.float64).float()
    got = alignment_matrix(scores, [(1, 2), (0, 0)], 30, scores=True).numpy()
    heads = []
    for layer, head in ((1, 2), (0, 0)):
        s = scores[layer, head, :, :30].double().numpy()
        w = np.exp(s - s.max(1, keepdims=True))
        w /= w.sum(1, keepdims=True)
        z = (w - w.mean(0)) / w.std(0)
        padded = np.concatenate([z[:, 3:0:-1], z, z[:, -2:-5:-1]], axis=1)  # reflect by 3
        heads.append(np.median(np.stack([padded[:, k : k + 30] for k in range(7)]), axis=0))
    np.testing.assert_allclose(got, np.mean(heads, axis=0), atol=1e-5)


def test_dtw_rounds_its_cost_table_to_float32_as_openai_does():
    """1 + 1e-9 is 1 in float32: the diagonal is then not strictly cheapest, and the path goes round (openai-whisper's
    dtw_cpu and transformers keep their cost table in float32); in float64 it would go straight."""
    from transformers.models.whisper.generation_whisper import _dynamic_time_warping

    x = np.array([[1.0, 1e-9], [1.0, 0.0]])
    rows, columns = dtw(x)
    assert rows.tolist() == [0, 1, 1] and columns.tolist() == [0, 0, 1]
    assert [a.tolist() for a in _dynamic_time_warping(x)] == [[0, 1, 1], [0, 0, 1]]
