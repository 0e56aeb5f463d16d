"""Encoder-decoder config models (decoder_layers >= 1): encoder, decoder and cross-attention offline.

The attention weights are checked against a float64 reference written here from the model's
parameters with torch.nn.functional (layer_norm, gelu, scaled_dot_product_attention), never with
attnviz's own attention.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from conftest import ROOT, write_config

from attnviz import api
from attnviz.analysis.transforms import kind_tensor
from attnviz.config import load_config
from attnviz.errors import ConfigError, InputError, ResourceError, UsageError
from attnviz.sources.own import ConfigSource

ED = str(ROOT / "sample_configs" / "encoder_decoder.toml")
SOURCE, TARGET = "我 爱 猫", "I love little cats ."


@pytest.fixture(scope="module")
def source():
    return ConfigSource(load_config(ED))


@pytest.fixture(scope="module")
def result(source):
    return source.extract(SOURCE, target=TARGET)


# --- the reference: float64, torch.nn.functional, from the parameters ------------------------------

def _ids(words, vocab_size):
    """The word-level tokenizer's ids, from its definition: BLAKE2b (8 bytes, little-endian) mod vocab_size."""
    return [int.from_bytes(hashlib.blake2b(w.encode(), digest_size=8).digest(), "little") % vocab_size for w in words]


def _positions(t, d):
    pe = torch.zeros(t, d, dtype=torch.float64)
    for p in range(t):
        for i in range(0, d, 2):
            pe[p, i] = math.sin(p / 10000 ** (i / d))
            pe[p, i + 1] = math.cos(p / 10000 ** (i / d))
    return pe


def _p(module):
    return {name: param.detach().double() for name, param in module.named_parameters()}


def _ln(x, p, prefix):
    return F.layer_norm(x, x.shape[-1:], p[prefix + ".weight"], p[prefix + ".bias"], eps=1e-5)


def _attention(p, prefix, x, context, n_heads, causal):
    """Weights [H, Tq, Tk] = softmax(Q Kᵀ / √d_head) (causal: keys after the query masked), and the output."""
    def proj(name, inp):
        y = inp @ p[f"{prefix}.{name}.weight"].T + p[f"{prefix}.{name}.bias"]
        return y.view(inp.shape[0], n_heads, -1).transpose(0, 1)  # (H, T, d_head)

    q, k, v = proj("q_proj", x), proj("k_proj", context), proj("v_proj", context)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1), float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    heads = F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # the same weights, applied by torch
    assert torch.allclose(heads, weights @ v, atol=1e-10)
    out = heads.transpose(0, 1).reshape(x.shape[0], -1) @ p[f"{prefix}.o_proj.weight"].T + p[f"{prefix}.o_proj.bias"]
    return weights, out


def _mlp(p, prefix, x):
    h = F.gelu(x @ p[f"{prefix}.mlp.0.weight"].T + p[f"{prefix}.mlp.0.bias"])
    return h @ p[f"{prefix}.mlp.2.weight"].T + p[f"{prefix}.mlp.2.bias"]


def _reference(model, cfg, src_ids, tgt_ids):
    """(encoder [L, H, S, S], decoder [L, H, T, T], cross [L, H, T, S]), pre-LayerNorm, float64."""
    p, h = _p(model), cfg.n_heads
    emb = p["encoder.embed.weight"]
    x = emb[src_ids] + _positions(len(src_ids), cfg.d_model)
    encoder = []
    for i in range(cfg.n_layers):
        pre = f"encoder.blocks.{i}"
        w, out = _attention(p, f"{pre}.attn", _ln(x, p, f"{pre}.ln_attn"), _ln(x, p, f"{pre}.ln_attn"), h, False)
        encoder.append(w)
        x = x + out
        x = x + _mlp(p, pre, _ln(x, p, f"{pre}.ln_mlp"))
    memory = _ln(x, p, "ln_enc")  # keys and values of cross-attention: the encoder's final LayerNorm'd output
    y = emb[tgt_ids] + _positions(len(tgt_ids), cfg.d_model)
    decoder, cross = [], []
    for i in range(cfg.decoder_layers):
        pre = f"decoder.{i}"
        normed = _ln(y, p, f"{pre}.ln_attn")
        w, out = _attention(p, f"{pre}.attn", normed, normed, h, True)
        decoder.append(w)
        y = y + out
        w, out = _attention(p, f"{pre}.cross_attn", _ln(y, p, f"{pre}.ln_cross"), memory, h, False)  # Q: decoder
        cross.append(w)
        y = y + out
        y = y + _mlp(p, pre, _ln(y, p, f"{pre}.ln_mlp"))
    return torch.stack(encoder), torch.stack(decoder), torch.stack(cross)


def test_matches_a_float64_reference(source, result):
    cfg = source.cfg
    assert result.tokens == ["我", "爱", "猫"] and result.target_tokens == ["I", "love", "little", "cats", "."]
    src_ids, tgt_ids = _ids(result.tokens, cfg.vocab_size), _ids(result.target_tokens, cfg.vocab_size)
    assert result.token_ids == src_ids and result.metadata["target_ids"] == tgt_ids
    encoder, decoder, cross = _reference(source.seq2seq_network, cfg, src_ids, tgt_ids)
    assert torch.allclose(result.decoder_attentions[0].double(), decoder[0], atol=1e-5)  # layer 0, by hand
    assert torch.allclose(result.cross_attentions[0].double(), cross[0], atol=1e-5)
    assert torch.allclose(result.decoder_attentions.double(), decoder, atol=1e-5)  # and every layer
    assert torch.allclose(result.cross_attentions.double(), cross, atol=1e-5)
    assert torch.allclose(result.attentions.double(), encoder, atol=1e-5)


def test_shapes_causality_and_rows(result):
    s, t = 3, 5
    assert result.attentions.shape == (2, 4, s, s)
    assert result.decoder_attentions.shape == (2, 4, t, t)
    assert result.cross_attentions.shape == (2, 4, t, s)
    assert not result.causal and result.target_special == [False] * t
    assert bool((result.decoder_attentions.triu(1) == 0).all())  # a target token sees no later one
    for tensor in (result.attentions, result.decoder_attentions, result.cross_attentions):
        assert torch.allclose(tensor.sum(-1), torch.ones(tensor.shape[:-1]), atol=1e-5)
    tensor, rows, cols = kind_tensor(result, "cross")
    assert rows == result.target_tokens and cols == result.tokens  # queries: target; keys: source


def test_encoder_is_the_encoder_only_model_of_the_same_seed(source, result):
    alone = ConfigSource(replace(source.cfg, decoder_layers=0))
    assert not alone.capabilities.cross and source.capabilities.cross
    theirs, ours = alone.network.state_dict(), source.seq2seq_network.encoder.state_dict()
    assert theirs.keys() == ours.keys() and all(torch.equal(theirs[k], ours[k]) for k in theirs)
    assert torch.allclose(alone.extract(SOURCE).attentions, result.attentions, atol=1e-6)
    again = ConfigSource(load_config(ED)).extract(SOURCE, target=TARGET)  # seeded: the same model every time
    assert torch.equal(again.cross_attentions, result.cross_attentions)


def test_cjk_words_layers_details_and_other_depths(source, tmp_path):
    assert source.extract("我爱猫", target="I love cats").tokens == ["我", "爱", "猫"]  # one token per character
    one = source.extract(SOURCE, target=TARGET, layers=[1], details=True)
    assert one.attentions.shape[0] == one.decoder_attentions.shape[0] == one.cross_attentions.shape[0] == 1
    assert one.metadata["layers"] == [1] and one.scores.shape == (1, 4, 3, 3)
    path = write_config(tmp_path, "[model]\nn_layers = 3\ndecoder_layers = 1\nn_heads = 2\nd_model = 8\nd_ff = 16\n")
    deep = ConfigSource(load_config(path))
    r = deep.extract(SOURCE, target="I love cats")
    assert (r.attentions.shape, r.decoder_attentions.shape, r.cross_attentions.shape) == (
        (3, 2, 3, 3), (1, 2, 3, 3), (1, 2, 3, 3))
    with pytest.raises(UsageError, match=r"layers=2 is out of range; the decoder of tiny has layers 0 to 0 \(the encoder 0 to 2\)"):
        deep.extract(SOURCE, target="I love cats", layers=[2])
    with pytest.raises(InputError, match=r"target: the text has 3 tokens but tiny takes at most 2"):
        ConfigSource(replace(deep.cfg, max_positions=2)).extract("我 爱", target="I love cats")


def test_without_a_target_generate_and_causal_are_refused(source):
    with pytest.raises(UsageError, match=r"encoder-decoder config model: it needs target, the decoder's input text"):
        source.extract(SOURCE)
    from attnviz.generation import Sampling

    with pytest.raises(UsageError, match=r"encoder-decoder config model, which does not generate"):
        source.generate(SOURCE, max_new_tokens=2, sampling=Sampling(), stop_at_eos=True)
    with pytest.raises(UsageError, match=r"leave out causal=True"):
        ConfigSource(source.cfg, causal=True)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("decoder_layers = -1\n", r"decoder_layers = -1 must be 0 \(an encoder only\) or more"),
        ("decoder_layers = \"two\"\n", r"decoder_layers = 'two' must be int"),
        ("decoder_layers = 2\ncausal = true\n", r"causal = true does not go with decoder_layers: .* remove causal"),
        ("decoder_layers = 2\nvocab = [\"a\", \"b\"]\n", r"vocab does not go with decoder_layers: .* remove vocab"),
        ("decoder_layers = 2\ncausal = true\nvocab = [\"a\"]\n", r"causal = true does not go with decoder_layers"),
    ],
)
def test_bad_encoder_decoder_configs(tmp_path, body, expected):
    with pytest.raises(ConfigError, match=expected):
        load_config(write_config(tmp_path, "[model]\n" + body))


def test_size_check_counts_the_decoder(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNVIZ_MAX_MEMORY", "1M")  # the encoder alone (d 128, 1 layer: ~0.8 MiB) fits
    body = "[model]\nn_layers = 1\nd_model = 128\nd_ff = 128\nvocab_size = 1024\nmax_positions = 64\n"
    assert load_config(write_config(tmp_path, body)).decoder_layers == 0
    with pytest.raises(ResourceError, match=r"a model of 1 encoder and 2 decoder layers with d_model = 128 needs about"):
        load_config(write_config(tmp_path, body + "decoder_layers = 2\n"))


def test_cli_cross_heatmap_shows_target_rows_and_source_columns(run_cli):
    args = ["heatmap", "我 爱 猫", "--model", ED, "--target", "I love cats"]
    r = run_cli(*args, "--kind", "cross")
    assert r.exit_code == 0, r.stderr
    assert "encoder-decoder-tiny · cross" in r.stdout.splitlines()[0]
    r = run_cli(*args, "--kind", "cross", "--layer", "0", "--values", "--width", "120")
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    value = re.compile(r"\.\d\d|1\.0")
    rows = [ln.split()[0] for ln in lines if len(ln.split()) == 4 and all(value.fullmatch(v) for v in ln.split()[1:])]
    assert rows == ["I", "love", "cats"]  # target tokens on the query axis
    header = next(ln for ln in lines if "我" in ln)
    assert header.split() == ["我", "爱", "猫"]  # source tokens on the key axis
    for kind in ("decoder", "encoder"):
        r = run_cli(*args, "--kind", kind, "--layer", "1", "--values", "--width", "120")
        assert r.exit_code == 0 and "· layer 1" in r.stdout, r.stderr
    r = run_cli("heads", *args[1:], "--kind", "decoder", "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["tokens"] == ["I", "love", "cats"]


def test_cli_errors(run_cli):
    r = run_cli("heatmap", "我 爱 猫", "--model", ED, "--kind", "cross")
    assert r.exit_code == 2 and "it needs --target, the decoder's input text" in r.stderr, r.stderr
    r = run_cli("generate", "我 爱 猫", "--model", ED)
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "does not generate" in r.stderr and "sample_configs/causal.toml" in r.stderr


@pytest.mark.filterwarnings("ignore:a text of 3 token")
def test_page_of_an_encoder_decoder_config(tmp_path, run_cli):
    out = tmp_path / "page.html"
    r = run_cli("view", "我 爱 猫", "--model", ED, "--target", "I love cats", "--kind", "cross", "--page", str(out))
    assert r.exit_code == 0 and out.exists(), r.stderr
    html = out.read_text(encoding="utf-8")
    assert "猫" in html and "cats" in html
    with pytest.raises(UsageError, match="needs target"):
        api.page_view(api.load(ED), "我 爱 猫")
