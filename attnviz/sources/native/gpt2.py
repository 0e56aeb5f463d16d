"""GPT-2 on our own attention. Mirrors transformers' ``GPT2Model`` (eager attention, eval mode)."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from torch import Tensor, nn

from ...attention import AttentionOutput, MultiHeadAttention
from ...attention.rows import RowMask
from ..engine import Capture
from ..kv_cache import KVCache
from .common import ACTIVATIONS, NativeModel, grad_as_captured, load_layer_norm, load_linear, set_parameter, tracked
from .weights import take


def unsupported(config: dict[str, Any]) -> str | None:
    """Why the native engine cannot run this GPT-2 config, or None."""
    if config.get("scale_attn_by_inverse_layer_idx"):
        return "scale_attn_by_inverse_layer_idx is set"
    if config.get("scale_attn_weights") is False:
        return "scale_attn_weights is off"
    if config.get("add_cross_attention"):
        return "it has cross-attention layers"
    return None


class GPT2(NativeModel):
    model_types = {"gpt2": "GPT-2"}  # noqa: RUF012 (a trait, never changed)
    prefixes = ("transformer.",)
    causal = True
    pre_norm = "ln_1"
    unsupported = staticmethod(unsupported)
    ties_embeddings = True  # GPT-2's lm_head is its token embedding

    def __init__(self, config: dict[str, Any], weights: dict[str, Tensor]) -> None:
        super().__init__(config)
        d, h = config["n_embd"], config["n_head"]
        eps = config.get("layer_norm_epsilon", 1e-5)
        inner = config.get("n_inner") or 4 * d
        self.act = ACTIVATIONS[config.get("activation_function", "gelu_new")]
        self.d, self.eps = d, eps
        self.wte, self.wpe = take(weights, "wte.weight"), take(weights, "wpe.weight")
        self.vocab_rows = self.wte.shape[0]
        for i in range(config["n_layer"]):
            p = f"h.{i}."
            attn = MultiHeadAttention(d, h)
            c_attn_w, c_attn_b = take(weights, p + "attn.c_attn.weight"), take(weights, p + "attn.c_attn.bias")
            # Conv1D: one [d, 3d] matrix for Q, K and V, stored [in, out]; each projection is a view of it.
            for j, proj in enumerate((attn.q_proj, attn.k_proj, attn.v_proj)):
                set_parameter(proj, "weight", c_attn_w[:, j * d : (j + 1) * d].T, p + "attn.c_attn.weight")
                set_parameter(proj, "bias", c_attn_b[j * d : (j + 1) * d], p + "attn.c_attn.bias")
            assert attn.o_proj is not None  # MultiHeadAttention's default: out_proj=True
            load_linear(attn.o_proj, weights, p + "attn.c_proj", transpose=True)
            self.layers.append(nn.ModuleDict({
                "ln_1": load_layer_norm(weights, p + "ln_1", d, eps),
                "attn": attn,
                "ln_2": load_layer_norm(weights, p + "ln_2", d, eps),
                "fc": load_linear(nn.Linear(d, inner), weights, p + "mlp.c_fc", transpose=True),
                "proj": load_linear(nn.Linear(inner, d), weights, p + "mlp.c_proj", transpose=True),
            }))

    @property
    def embedding(self) -> Tensor:
        return self.wte

    def final_norm(self, weights: Any) -> nn.Module:
        return load_layer_norm(weights, "ln_f", self.d, self.eps)

    @grad_as_captured
    def run(
        self, ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor | None, n_layers: int, capture: Capture,
        cache: KVCache | None = None,
    ) -> Generator[AttentionOutput, None, Tensor]:
        t = ids.shape[1]
        start = 0 if cache is None else cache.length
        x = tracked(self.wte[ids] + self.wpe[start : start + t], capture)  # (B, T, d)
        mask = RowMask.of(attention_mask, t, start=start)  # described: built only as far as a layer needs
        for i, layer in enumerate(self.layers[:n_layers]):
            out = self.attend(i, layer["attn"], layer["ln_1"](x), capture, mask=mask if cache is None else cache.mask_of(i, mask, t),
                              past=None if cache is None else cache.past(i))
            if cache is not None:
                cache.keep(i, out)
            yield out
            x = x + out.output
            del out  # the consumer has this layer's weights: never two layers' matrices held here
            x = x + layer["proj"](self.act(layer["fc"](layer["ln_2"](x))))
        if cache is not None:
            cache.length, cache.hidden = start + t, x
        return x
