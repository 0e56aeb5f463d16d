"""``explain`` on real checkpoints, the inputs side: what the native engine hands the walkthrough
(one layer's attention input X, its module, the rotary tables) equals what transformers computes.

transformers is the independent reference throughout: X is checked against its hidden states, the
attention weights computed from X against its ``output_attentions``.
"""

from __future__ import annotations

import math

import pytest
import torch

from attnviz.attention import apply_rotary
from attnviz.errors import InputError, UsageError
from attnviz.explain import walkthrough
from attnviz.sources.resolve import default_model_folder, load_source

TEXT = "The cat sat on the mat."


def _transformers(folder: str) -> torch.nn.Module:
    """The checkpoint as transformers builds it, with eager attention (it returns the weights)."""
    from transformers import AutoModel

    return AutoModel.from_pretrained(folder, attn_implementation="eager").eval()


@torch.no_grad()
def _reference(model: torch.nn.Module, ids: list[int]):
    return model(input_ids=torch.tensor([ids]), output_hidden_states=True, output_attentions=True)


def _ids(source, text: str) -> list[int]:
    return source.encode(text).ids


def test_minilm_x_and_every_heads_weights_equal_transformers():
    folder = str(default_model_folder())
    source = load_source()  # the embedded default, by its name
    inputs = source.explain_inputs(TEXT, 2)
    from transformers import AutoTokenizer

    ids = AutoTokenizer.from_pretrained(folder)(TEXT).input_ids
    assert _ids(source, TEXT) == ids
    assert [t.lower() for t in inputs.tokens] == ["[cls]", "the", "cat", "sat", "on", "the", "mat", ".", "[sep]"]
    assert (inputs.title, inputs.causal, inputs.rotary, inputs.padding, inputs.model_kind) == (
        "all-MiniLM-L6-v2, layer 2", False, None, None, "model")
    assert inputs.x.dtype == inputs.attention.q_proj.weight.dtype
    out = _reference(_transformers(folder), ids)
    torch.testing.assert_close(inputs.x, out.hidden_states[2][0], rtol=0, atol=1e-5)
    walk = walkthrough(inputs)
    assert len(walk.heads) == 12
    for h, head in enumerate(walk.heads):
        torch.testing.assert_close(head.weights, out.attentions[2][0, h].double(), rtol=0, atol=1e-5)


@pytest.mark.parametrize("layer", [0, 1])
def test_gpt2_x_is_ln_1_of_the_hidden_state_and_the_weights_equal_transformers(tiny_hf, layer):
    source = load_source(tiny_hf["gpt2"])
    inputs = source.explain_inputs(TEXT, layer)
    assert inputs.causal and inputs.rotary is None and inputs.title.endswith(f", layer {layer}")
    model = _transformers(tiny_hf["gpt2"])
    out = _reference(model, _ids(source, TEXT))
    with torch.no_grad():
        x = model.h[layer].ln_1(out.hidden_states[layer])[0]
    torch.testing.assert_close(inputs.x, x, rtol=0, atol=1e-5)
    walk = walkthrough(inputs)
    for h, head in enumerate(walk.heads):
        torch.testing.assert_close(head.weights, out.attentions[layer][0, h].double(), rtol=0, atol=1e-5)


def _weights_by_hand(inputs) -> torch.Tensor:
    """softmax(RoPE(Q) RoPE(K)ᵀ / √d + causal mask) from X and the module's weights, written out here
    (not attnviz's walkthrough): ``[H, T, T]``."""
    mha, x = inputs.attention, inputs.x.double()
    t, d = x.shape[0], mha.d_head
    cos, sin = (table.double() for table in inputs.rotary)

    def project(linear: torch.nn.Linear, heads: int) -> torch.Tensor:
        y = x @ linear.weight.double().T + (0 if linear.bias is None else linear.bias.double())
        return apply_rotary(y.view(t, heads, d).transpose(0, 1), cos, sin)  # (heads, T, d)

    q = project(mha.q_proj, mha.n_heads)
    k = project(mha.k_proj, mha.n_kv_heads).repeat_interleave(mha.n_heads // mha.n_kv_heads, dim=0)
    scores = q @ k.transpose(1, 2) / math.sqrt(d)
    later = torch.ones(t, t, dtype=torch.bool).triu(1)
    return torch.softmax(scores.masked_fill(later, float("-inf")), dim=-1)


@pytest.mark.parametrize(("family", "text"), [("llama", TEXT), ("qwen2", TEXT), ("mistral", "The cat")])
def test_rope_families_give_the_rotary_tables_that_reproduce_transformers(tiny_hf, family, text):
    source = load_source(tiny_hf[family])
    inputs = source.explain_inputs(text, 1)
    assert inputs.causal and inputs.rotary is not None
    ids = _ids(source, text)
    model = _transformers(tiny_hf[family])
    out = _reference(model, ids)
    with torch.no_grad():
        x = model.layers[1].input_layernorm(out.hidden_states[1])[0]
        cos, sin = model.rotary_emb(out.hidden_states[1], torch.arange(len(ids))[None])
    torch.testing.assert_close(inputs.x, x, rtol=0, atol=1e-5)
    torch.testing.assert_close(inputs.rotary[0], cos[0], rtol=0, atol=1e-6)
    torch.testing.assert_close(inputs.rotary[1], sin[0], rtol=0, atol=1e-6)
    assert inputs.attention.n_kv_heads == 2 < inputs.attention.n_heads == 4  # grouped-query attention
    torch.testing.assert_close(_weights_by_hand(inputs), out.attentions[1][0].double(), rtol=0, atol=1e-5)


def test_a_sliding_window_shorter_than_the_text_is_refused(tiny_hf):
    source = load_source(tiny_hf["mistral"])  # sliding_window = 5
    with pytest.raises(UsageError, match=r"sliding window of 5 tokens and the text has 8.*at most 5 tokens"):
        source.explain_inputs(TEXT, 0)


def test_layer_out_of_range_and_empty_text(tiny_hf):
    source = load_source(tiny_hf["gpt2"])
    for layer in (2, -1):
        with pytest.raises(UsageError, match=f"layer={layer} is out of range; gpt2 has layers 0 to 1") as caught:
            source.explain_inputs(TEXT, layer)
        assert caught.value.for_cli({"layer": "--layer"}).startswith(f"--layer {layer} is out of range")
    with pytest.raises(InputError) as extracting:
        source.extract("  ")
    with pytest.raises(InputError) as explaining:
        source.explain_inputs("  ", 0)
    assert str(explaining.value) == str(extracting.value)
    assert not source.model.layers[0]["attn"]._forward_pre_hooks  # the recording hook is gone


def test_the_transformers_engine_says_explain_needs_the_native_one(tiny_hf):
    with pytest.raises(UsageError, match=r"needs the native engine .* pass engine=native$"):
        load_source(tiny_hf["gpt2"], engine="hf").explain_inputs(TEXT, 0)
    with pytest.raises(UsageError, match="t5 model it cannot run; explain a checkpoint of those families"):
        load_source(tiny_hf["t5"]).explain_inputs(TEXT, 0)
