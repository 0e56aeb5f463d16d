"""The LLaMA family (LLaMA, Mistral, Qwen2) on our own attention: RoPE, RMSNorm, grouped-query attention.

Mirrors transformers' ``LlamaModel`` / ``MistralModel`` / ``Qwen2Model`` in eval mode with eager
attention and the default rotary embedding (no ``rope_scaling``).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import torch
from torch import Tensor, nn

from ...attention import (
    AttentionOutput,
    MultiHeadAttention,
    rotary_tables,
)
from ...attention.rows import RowMask
from ..engine import Capture
from ..kv_cache import KVCache
from .common import ACTIVATIONS, NativeModel, grad_as_captured, load_linear, tracked
from .weights import take


def rope_parameters(config: dict[str, Any]) -> dict[str, Any]:
    """RoPE settings from either layout: transformers ≥ 5 ``rope_parameters``, or older ``rope_theta``/``rope_scaling``."""
    params = dict(config.get("rope_scaling") or {})
    params.update(config.get("rope_parameters") or {})
    params.setdefault("rope_theta", config.get("rope_theta", 10000.0))
    params.setdefault("rope_type", params.get("type", "default"))
    return params


def unsupported(config: dict[str, Any]) -> str | None:
    """Why the native engine cannot run this config, or None."""
    for block in ("rope_scaling", "rope_parameters"):
        params = config.get(block) or {}
        kind = params.get("rope_type", params.get("type", "default"))
        if kind != "default":
            return f"{block} type {kind!r} is not implemented natively"
    if config.get("mlp_bias"):
        return "mlp_bias is set"
    if (config.get("pretraining_tp") or 1) != 1:
        return "pretraining_tp is not 1"
    return None


class RMSNorm(nn.Module):
    """x / √(mean(x²) + ε) · w, computed in float32 (Zhang & Sennrich 2019)."""

    def __init__(self, weight: Tensor, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight.clone(), requires_grad=False)
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        x32 = x.float()
        return self.weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)


class Llama(NativeModel):
    model_types = {"llama": "LLaMA"}  # noqa: RUF012 (a trait, never changed)
    biased_qkv = False  # Q, K and V carry biases (O does not) whatever the config's attention_bias says
    windowed = False  # every layer slides the config's sliding_window, whatever use_sliding_window says
    prefixes = ("model.",)
    causal = True
    pre_norm = "norm_attn"
    unsupported = staticmethod(unsupported)

    def __init__(self, config: dict[str, Any], weights: dict[str, Tensor]) -> None:
        super().__init__(config)
        d, h = config["hidden_size"], config["num_attention_heads"]
        kv = config.get("num_key_value_heads") or h
        self.d_head = config.get("head_dim") or d // h
        self.theta = float(rope_parameters(config)["rope_theta"])
        eps = config.get("rms_norm_eps", 1e-6)
        self.eps = eps
        qkv_bias = bool(config.get("attention_bias")) or self.biased_qkv
        window = config.get("sliding_window")
        uses_window = self.windowed or config.get("use_sliding_window", False)
        self.window = window if (window and uses_window) else None
        self.act = ACTIVATIONS[config.get("hidden_act", "silu")]
        self.embed = take(weights, "embed_tokens.weight")
        self.vocab_rows = self.embed.shape[0]
        for i in range(config["num_hidden_layers"]):
            p = f"layers.{i}."
            attn = MultiHeadAttention(d, h, d_head=self.d_head, n_kv_heads=kv, bias=qkv_bias)
            if qkv_bias and not config.get("attention_bias"):  # Qwen2: biased Q, K, V but not O
                attn.o_proj = nn.Linear(h * self.d_head, d, bias=False)
            for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
                load_linear(getattr(attn, name), weights, p + "self_attn." + name)
            inter = config["intermediate_size"]
            self.layers.append(nn.ModuleDict({
                "norm_attn": RMSNorm(take(weights, p + "input_layernorm.weight"), eps),
                "attn": attn,
                "norm_mlp": RMSNorm(take(weights, p + "post_attention_layernorm.weight"), eps),
                "gate": load_linear(nn.Linear(d, inter, bias=False), weights, p + "mlp.gate_proj"),
                "up": load_linear(nn.Linear(d, inter, bias=False), weights, p + "mlp.up_proj"),
                "down": load_linear(nn.Linear(inter, d, bias=False), weights, p + "mlp.down_proj"),
            }))

    @property
    def embedding(self) -> Tensor:
        return self.embed

    def final_norm(self, weights: Any) -> nn.Module:
        return RMSNorm(take(weights, "norm.weight"), self.eps)

    @grad_as_captured
    def run(
        self, ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor | None, n_layers: int, capture: Capture,
        cache: KVCache | None = None,
    ) -> Generator[AttentionOutput, None, Tensor]:
        t = ids.shape[1]
        start = 0 if cache is None else cache.length
        x = tracked(self.embed[ids], capture)  # (B, T, d)
        rotary = rotary_tables(torch.arange(start, start + t, device=ids.device), self.d_head, self.theta)
        mask = RowMask.of(attention_mask, t, start=start, window=self.window)  # described, built as far as needed
        for i, layer in enumerate(self.layers[:n_layers]):
            out = self.attend(i, layer["attn"], layer["norm_attn"](x), capture, mask=mask if cache is None else cache.mask_of(i, mask, t), rotary=rotary,
                              past=None if cache is None else cache.past(i))
            if cache is not None:
                cache.keep(i, out)
            yield out
            x = x + out.output
            del out  # the consumer has this layer's weights: never two layers' matrices held here
            h = layer["norm_mlp"](x)
            x = x + layer["down"](self.act(layer["gate"](h)) * layer["up"](h))
        if cache is not None:
            cache.length, cache.hidden = start + t, x
        return x


class Mistral(Llama):
    """Mistral: LLaMA's blocks, every layer on the config's sliding window."""

    model_types = {"mistral": "Mistral"}  # noqa: RUF012 (a trait, never changed)
    windowed = True


class Qwen2(Llama):
    """Qwen2: LLaMA's blocks with biased queries, keys and values (its window only where use_sliding_window says)."""

    model_types = {"qwen2": "Qwen2"}  # noqa: RUF012 (a trait, never changed)
    biased_qkv = True
