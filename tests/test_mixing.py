"""Norm-based mixing with the residual and LayerNorm (Kobayashi et al. 2021): the pieces against
transformers' own model (its sub-module outputs, its attention weights), a hand-worked example,
and a brute-force ``[T, T, d]`` computation written out as the authors' code does it."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest
import torch
from conftest import SEED, TINY

from attnviz.attribution import mixing
from attnviz.attribution.mixing import MixingParts
from attnviz.errors import UsageError
from attnviz.sources.mixing import mixing_parts
from attnviz.sources.resolve import load_source

TEXT = "The cat sat on the mat, and the dog sat too."
TOL = dict(atol=1e-5, rtol=1e-5)


def _perturbed(folder: str, tmp_path_factory) -> tuple[object, torch.nn.Module]:
    """The tiny checkpoint with every bias and norm weight moved off its initial 0 or 1 (so b_V, b_O,
    γ and β all count), run by the native engine; and transformers' model of it (eager)."""
    from transformers import AutoModel

    model = AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 1:
                param.add_(0.3 * torch.randn(param.shape, generator=gen))
    out = tmp_path_factory.mktemp("perturbed")
    model.save_pretrained(out, safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (src := Path(folder) / name).is_file():
            shutil.copy(src, out / name)
    return load_source(str(out), engine="native"), model


@pytest.fixture(scope="module")
def models(tiny_hf, tmp_path_factory):
    cache: dict[str, tuple[object, torch.nn.Module]] = {}

    def get(family: str) -> tuple[object, torch.nn.Module]:
        if family not in cache:
            cache[family] = _perturbed(tiny_hf[family], tmp_path_factory)
        return cache[family]

    return get


def _heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """[T, H·d] → [H, T, d]."""
    return x.view(x.shape[0], heads, -1).transpose(0, 1)


def _brute(attn, f, x=None, post=None):
    """The authors' way: every pair vector [T, T, d] at once (Attn-N, AttnRes-N, AttnResLn-N)."""
    v = torch.einsum("hqk,hkd->qkd", attn, f)
    if x is not None:
        v = v + torch.einsum("qk,qd->qkd", torch.eye(attn.shape[-1], dtype=v.dtype), x)
    if post is not None:
        weight, var, eps = post
        v = (v - v.mean(-1, keepdim=True)) / (var[:, None, None] + eps).sqrt() * weight
    return v


def _ratio(v):
    """r_i = ‖Σ_{j≠i} v_ij‖ / (‖Σ_{j≠i} v_ij‖ + ‖v_ii‖), as BertNormOutput computes it."""
    own = torch.diagonal(v, dim1=0, dim2=1).T
    other = (v.sum(1) - own).norm(dim=-1)
    return other / (other + own.norm(dim=-1))


# --- post-LN: BERT ----------------------------------------------------------------------------------


@torch.no_grad()
def test_bert_pieces_sum_to_transformers_post_ln_output_and_match_its_submodules(models):
    source, model = models("bert")
    result, parts = mixing_parts(source, TEXT)
    ids = torch.tensor([result.token_ids])
    real, ln_inputs = {}, {}
    hooks = []
    for n, layer in enumerate(model.encoder.layer):
        hooks.append(layer.attention.output.register_forward_hook(lambda m, a, o, n=n: real.__setitem__(n, o[0])))
        hooks.append(layer.attention.output.LayerNorm.register_forward_pre_hook(
            lambda m, a, n=n: ln_inputs.__setitem__(n, a[0][0])))
    out = model(input_ids=ids, output_hidden_states=True, output_attentions=True)
    for h in hooks:
        h.remove()
    seen = []
    for part in parts:
        n = part.layer
        seen.append(n)
        layer = model.encoder.layer[n].attention
        assert part.post_norm is not None and part.bias_o is not None
        torch.testing.assert_close(mixing.reconstruct(part).float(), real[n], **TOL)
        torch.testing.assert_close(part.layer_output, real[n], **TOL)
        # ‖Σ_h α f‖ and the per-pair terms, recomputed from transformers' value, dense and LayerNorm
        h, heads = out.hidden_states[n][0], part.attentions.shape[0]
        v = _heads(layer.self.value(h), heads)  # [H, T, d_head], b_V included
        w = layer.output.dense.weight  # [d, H·d_head]
        f = torch.einsum("hte,dhe->htd", v, w.view(w.shape[0], heads, -1))
        a = out.attentions[n][0]
        torch.testing.assert_close(mixing.layer_norm_attention(part.attentions, part.transformed).float(),
                                   _brute(a, f).norm(dim=-1), **TOL)
        var = ln_inputs[n].var(-1, unbiased=False)  # the LayerNorm's real input y_i
        ln = layer.output.LayerNorm
        pieces = _brute(a, f, h, (ln.weight, var, ln.eps))
        got = mixing.layernorm_norm_attention(part.attentions, part.transformed, part.residual, part.bias_o,
                                              *part.post_norm)
        torch.testing.assert_close(got.float(), pieces.norm(dim=-1), **TOL)
        torch.testing.assert_close(mixing.mixing_ratio(part).float(), _ratio(pieces), **TOL)
    assert seen == [0, 1]


# --- pre-LN: GPT-2 and the LLaMA family ---------------------------------------------------------------


def _pre_ln_reference(model, family: str, ids: torch.Tensor):
    """x + attention for every layer, from transformers: hidden_states[l] plus the attention module's output."""
    blocks = model.h if family == "gpt2" else model.layers
    outputs = {}
    hooks = [(b.attn if family == "gpt2" else b.self_attn).register_forward_hook(
        lambda m, a, o, n=n: outputs.__setitem__(n, o[0][0])) for n, b in enumerate(blocks)]
    try:
        out = model(input_ids=ids, output_hidden_states=True, output_attentions=True)
    finally:
        for h in hooks:
            h.remove()
    return out, {n: out.hidden_states[n][0] + o for n, o in outputs.items()}


@pytest.mark.parametrize("family", ["gpt2", "llama", "qwen2", "mistral"])
@torch.no_grad()
def test_pre_ln_pieces_sum_to_the_residual_stream_after_attention(models, family):
    source, model = models(family)
    result, parts = mixing_parts(source, TEXT)
    ids = torch.tensor([result.token_ids])
    if family == "mistral":
        assert ids.shape[1] > source.model.window  # the sliding window really cuts some keys
    out, after = _pre_ln_reference(model, family, ids)
    count = 0
    for part in parts:
        count += 1
        assert part.post_norm is None
        assert (part.bias_o is None) == (family in ("llama", "qwen2", "mistral"))
        torch.testing.assert_close(mixing.reconstruct(part).float(), after[part.layer], **TOL)
        torch.testing.assert_close(part.attentions, out.attentions[part.layer][0], **TOL)
        ratio = mixing.mixing_ratio(part)
        assert ratio.shape == (ids.shape[1],) and bool(((ratio >= 0) & (ratio <= 1)).all())
        with pytest.raises(ValueError, match="pre-LN"):
            mixing.mixing_ratio(part, level="layernorm")
    assert count == 2


@torch.no_grad()
def test_grouped_query_heads_read_their_groups_values_through_their_own_w_o(models):
    """LLaMA (2 key/value heads for 4 query heads): ‖Σ_h α f‖ against transformers' v_proj, o_proj, repeat_kv."""
    source, model = models("llama")
    result, parts = mixing_parts(source, TEXT, layers=[1])
    out = model(input_ids=torch.tensor([result.token_ids]), output_hidden_states=True, output_attentions=True)
    (part,) = list(parts)
    attn = model.layers[1].self_attn
    x = model.layers[1].input_layernorm(out.hidden_states[1][0])
    heads = part.attentions.shape[0]
    v = _heads(attn.v_proj(x), model.config.num_key_value_heads).repeat_interleave(heads // 2, dim=0)
    w = attn.o_proj.weight
    f = torch.einsum("hte,dhe->htd", v, w.view(w.shape[0], heads, -1))
    expected = _brute(out.attentions[1][0], f).norm(dim=-1)
    torch.testing.assert_close(mixing.layer_norm_attention(part.attentions, part.transformed).float(), expected, **TOL)
    residual = _brute(out.attentions[1][0], f, out.hidden_states[1][0]).norm(dim=-1)
    got = mixing.residual_norm_attention(part.attentions, part.transformed, part.residual)
    torch.testing.assert_close(got.float(), residual, **TOL)


@torch.no_grad()
def test_own_transformer_config_is_pre_ln_and_sums_to_x_plus_attention():
    source = load_source(TINY)
    result, parts = mixing_parts(source, "the cat sat on the mat", layers=[1])
    (part,) = list(parts)
    assert part.layer == 1 and part.post_norm is None and part.bias_o is not None
    model = source.network
    streams = []
    model(torch.tensor([result.token_ids]), streams=streams)
    block = model.blocks[1]
    expected = streams[1][0] + block.attn(block.ln_attn(streams[1]))[0][0]  # x + attention(LN(x)), recomputed
    torch.testing.assert_close(mixing.reconstruct(part).float(), expected, **TOL)


# --- by hand -----------------------------------------------------------------------------------------


def test_mixing_ratio_worked_by_hand():
    """T = 2, one head, d = 2. f(x_0) = (1, 0), f(x_1) = (0, 1); token 0 attends to itself, token 1
    half and half; residuals x_0 = (0, 1), x_1 = (1, 1); b_O = (0.1, −0.1); LayerNorm γ = (2, 1), ε = 0."""
    attn = torch.tensor([[[1.0, 0.0], [0.5, 0.5]]], dtype=torch.float64)
    f = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]], dtype=torch.float64)
    x = torch.tensor([[0.0, 1.0], [1.0, 1.0]], dtype=torch.float64)
    bias_o = torch.tensor([0.1, -0.1], dtype=torch.float64)
    gamma, beta = torch.tensor([2.0, 1.0], dtype=torch.float64), torch.tensor([0.3, -0.2], dtype=torch.float64)
    parts = MixingParts(0, attn, f, x, bias_o, (gamma, beta, 0.0))

    # Attention alone: token 0 keeps (1, 0) and mixes nothing; token 1 takes (0.5, 0) and keeps (0, 0.5).
    assert mixing.mixing_ratio(parts, level="attention").tolist() == pytest.approx([0.0, 0.5])
    # + residual: token 1 keeps (0, 0.5) + (1, 1) = (1, 1.5).
    assert mixing.mixing_ratio(parts, level="residual").tolist() == pytest.approx([0.0, 0.5 / (0.5 + math.sqrt(3.25))])
    # + LayerNorm, token 1: y = (0.5, 0) + (1, 1.5) + b_O = (1.6, 1.4): mean 1.5, var 0.01, 1/√var = 10.
    # g(0.5, 0) = γ ⊙ (0.25, −0.25) · 10 = (5, −2.5); g(1, 1.5) = γ ⊙ (−0.25, 0.25) · 10 = (−5, 2.5).
    assert mixing.mixing_ratio(parts).tolist() == pytest.approx([0.0, 0.5])
    norms = mixing.layernorm_norm_attention(attn, f, x, bias_o, gamma, beta, 0.0)
    assert norms[1].tolist() == pytest.approx([math.sqrt(31.25)] * 2)
    assert norms[0, 1].item() == 0.0  # token 0 gives token 1's key no weight
    # The pieces, g_i(b_O) and β rebuild LayerNorm(y) itself.
    y = torch.einsum("hqk,hkd->qd", attn, f) + x + bias_o
    expected = torch.nn.functional.layer_norm(y, (2,), gamma, beta, eps=0.0)
    torch.testing.assert_close(mixing.reconstruct(parts), expected)


# --- blocks of rows ------------------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
def test_blocks_of_rows_give_the_numbers_of_the_whole(causal):
    gen = torch.Generator().manual_seed(3)
    h, t, d = 3, 7, 5
    scores = torch.randn(h, t, t, generator=gen, dtype=torch.float64)
    if causal:
        scores = scores.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(), float("-inf"))
    attn = scores.softmax(-1)
    f, x = torch.randn(h, t, d, generator=gen, dtype=torch.float64), torch.randn(t, d, generator=gen, dtype=torch.float64)
    bias_o, gamma, beta = (torch.randn(d, generator=gen, dtype=torch.float64) for _ in range(3))
    parts = MixingParts(0, attn, f, x, bias_o, (gamma, beta, 1e-5))
    whole = mixing.layer_mixing(parts)
    y = torch.einsum("hqk,hkd->qd", attn, f) + x + bias_o
    var = y.var(-1, unbiased=False)
    for level, v in (("attention", _brute(attn, f)), ("residual", _brute(attn, f, x)),
                     ("layernorm", _brute(attn, f, x, (gamma, var, 1e-5)))):
        torch.testing.assert_close(getattr(whole, level), v.norm(dim=-1), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(whole.ratios[level], _ratio(v), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(mixing.pair_vectors(parts, level=level, rows=(3, 6)), v[3:6])
    for rows in (1, 3):
        blocked = mixing.layer_mixing(parts, chunk_rows=rows)
        for level in ("attention", "residual", "layernorm"):
            torch.testing.assert_close(getattr(blocked, level), getattr(whole, level), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(mixing.reconstruct(parts, chunk_rows=rows), mixing.reconstruct(parts))
    torch.testing.assert_close(mixing.reconstruct(parts), torch.nn.functional.layer_norm(y, (d,), gamma, beta, 1e-5))
    assert whole.ratio is whole.ratios["layernorm"]


def test_shapes_are_checked():
    attn, f = torch.rand(2, 3, 3), torch.rand(2, 3, 4)
    with pytest.raises(ValueError, match=r"\[heads, T, T\]"):
        mixing.layer_norm_attention(attn[0], f)
    with pytest.raises(ValueError, match="transformed"):
        mixing.layer_norm_attention(attn, f[:, :2])
    with pytest.raises(ValueError, match="residual"):
        mixing.residual_norm_attention(attn, f, torch.rand(3, 5))
    with pytest.raises(ValueError, match="chunk_rows"):
        mixing.layer_norm_attention(attn, f, chunk_rows=0)


# --- what is refused ------------------------------------------------------------------------------------


def test_sources_without_a_residual_stream_are_refused(tiny_hf, tmp_path):
    from attnviz.sources.saved import SavedSource

    hf = load_source(tiny_hf["gpt2"], engine="hf")
    with pytest.raises(UsageError, match="engine=native"):
        mixing_parts(hf, TEXT)
    saved = SavedSource(load_source(TINY).extract("the cat sat"), tmp_path / "r.npz")
    with pytest.raises(UsageError, match="saved result"):
        mixing_parts(saved, None)
    with pytest.raises(UsageError, match="matrices"):
        mixing_parts(load_source(SEED), None)
    with pytest.raises(UsageError, match="encoder-decoder"):
        mixing_parts(load_source("sample_configs/encoder_decoder.toml"), "我 爱 猫")
    with pytest.raises(UsageError, match="layers=5"):
        mixing_parts(load_source(TINY), "the cat", layers=[5])
