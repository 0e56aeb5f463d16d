"""The native engine equals transformers' eager attention; padding never changes an item's attention."""

from __future__ import annotations

import pytest
import torch

import attnviz
from attnviz.errors import InputError, ModelNotFoundError, UsageError
from attnviz.sources.resolve import default_model_folder, load_source

TEXTS = [
    "The cat sat on the mat.",
    "Unbelievably long tokenization splits words into pieces!",
    "A quick brown fox\njumps over the lazy dog.",
]
NATIVE_FAMILIES = ["bert", "gpt2", "llama", "mistral", "qwen2"]


@pytest.fixture(scope="module")
def minilm():
    return str(default_model_folder())


@pytest.mark.parametrize("family", NATIVE_FAMILIES)
@pytest.mark.parametrize("text", TEXTS)
def test_native_equals_transformers_on_tiny_models(tiny_hf, family, text):
    native = attnviz.extract(text, model=tiny_hf[family], engine="native")
    hf = attnviz.extract(text, model=tiny_hf[family], engine="hf")
    assert native.metadata["engine"] == "native" and hf.metadata["engine"] == "hf"
    assert native.token_ids == hf.token_ids and native.tokens == hf.tokens
    torch.testing.assert_close(native.attentions, hf.attentions, rtol=0, atol=1e-5)
    assert native.causal == hf.causal == (family != "bert")


def test_token_ids_match_the_transformers_tokenizer(tiny_hf):
    from transformers import AutoTokenizer

    for family in ("bert", "gpt2", "llama"):
        tok = AutoTokenizer.from_pretrained(tiny_hf[family])
        assert attnviz.extract(TEXTS[0], model=tiny_hf[family]).token_ids == tok(TEXTS[0]).input_ids


@pytest.mark.parametrize("text", [*TEXTS, "注意力机制 is attention."])
def test_native_equals_transformers_on_minilm(minilm, text):
    native = attnviz.extract(text, model=minilm, engine="native")
    hf = attnviz.extract(text, model=minilm, engine="hf")
    assert native.attentions.shape == (6, 12, len(native.tokens), len(native.tokens))
    torch.testing.assert_close(native.attentions, hf.attentions, rtol=0, atol=1e-5)


def test_minilm_sentence_pair(minilm):
    native = attnviz.extract("The cat sat.", model=minilm, pair="It was tired.", engine="native")
    hf = attnviz.extract("The cat sat.", model=minilm, pair="It was tired.", engine="hf")
    torch.testing.assert_close(native.attentions, hf.attentions, rtol=0, atol=1e-5)
    assert native.segment_ids == [0] * 6 + [1] * 5
    assert native.tokens == ["[CLS]", "The", "cat", "sat", ".", "[SEP]", "It", "was", "tired", ".", "[SEP]"]


def test_default_model_is_the_embedded_minilm():
    r = attnviz.extract("The cat sat on the mat.")
    assert r.model_name == "all-MiniLM-L6-v2" and r.metadata["engine"] == "native"
    assert r.attentions.shape[:2] == (6, 12)
    assert r.special[0] and r.special[-1] and not any(r.special[1:-1])


def test_native_details_scores_values_and_norms(minilm):
    """Scores are the pre-softmax logits: their softmax gives the weights; value norms follow Kobayashi."""
    r = attnviz.extract("The cat sat.", model=minilm, details=True)
    assert r.scores is not None and r.values is not None
    torch.testing.assert_close(torch.softmax(r.scores, -1), r.attentions, rtol=0, atol=1e-6)
    source = load_source(minilm)
    w_o = source.model.o_weight(0)  # [d_model, H·d_head]
    d_head = r.values.shape[-1]
    head = 3
    f = r.values[0, head] @ w_o[:, head * d_head : (head + 1) * d_head].T  # f(x_j) for head 3 of layer 0
    torch.testing.assert_close(r.value_norms[0, head], f.norm(dim=-1), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("family", ["bert", "gpt2", "llama"])
@pytest.mark.parametrize("engine", ["native", "hf"])
def test_batch_with_padding_equals_each_item_alone(tiny_hf, family, engine):
    texts = ["Hi", *TEXTS]
    batch = attnviz.extract_batch(texts, model=tiny_hf[family], engine=engine)
    for text, item in zip(texts, batch, strict=True):
        alone = attnviz.extract(text, model=tiny_hf[family], engine=engine)
        assert item.tokens == alone.tokens
        assert item.attentions.shape == alone.attentions.shape  # padded rows and columns removed
        torch.testing.assert_close(item.attentions, alone.attentions, rtol=0, atol=1e-5)


def test_batch_on_minilm(minilm):
    texts = ["Short.", "A somewhat longer sentence than the first one."]
    batch = attnviz.extract_batch(texts, model=minilm)
    for text, item in zip(texts, batch, strict=True):
        torch.testing.assert_close(item.attentions, attnviz.extract(text, model=minilm).attentions, rtol=0, atol=1e-5)


def test_t5_cross_attention(tiny_hf):
    r = attnviz.extract("Der Hund jagt die Katze.", model=tiny_hf["t5"], target="The dog chased the cat.")
    assert r.metadata["engine"] == "fused"  # T5 routes attention through transformers' registry
    assert r.target_tokens[:3] == ["The", "dog", "chased"] and r.tokens[:2] == ["Der", "Hund"]
    n_src, n_tgt = len(r.tokens), len(r.target_tokens)
    assert r.attentions.shape == (2, 4, n_src, n_src)
    assert r.decoder_attentions.shape == (2, 4, n_tgt, n_tgt)
    assert r.cross_attentions.shape == (2, 4, n_tgt, n_src)  # target queries, source keys
    torch.testing.assert_close(r.cross_attentions.sum(-1), torch.ones(2, 4, n_tgt))
    upper = ~torch.ones(n_tgt, n_tgt, dtype=torch.bool).tril()
    assert (r.decoder_attentions[..., upper] == 0).all()  # the decoder is causal


def test_t5_cross_attention_against_transformers(tiny_hf):
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_hf["t5"])
    model = AutoModel.from_pretrained(tiny_hf["t5"], attn_implementation="eager").eval()
    src, tgt = tok("Der Hund.", return_tensors="pt"), tok("The dog.", return_tensors="pt")
    with torch.no_grad():
        out = model(input_ids=src.input_ids, decoder_input_ids=tgt.input_ids, output_attentions=True)
    r = attnviz.extract("Der Hund.", model=tiny_hf["t5"], target="The dog.")
    torch.testing.assert_close(r.cross_attentions, torch.stack([a[0] for a in out.cross_attentions]))


def test_engine_choice_and_errors(tiny_hf, tmp_path):
    with pytest.raises(ModelNotFoundError, match=r"the native engine cannot run .*model_type 't5'"):
        load_source(tiny_hf["t5"], engine="native")
    assert load_source(tiny_hf["t5"]).engine == "fused"  # auto falls back to transformers' registry
    assert load_source(tiny_hf["t5"], engine="hf").engine == "hf"
    assert load_source(tiny_hf["gpt2"]).engine == "native"
    with pytest.raises(UsageError, match=r"^causal applies to \.toml config models"):
        load_source(tiny_hf["gpt2"], causal=True)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelNotFoundError, match=r"has no config\.json"):
        load_source(str(empty))
    with pytest.raises(UsageError, match=r"^target is for encoder-decoder models"):
        attnviz.extract("x", model=tiny_hf["bert"], target="y")


def test_folder_without_weights(tiny_hf, tmp_path):
    import shutil

    folder = tmp_path / "noweights"
    shutil.copytree(tiny_hf["bert"], folder)
    (folder / "model.safetensors").unlink()
    with pytest.raises(ModelNotFoundError, match=r"no \.safetensors weights"):
        load_source(str(folder), engine="native")
    with pytest.raises(ModelNotFoundError, match="transformers could not load"):
        load_source(str(folder))


def test_truncated_safetensors(tiny_hf, tmp_path):
    import shutil

    folder = tmp_path / "cut"
    shutil.copytree(tiny_hf["bert"], folder)
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelNotFoundError, match="may be truncated"):
        load_source(str(folder), engine="native")


def test_max_positions_and_truncate(tiny_hf):
    long_text = " ".join(["cat"] * 100)  # 100 words, the model takes 64 positions
    with pytest.raises(InputError, match=r"102 tokens long but .* takes at most 64; shorten it, or pass truncate=True"):
        attnviz.extract(long_text, model=tiny_hf["bert"])
    r = attnviz.extract(long_text, model=tiny_hf["bert"], truncate=True)
    assert len(r.tokens) == 64 and r.tokens[-1] == "[SEP]"


def test_float16_checkpoint_gives_the_same_numbers_on_both_engines(tiny_hf):
    native = attnviz.extract(TEXTS[0], model=tiny_hf["gpt2_fp16"], engine="native")
    hf = attnviz.extract(TEXTS[0], model=tiny_hf["gpt2_fp16"], engine="hf")
    torch.testing.assert_close(native.attentions, hf.attentions, rtol=0, atol=1e-5)


def test_rope_scaling_falls_back_to_transformers_registry(tiny_hf):
    assert load_source(tiny_hf["llama_rope_scaled"]).engine == "fused"
    with pytest.raises(ModelNotFoundError, match="'linear' is not implemented natively"):
        load_source(tiny_hf["llama_rope_scaled"], engine="native")


@pytest.mark.parametrize("engine", ["native", "hf"])
def test_batch_with_pairs_equals_each_item_alone(tiny_hf, engine):
    texts, pairs = ["The cat sat.", "A dog"], ["It was tired.", None]
    batch = attnviz.extract_batch(texts, model=tiny_hf["bert"], engine=engine, pairs=pairs)
    for text, pair, item in zip(texts, pairs, batch, strict=True):
        alone = attnviz.extract(text, model=tiny_hf["bert"], engine=engine, pair=pair)
        assert item.segment_ids == alone.segment_ids
        torch.testing.assert_close(item.attentions, alone.attentions, rtol=0, atol=1e-5)


def test_hf_batch_on_every_decoder_family(tiny_hf):
    for family in ("mistral", "qwen2", "sentencepiece"):
        batch = attnviz.extract_batch(["Hi", TEXTS[1]], model=tiny_hf[family], engine="hf")
        alone = attnviz.extract("Hi", model=tiny_hf[family], engine="hf")
        torch.testing.assert_close(batch[0].attentions, alone.attentions, rtol=0, atol=1e-5)


def test_bart_encoder_decoder_and_cross(tiny_hf):
    r = attnviz.extract("Der Hund jagt die Katze.", model=tiny_hf["bart"], target="The dog chased the cat.")
    assert r.tokens[0] == "<s>" and r.special[0] and r.target_special[0]
    n_src, n_tgt = len(r.tokens), len(r.target_tokens)
    assert r.cross_attentions.shape == (2, 4, n_tgt, n_src) and r.decoder_attentions.shape == (2, 4, n_tgt, n_tgt)


def test_layer_selection_builds_only_the_matrices_asked_for(minilm, monkeypatch):
    import attnviz.attention as attention

    full = attnviz.extract(TEXTS[0], model=minilm)
    calls = {"weights": 0, "layers": 0}
    real_weights, real_forward = attention.attention_weights, attention.MultiHeadAttention.forward

    def counting_weights(*args, **kwargs):
        calls["weights"] += 1
        return real_weights(*args, **kwargs)

    def counting_forward(self, *args, **kwargs):
        calls["layers"] += 1
        return real_forward(self, *args, **kwargs)

    monkeypatch.setattr(attention, "attention_weights", counting_weights)
    monkeypatch.setattr(attention.MultiHeadAttention, "forward", counting_forward)
    part = attnviz.extract(TEXTS[0], model=minilm, layers=[2])
    assert calls == {"weights": 1, "layers": 3}  # one matrix built; layers 3–5 never run
    assert part.metadata["layers"] == [2] and part.attentions.shape[0] == 1
    torch.testing.assert_close(part.attentions[0], full.attentions[2], rtol=0, atol=1e-6)


def test_fused_path_gives_the_same_output():
    from attnviz.attention import MultiHeadAttention, causal_mask, combine_masks, padding_mask

    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4).double()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    mask = combine_masks(padding_mask(torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])), causal_mask(5))
    with_weights = mha(x, mask=mask)
    fused = mha(x, mask=mask, need_weights=False)
    assert fused.weights is None and fused.scores is None
    torch.testing.assert_close(fused.output, with_weights.output)


def test_heatmap_of_a_layer_not_captured_is_a_clear_error(minilm):
    from attnviz.views.heatmap import heatmap_view

    part = attnviz.extract(TEXTS[0], model=minilm, layers=[1, 4])
    assert "· layer 4 ·" in heatmap_view(part, layer=4).title
    with pytest.raises(UsageError, match="layer 2 was not captured; this result holds layers 1, 4"):
        heatmap_view(part, layer=2)
    with pytest.raises(UsageError, match=r"layers=6 is out of range; .* has layers 0 to 5"):
        attnviz.extract(TEXTS[0], model=minilm, layers=[6])


@pytest.mark.parametrize("model", ["minilm", "gpt2", "t5", "tiny"])
def test_float16_storage_is_close_to_float32(minilm, tiny_hf, model):
    from conftest import TINY

    path = {"minilm": minilm, "gpt2": tiny_hf["gpt2"], "t5": tiny_hf["t5"], "tiny": TINY}[model]
    full = attnviz.extract(TEXTS[1], model=path)
    half = attnviz.extract(TEXTS[1], model=path, float16=True)
    assert half.attentions.dtype == torch.float16 and full.attentions.dtype == torch.float32
    torch.testing.assert_close(half.attentions.float(), full.attentions, rtol=0, atol=1e-3)


def test_long_input_layers_land_in_one_buffer(minilm):
    """One unpadded item: the result's attentions are the engine's buffer, not a copy of it."""
    source = load_source(minilm)
    r = source.extract(" ".join(["word"] * 300), float16=True)
    assert r.attentions.shape == (6, 12, 302, 302) and r.attentions.is_contiguous()
    torch.testing.assert_close(r.attentions.float().sum(-1), torch.ones(6, 12, 302), rtol=0, atol=2e-2)
