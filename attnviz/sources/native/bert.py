"""BERT (MiniLM included) on our own attention. Mirrors transformers' ``BertModel`` in eval mode."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor, nn

from ...attention import AttentionOutput, MultiHeadAttention, padding_mask
from ..engine import Capture
from .common import ACTIVATIONS, NativeModel, load_layer_norm, load_linear
from .weights import take


class Bert(NativeModel):
    prefixes = ("bert.", "model.")

    def __init__(self, config: dict[str, Any], weights: dict[str, Tensor]) -> None:
        super().__init__(config)
        d, h = config["hidden_size"], config["num_attention_heads"]
        eps = config.get("layer_norm_eps", 1e-12)
        self.act = ACTIVATIONS[config.get("hidden_act", "gelu")]
        self.word = take(weights, "embeddings.word_embeddings.weight")
        self.vocab_rows = self.word.shape[0]
        self.pos = take(weights, "embeddings.position_embeddings.weight")
        self.types = weights.get("embeddings.token_type_embeddings.weight")
        self.ln_embed = load_layer_norm(weights, "embeddings.LayerNorm", d, eps)
        self.layers = []
        for i in range(config["num_hidden_layers"]):
            p = f"encoder.layer.{i}."
            attn = MultiHeadAttention(d, h)
            for ours, theirs in (("q_proj", "attention.self.query"), ("k_proj", "attention.self.key"),
                                 ("v_proj", "attention.self.value"), ("o_proj", "attention.output.dense")):
                load_linear(getattr(attn, ours), weights, p + theirs)
            self.layers.append(nn.ModuleDict({
                "attn": attn,
                "ln_attn": load_layer_norm(weights, p + "attention.output.LayerNorm", d, eps),
                "up": load_linear(nn.Linear(d, config["intermediate_size"]), weights, p + "intermediate.dense"),
                "down": load_linear(nn.Linear(config["intermediate_size"], d), weights, p + "output.dense"),
                "ln_out": load_layer_norm(weights, p + "output.LayerNorm", d, eps),
            }))

    @torch.no_grad()
    def run(
        self, ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor | None, n_layers: int, capture: Capture
    ) -> Iterator[AttentionOutput]:
        t = ids.shape[1]
        x = self.word[ids] + self.pos[:t]  # (B, T, d)
        if self.types is not None:
            x = x + self.types[token_type_ids if token_type_ids is not None else torch.zeros_like(ids)]
        x = self.ln_embed(x)
        mask = padding_mask(attention_mask)
        for i, layer in enumerate(self.layers[:n_layers]):
            out = self.attend(i, layer["attn"], x, capture, mask=mask)
            yield out
            x = layer["ln_attn"](x + out.output)
            del out  # the consumer has this layer's weights: never two layers' matrices held here
            x = layer["ln_out"](x + layer["down"](self.act(layer["up"](x))))

