"""BERT (MiniLM included) on our own attention. Mirrors transformers' ``BertModel`` in eval mode."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import torch
from torch import Tensor, nn

from ...attention import AttentionOutput, MultiHeadAttention
from ...attention.rows import RowMask
from ..engine import Capture
from .common import ACTIVATIONS, NativeModel, grad_as_captured, load_layer_norm, load_linear, tracked
from .weights import take


class MaskedLMHead(nn.Module):
    """transformers' ``BertLMPredictionHead``: dense, activation, LayerNorm, then the decoder (the word
    embeddings, transposed, unless the checkpoint stores its own) plus a bias per vocabulary entry."""

    def __init__(self, dense: nn.Linear, act: Any, norm: nn.LayerNorm, decoder: Tensor, bias: Tensor) -> None:
        super().__init__()
        self.dense, self.act, self.norm = dense, act, norm
        self.decoder, self.bias = decoder, bias  # (V, d), (V,)

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(self.act(self.dense(x))) @ self.decoder.T + self.bias  # (..., V)


class Bert(NativeModel):
    model_types = {"bert": "BERT"}  # noqa: RUF012 (a trait, never changed)
    prefixes = ("bert.", "model.")

    @staticmethod
    def unsupported(config: dict[str, Any]) -> str | None:
        if config.get("position_embedding_type", "absolute") != "absolute":
            return "BERT with relative position embeddings is not implemented natively"
        if config.get("is_decoder"):
            return "BERT as a decoder is not implemented natively"
        return None


    def __init__(self, config: dict[str, Any], weights: dict[str, Tensor]) -> None:
        super().__init__(config)
        d, h = config["hidden_size"], config["num_attention_heads"]
        eps = self.eps = config.get("layer_norm_eps", 1e-12)
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

    def masked_lm_head(self, weights: Any) -> MaskedLMHead | None:
        """The masked-language-model head of a ...ForMaskedLM (or ...ForPreTraining) checkpoint, read
        from its ``cls.predictions.*`` tensors on demand; None where the checkpoint has none (a bare
        encoder such as all-MiniLM-L6-v2)."""
        p = "cls.predictions."
        if p + "transform.dense.weight" not in weights:
            return None
        d = self.word.shape[1]
        decoder = weights.get(p + "decoder.weight", self.word)
        bias = take(weights, p + "bias") if p + "bias" in weights else take(weights, p + "decoder.bias")
        return MaskedLMHead(load_linear(nn.Linear(d, d), weights, p + "transform.dense"), self.act,
                            load_layer_norm(weights, p + "transform.LayerNorm", d, self.eps), decoder, bias)

    @grad_as_captured
    def run(
        self, ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor | None, n_layers: int, capture: Capture
    ) -> Generator[AttentionOutput, None, Tensor]:
        t = ids.shape[1]
        x = self.word[ids] + self.pos[:t]  # (B, T, d)
        if self.types is not None:
            x = x + self.types[token_type_ids if token_type_ids is not None else torch.zeros_like(ids)]
        x = tracked(self.ln_embed(x), capture)
        mask = RowMask.of(attention_mask, t)
        for i, layer in enumerate(self.layers[:n_layers]):
            out = self.attend(i, layer["attn"], x, capture, mask=mask)
            yield out
            x = layer["ln_attn"](x + out.output)
            del out  # the consumer has this layer's weights: never two layers' matrices held here
            x = layer["ln_out"](x + layer["down"](self.act(layer["up"](x))))
        return x

