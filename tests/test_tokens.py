"""Readable tokens, and the --hide-special / --words views, checked by hand."""

from __future__ import annotations

import torch

import attnviz
from attnviz.analysis.transforms import drop_special, to_words
from attnviz.result import AttentionResult
from attnviz.sources.tokens import label_from_piece


def test_byte_level_labels_strip_the_space_marker(tiny_hf):
    r = attnviz.extract("The cat  sat\non the mat", model=tiny_hf["gpt2"])
    assert not any("Ġ" in t or "Ċ" in t for t in r.tokens)
    assert r.tokens[:2] == ["The", "cat"]
    assert "⏎" in r.tokens and "␣" in r.tokens  # the newline and the extra space are visible


def test_wordpiece_continuations_and_specials(tiny_hf):
    r = attnviz.extract("Unbelievably", model=tiny_hf["bert"])
    assert r.tokens[0] == "[CLS]" and r.tokens[-1] == "[SEP]"
    assert r.special == [True] + [False] * (len(r.tokens) - 2) + [True]
    pieces = r.tokens[1:-1]
    assert len(pieces) > 1 and not pieces[0].startswith("##")
    assert all(p.startswith("##") for p in pieces[1:])
    assert "".join(p.removeprefix("##") for p in pieces) == "Unbelievably"  # original case, from the offsets


def test_llama_bos_is_flagged(tiny_hf):
    r = attnviz.extract("The cat", model=tiny_hf["llama"])
    assert r.tokens[0] == "<s>" and r.special[0] and not any(r.special[1:])


def test_label_from_piece():
    assert label_from_piece("Ġcat") == "cat"
    assert label_from_piece("▁cat") == "cat"
    assert label_from_piece("##ing") == "##ing"
    assert label_from_piece("Ċ") == "⏎"
    assert label_from_piece("Ġ") == "␣"


def _result() -> AttentionResult:
    # [CLS] un ##believ ##able cat [SEP]; rows are arbitrary distributions.
    g = torch.Generator().manual_seed(0)
    attn = torch.softmax(torch.randn(1, 2, 6, 6, generator=g), -1)
    return AttentionResult(
        tokens=["[CLS]", "un", "##believ", "##able", "cat", "[SEP]"],
        attentions=attn,
        special=[True, False, False, False, False, True],
        word_ids=[-1, 0, 0, 0, 1, -1],
    )


def test_words_sum_to_a_word_and_average_from_it():
    r = _result()
    w = to_words(r)
    assert w.tokens == ["[CLS]", "unbelievable", "cat", "[SEP]"]
    a = r.attentions
    # to "unbelievable" (cols 1..3) from "cat" (row 4): the sum over its pieces
    assert torch.isclose(w.attentions[0, 0, 2, 1], a[0, 0, 4, 1] + a[0, 0, 4, 2] + a[0, 0, 4, 3])
    # from "unbelievable" (rows 1..3) to "cat": the mean over its pieces
    assert torch.isclose(w.attentions[0, 1, 1, 2], (a[0, 1, 1, 4] + a[0, 1, 2, 4] + a[0, 1, 3, 4]) / 3)
    # from and to the same word: mean over rows of the sum over columns
    expected = sum(a[0, 0, i, j] for i in (1, 2, 3) for j in (1, 2, 3)) / 3
    assert torch.isclose(w.attentions[0, 0, 1, 1], expected)
    torch.testing.assert_close(w.attentions.sum(-1), torch.ones(1, 2, 4))


def test_hide_special_with_and_without_renormalising():
    r = _result()
    kept = drop_special(r)
    assert kept.tokens == ["un", "##believ", "##able", "cat"]
    torch.testing.assert_close(kept.attentions, r.attentions[:, :, 1:5, 1:5])
    norm = drop_special(r, renormalize=True)
    row = r.attentions[0, 1, 2, 1:5]
    torch.testing.assert_close(norm.attentions[0, 1, 1], row / row.sum())
    torch.testing.assert_close(norm.attentions.sum(-1), torch.ones(1, 2, 4))


def test_words_on_a_real_model():
    r = attnviz.extract("Unbelievably, tokenization works.")
    w = to_words(r)
    assert w.tokens == ["[CLS]", "Unbelievably", ",", "tokenization", "works", ".", "[SEP]"]


def test_sentencepiece_style_tokenizer_without_pre_tokenizer(tiny_hf):
    """Such tokenizers put the whole text in one 'word'; the offsets and ▁ still separate the words."""
    r = attnviz.extract("The cat sat on the mat. Unbelievably", model=tiny_hf["sentencepiece"])
    assert r.tokens[:5] == ["<s>", "The", "cat", "s", "##at"]  # pieces inside a word are continuations
    # The tiny vocabulary has no "U": the tokenizer made it <unk>, and the label says so.
    assert to_words(r).tokens == ["<s>", "The", "cat", "sat", "on", "the", "mat.", "␣[UNK:U]nbelievably"]
    assert [t for t, unknown in zip(r.tokens, r.unknown, strict=True) if unknown] == ["[UNK:U]"]


def test_special_tokens_typed_in_the_text_are_flagged():
    r = attnviz.extract("Hello [SEP] world")
    assert [t for t, s in zip(r.tokens, r.special, strict=True) if s] == ["[CLS]", "[SEP]", "[SEP]"]
    assert "[SEP]" not in drop_special(r).tokens


def test_words_and_hide_special_on_an_encoder_decoder(tiny_hf):
    r = attnviz.extract("Der Hund jagt die Katze.", model=tiny_hf["bart"], target="The dog chased the cat.")
    w = to_words(r)
    assert w.cross_attentions.shape[-1] == len(w.tokens)  # source words on the cross key axis
    torch.testing.assert_close(w.cross_attentions.sum(-1), r.cross_attentions.sum(-1))
    d = drop_special(r)
    assert "<s>" not in d.tokens and "<s>" not in d.target_tokens and "</s>" not in d.target_tokens
    assert d.cross_attentions.shape[-2:] == (len(d.target_tokens), len(d.tokens))
    assert d.decoder_attentions.shape[-1] == len(d.target_tokens)


def test_text_the_vocabulary_lacks_is_labelled_and_flagged_unknown(tmp_path):
    r = attnviz.extract("I love 🍕")  # MiniLM's WordPiece has no token for the emoji
    assert r.tokens == ["[CLS]", "I", "love", "[UNK:🍕]", "[SEP]"]
    assert r.unknown == [False, False, False, True, False]
    back = AttentionResult.load(r.save(tmp_path / "pizza.npz"))
    assert back.tokens == r.tokens and back.unknown == r.unknown and back.model_name == "all-MiniLM-L6-v2"
    assert drop_special(r).unknown == [False, False, True]  # transforms keep the flags in step
    assert attnviz.extract("I love pizza").unknown == [False] * 5


def _word_level():
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "the": 1, "cat": 2}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(["[UNK]"])  # as BERT's tokenizer has it: typed in a text, it stays one token
    return tok


def test_unknown_words_with_a_tiny_tokenizer():
    from attnviz.sources.tokens import encode, unknown_token_id

    tok = _word_level()
    assert unknown_token_id(tok) == 0
    info = encode(tok, "the dog cat [UNK]")
    assert info.labels == ["the", "[UNK:dog]", "cat", "[UNK]"]  # a literal [UNK] is not wrapped again
    assert info.ids == [1, 0, 2, 0] and not any(info.special)


def test_unknown_token_id_of_each_tokenizer_model():
    from tokenizers import Tokenizer, models

    from attnviz.sources.tokens import unknown_token_id

    unigram = Tokenizer(models.Unigram([("<pad>", 0.0), ("<unk>", 0.0), ("a", -1.0)], unk_id=1))
    assert unknown_token_id(unigram) == 1  # Unigram names it only in its JSON form
    assert unknown_token_id(Tokenizer(models.BPE())) is None  # byte-level BPE needs none


def test_old_results_without_an_unknown_id_flag_nothing():
    r = AttentionResult(tokens=["a", "b"], attentions=torch.full((1, 1, 2, 2), 0.5), token_ids=[0, 1])
    assert r.unknown == [False, False]
