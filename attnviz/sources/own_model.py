"""The networks of config models: a seeded transformer, and a single attention layer from given matrices.

Both run :class:`attnviz.attention.MultiHeadAttention`, so what they show is what our attention
computes, with no framework in between.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import cast

import torch
from torch import Tensor, nn

from ..attention import AttentionOutput, MultiHeadAttention, combine_masks, decoding_mask, padding_mask
from ..config import MatrixConfig, TransformerConfig
from ..config.types import Matrix
from .kv_cache import KVCache


def sinusoidal_positions(n_positions: int, d_model: int) -> Tensor:
    """``[n_positions, d_model]``: PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(…) (Vaswani et al. 2017)."""
    pos = torch.arange(n_positions, dtype=torch.float64)[:, None]
    freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model))
    pe = torch.zeros(n_positions, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(pos * freq)
    pe[:, 1::2] = torch.cos(pos * freq)[:, : d_model // 2]
    return pe.float()


class Block(nn.Module):
    """Pre-LayerNorm block: ``x + attn(LN(x))``, then ``x + mlp(LN(x))``."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.ln_attn = nn.LayerNorm(cfg.d_model)
        self.attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, n_kv_heads=cfg.n_kv_heads, bias=cfg.bias)
        self.ln_mlp = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, cfg.d_ff), nn.GELU(), nn.Linear(cfg.d_ff, cfg.d_model))


@torch.no_grad()
def seeded_init(model: nn.Module, cfg: TransformerConfig) -> None:
    """Set every parameter of ``model`` from ``cfg.seed``: one generator, drawn from in the order of
    ``model.named_parameters()``, so the same seed gives the same model anywhere. LayerNorms (modules
    named ``ln_…``) start as the identity (weight 1, bias 0) and draw nothing; the embedding
    (``embed``) is N(0, 1); other weights N(0, init_scale² / fan_in); other biases N(0, 0.02²)."""
    gen = torch.Generator().manual_seed(cfg.seed)
    for name, param in model.named_parameters():
        owner = name.split(".")[-2]
        if owner.startswith("ln_"):
            param.fill_(1.0 if name.endswith("weight") else 0.0)
        elif owner == "embed":
            param.normal_(0.0, 1.0, generator=gen)
        elif name.endswith("weight"):
            param.normal_(0.0, cfg.init_scale / math.sqrt(param.shape[1]), generator=gen)
        else:
            param.normal_(0.0, 0.02, generator=gen)


class OwnTransformer(nn.Module):
    """A small transformer with seeded weights: enough structure for attention worth looking at."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self._init_weights()

    @property
    def layers(self) -> Sequence[Block]:
        """``blocks``, typed: torch's ``nn.ModuleList`` is not generic, its items are plain Modules to mypy."""
        return cast("Sequence[Block]", self.blocks)

    def _init_weights(self) -> None:
        seeded_init(self, self.cfg)

    def forward(
        self, ids: Tensor, attention_mask: Tensor | None = None, *, causal: bool = False, cache: KVCache | None = None,
        streams: list[Tensor] | None = None, grad: bool = False,
    ) -> list[tuple[Tensor, AttentionOutput]]:
        """Run ``ids`` ``[B, T]``; return, per layer, (attention input ``[B, T, d]``, its attention output).

        With a ``cache`` (causal only), ``ids`` are the new tokens after ``cache.length`` earlier ones,
        whose keys and values the cache holds; it is updated, and ``cache.hidden`` is the last
        layer's output (for :meth:`next_token_logits`). A ``streams`` list receives each block's input
        (the residual stream before its LayerNorm), for ``explain``'s first step, and then the last
        block's output. ``grad`` records autograd's graph (gradients with respect to the attention
        weights, :mod:`attnviz.sources.gradients`); by default none is built."""
        with torch.set_grad_enabled(grad):
            return self._forward(ids, attention_mask, causal=causal, cache=cache, streams=streams)

    def _forward(self, ids: Tensor, attention_mask: Tensor | None, *, causal: bool, cache: KVCache | None,
                 streams: list[Tensor] | None) -> list[tuple[Tensor, AttentionOutput]]:
        t = ids.shape[1]
        start = 0 if cache is None else cache.length
        x = self.embed(ids)  # (B, T, d)
        if self.cfg.positions == "sinusoidal":  # computed for the T at hand, never for max_positions
            x = x + sinusoidal_positions(start + t, self.cfg.d_model)[start:].to(x.device)
        future = decoding_mask(start, t, device=ids.device) if causal else None
        mask = combine_masks(None if attention_mask is None else padding_mask(attention_mask), future)
        captured = []
        for i, block in enumerate(self.layers):
            if streams is not None:
                streams.append(x)
            h = block.ln_attn(x)
            out = block.attn(h, mask=mask, past=None if cache is None else cache.past(i))
            if cache is not None:
                cache.keep(i, out)
            captured.append((h, out))
            x = x + out.output
            x = x + block.mlp(block.ln_mlp(x))
        if cache is not None:
            cache.length, cache.hidden = start + t, x
        if streams is not None:
            streams.append(x)
        return captured

    def next_token_logits(self, hidden: Tensor, word_ids: Tensor) -> Tensor:
        """Logits ``[n_words]`` of the next token after ``hidden`` ``[d]``: a LayerNorm without weights,
        then the dot product with each word's embedding (a head tied to the embedding, as GPT-2's),
        divided by √d so that random weights give logits of unit variance (sampling has a choice).
        Recorded by autograd only when ``hidden`` is (a gradient run)."""
        with torch.set_grad_enabled(hidden.requires_grad):
            final = torch.nn.functional.layer_norm(hidden, (self.cfg.d_model,))
            return (self.embed.weight[word_ids] @ final) / math.sqrt(self.cfg.d_model)


def matrix_attention(cfg: MatrixConfig) -> MultiHeadAttention:
    """The single attention layer a ``type = "matrices"`` config writes out, with its exact weights.

    With a ``context`` (cross-attention) W_K and W_V read the context's width; V's heads are
    ``d_v / n_heads`` wide, which may differ from Q's and K's ``d_k / n_heads``."""
    has_bias = any(b is not None for b in (cfg.b_q, cfg.b_k, cfg.b_v, cfg.b_o))
    d_in = len(cfg.x[0])
    mha = MultiHeadAttention(
        d_in,
        cfg.n_heads,
        d_head=cfg.d_qk // cfg.n_heads,
        d_value=cfg.d_v // cfg.n_heads,
        d_context=None if cfg.context is None else len(cfg.context[0]),
        d_out=len(cfg.w_o[0]) if cfg.w_o is not None else None,
        bias=has_bias,
        out_proj=cfg.w_o is not None,
    ).double()
    pairs: list[tuple[nn.Linear, Matrix | None, tuple[float, ...] | None]] = [(mha.q_proj, cfg.w_q, cfg.b_q), (mha.k_proj, cfg.w_k, cfg.b_k), (mha.v_proj, cfg.w_v, cfg.b_v)]
    if mha.o_proj is not None:
        pairs.append((mha.o_proj, cfg.w_o, cfg.b_o))
    with torch.no_grad():
        for linear, weight, bias in pairs:
            linear.weight.copy_(torch.tensor(weight, dtype=torch.float64).T)  # nn.Linear stores [out, in]
            if linear.bias is not None:
                linear.bias.copy_(torch.tensor(bias if bias is not None else [0.0] * linear.out_features))
    return mha
