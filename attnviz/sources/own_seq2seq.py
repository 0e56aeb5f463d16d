"""The network of an encoder-decoder config model (``decoder_layers >= 1``): a tiny, seeded T5/BART.

It shows the three kinds of attention an encoder-decoder model has, offline, on attnviz's own
:class:`~attnviz.attention.MultiHeadAttention`:

- the **encoder** is the encoder-only model of the same config (:class:`OwnTransformer`, the same
  parameters for the same seed): ``n_layers`` pre-LayerNorm blocks, bidirectional, over the source;
  a final LayerNorm ``ln_enc`` (identity at initialisation) turns its output into the *memory*;
- the **decoder** embeds the target with the same word-level tokenizer, embedding and sinusoidal
  positions (from position 0), then runs ``decoder_layers`` :class:`DecoderBlock` s, each::

      x = x + self_attn(LN(x))              causal: target token i sees target tokens 0 … i
      x = x + cross_attn(LN(x), memory)     Q = LN(x) W_Q (decoder), K = memory W_K, V = memory W_V
      x = x + mlp(LN(x))

So cross-attention weights are ``[target (queries), source (keys)]``, as transformers returns them
for T5 and BART. Every row of every kind sums to 1.

Parameters come from one generator in the order of ``named_parameters()`` (:func:`seeded_init`):
``encoder.embed``, ``encoder.blocks.*`` (drawn exactly as the encoder-only model's), ``ln_enc``, then
``decoder.0``, ``decoder.1``, … each as ``ln_attn, attn, ln_mlp, mlp, ln_cross, cross_attn``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import torch
from torch import Tensor, nn

from ..attention import AttentionOutput, MultiHeadAttention, head_value_norms
from ..config import TransformerConfig
from ..errors import InputError, UsageError
from ..result import AttentionResult
from .own_model import Block, OwnTransformer, seeded_init, sinusoidal_positions

if TYPE_CHECKING:  # pragma: no cover
    from .base import ExtractOptions

ConfigSource = Any  # an attnviz.sources.own.ConfigSource, named, not imported: own imports this module


class DecoderBlock(Block):
    """A pre-LayerNorm decoder block: :class:`Block`'s causal self-attention (``attn``) and MLP, with
    cross-attention (``ln_cross``, ``cross_attn``) over the encoder's memory between them."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__(cfg)
        self.ln_cross = nn.LayerNorm(cfg.d_model)
        self.cross_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, n_kv_heads=cfg.n_kv_heads, bias=cfg.bias)


class Seq2SeqOutput(NamedTuple):
    """Every attention layer of one forward pass (batch of one or more, same lengths)."""

    encoder: list[AttentionOutput]  # per encoder layer: weights [B, H, S, S]
    decoder: list[AttentionOutput]  # per decoder layer, causal self-attention: weights [B, H, T, T]
    cross: list[AttentionOutput]  # per decoder layer: weights [B, H, T, S]
    memory: Tensor  # [B, S, d]: the encoder's final LayerNorm'd output, the keys' and values' input


class OwnSeq2Seq(nn.Module):
    """An encoder-decoder transformer with seeded weights (see the module's docs)."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        if cfg.decoder_layers < 1:
            raise ValueError("OwnSeq2Seq needs decoder_layers >= 1; use OwnTransformer for an encoder only")
        self.cfg = cfg
        self.encoder = OwnTransformer(cfg)
        self.ln_enc = nn.LayerNorm(cfg.d_model)
        self.decoder = nn.ModuleList(DecoderBlock(cfg) for _ in range(cfg.decoder_layers))
        seeded_init(self, cfg)  # the whole model from one generator; the encoder's draws come first

    @property
    def decoder_layers(self) -> Sequence[DecoderBlock]:
        """``decoder``, typed: torch's ``nn.ModuleList`` is not generic, its items are plain Modules to mypy."""
        return cast("Sequence[DecoderBlock]", self.decoder)

    def embed(self, ids: Tensor) -> Tensor:
        """``[B, T]`` ids → ``[B, T, d]``: the shared embedding, plus sinusoidal positions from 0."""
        x = self.encoder.embed(ids)
        if self.cfg.positions == "sinusoidal":
            x = x + sinusoidal_positions(ids.shape[1], self.cfg.d_model).to(x.device)
        return x

    @torch.no_grad()
    def encode(self, src: Tensor) -> tuple[list[AttentionOutput], Tensor]:
        """The encoder over ``src`` ``[B, S]``: each layer's attention, and the memory ``[B, S, d]``
        (the last block's output through ``ln_enc``). The same computation as ``self.encoder(src)``."""
        x = self.embed(src)
        outs = []
        for block in self.encoder.layers:
            out = block.attn(block.ln_attn(x))
            outs.append(out)
            x = x + out.output
            x = x + block.mlp(block.ln_mlp(x))
        return outs, self.ln_enc(x)

    @torch.no_grad()
    def forward(self, src: Tensor, tgt: Tensor) -> Seq2SeqOutput:
        """Run source ids ``[B, S]`` through the encoder and target ids ``[B, T]`` through the decoder."""
        encoder, memory = self.encode(src)
        x = self.embed(tgt)
        decoder, cross = [], []
        for block in self.decoder_layers:
            own = block.attn(block.ln_attn(x), causal=True)
            x = x + own.output
            over = block.cross_attn(block.ln_cross(x), memory)  # queries from the decoder, keys/values from memory
            x = x + over.output
            x = x + block.mlp(block.ln_mlp(x))
            decoder.append(own)
            cross.append(over)
        return Seq2SeqOutput(encoder, decoder, cross, memory)


def extract_seq2seq(source: ConfigSource, model: OwnSeq2Seq, text: str | None, options: ExtractOptions) -> AttentionResult:
    """The result an encoder-decoder config model gives for ``text`` and ``options.target``, laid out
    as transformers' T5 results are: ``attentions`` the encoder's ``[L_enc, H, S, S]``,
    ``decoder_attentions`` ``[L_dec, H, T, T]`` (causal), ``cross_attentions`` ``[L_dec, H, T, S]``,
    ``target_tokens``. ``details`` and ``value_norms`` describe the encoder's self-attention."""
    cfg = model.cfg
    if options.target is None:
        raise UsageError(f"{source.name} is an encoder-decoder config model: it needs [[target]], the decoder's "
                         "input text (e.g. [[target=\"I love cats\"]]), to show its encoder, decoder and "
                         "cross-attention")
    if options.layers is not None:
        from ..layer_range import check_layers

        try:
            check_layers(options.layers, owner=f"the decoder of {source.name}", count=cfg.decoder_layers)
        except UsageError as exc:
            raise UsageError(f"{exc.template} (the encoder 0 to {cfg.n_layers - 1}); choose layers both have, or "
                             "every layer") from None
    tokens, ids = source.tokenize(text, truncate=options.truncate)
    try:
        target_tokens, target_ids = source.tokenize(options.target, truncate=options.truncate)
    except InputError as exc:
        raise InputError(f"[[target]]: {exc.template}") from None
    out = model(torch.tensor([ids]), torch.tensor([target_ids]))
    enc, details = out.encoder, options.details

    def stack(outs: list[AttentionOutput], part: str) -> Tensor:
        return torch.stack([getattr(o, part)[0] for o in outs])

    o_projs = [block.attn.o_proj for block in model.encoder.layers]
    norms = [head_value_norms(o.values, None if w is None else w.weight)[0] for o, w in zip(enc, o_projs, strict=True)]
    result = AttentionResult(
        tokens=tokens,
        token_ids=ids,
        attentions=stack(enc, "weights"),  # (L_enc, H, S, S)
        causal=False,
        model_name=source.name,
        decoder_attentions=stack(out.decoder, "weights"),  # (L_dec, H, T, T)
        cross_attentions=stack(out.cross, "weights"),  # (L_dec, H, T, S)
        target_tokens=target_tokens,
        target_special=[False] * len(target_tokens),
        scores=stack(enc, "scores") if details else None,
        values=stack(enc, "values") if details else None,
        queries=stack(enc, "queries") if details else None,
        keys=stack(enc, "keys") if details else None,
        value_norms=torch.stack(norms).detach(),
        metadata={"engine": "config", "config_type": "TransformerConfig", "decoder_layers": cfg.decoder_layers,
                  "target_ids": target_ids},
    )
    return result.narrowed(None if options.layers is None else list(options.layers), float16=options.float16)
