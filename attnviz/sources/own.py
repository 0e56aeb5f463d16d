"""The config-model source: tokenizes, runs the network a TOML config describes, returns results."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import torch

from ..attention import AttentionOutput, built, head_value_norms
from ..config import MatrixConfig, ModelConfig, TransformerConfig
from ..errors import InputError, UsageError
from ..result import AttentionResult
from .base import Capabilities, ExtractOptions, Source
from .contracts import ExplainInputs, PositionSteps
from .own_model import OwnTransformer, matrix_attention, sinusoidal_positions
from .stepping import Rows
from .tokens import bound_characters
from .words import word_id, word_tokens

if TYPE_CHECKING:  # pragma: no cover
    from .own_seq2seq import OwnSeq2Seq
    from .sampling import Sampling
    from .stepping import CausalModel
    from .stream import LayerStream


class ConfigSource(Source):
    """A source built from a TOML config: ``extract`` gives every head, ``explain_inputs`` one layer."""

    engine = "config"

    def __init__(self, cfg: ModelConfig, *, causal: bool | None = None) -> None:
        self.cfg = cfg
        self.name = cfg.name
        self.causal = cfg.causal if causal is None else causal
        self.network: OwnTransformer | None  # None for a matrices config (one layer, its matrices given)
        self.seq2seq_network: OwnSeq2Seq | None = None  # an encoder-decoder (decoder_layers >= 1): see own_seq2seq
        if isinstance(cfg, TransformerConfig) and cfg.decoder_layers:
            if self.causal:
                raise UsageError(f"{self.name} is an encoder-decoder config model: its encoder reads the whole "
                                 "source and its decoder is always causal; leave out [[causal=True]]")
            from .own_seq2seq import OwnSeq2Seq

            self.seq2seq_network = OwnSeq2Seq(cfg).eval()
            self.network = self.seq2seq_network.encoder  # the encoder-only model of the same config, same weights
        else:
            self.network = OwnTransformer(cfg).eval() if isinstance(cfg, TransformerConfig) else None
        self.capabilities = Capabilities(details=True, value_norms=True, fixed_input=self.network is None,
                                         cross=self.seq2seq_network is not None,
                                         generation=self.network is not None and self.causal
                                         and isinstance(cfg, TransformerConfig) and bool(cfg.vocab))
        if self._cross_matrices:  # one cross-attention layer: no self-attention, so no norms of it
            if self.causal:
                raise UsageError(f"{self.name} is cross-attention (the queries of x over its context), which is "
                                 "never causal: a decoder masks only its own self-attention; leave out [[causal=True]]")
            self.capabilities = replace(self.capabilities, value_norms=False, self_attention=False)

    @property
    def _cross_matrices(self) -> bool:
        """A matrices config with a context: a single cross-attention layer (see :func:`_cross_result`)."""
        return isinstance(self.cfg, MatrixConfig) and self.cfg.context is not None

    @property
    def n_layers(self) -> int:
        return 1 if self.network is None else self.network.cfg.n_layers

    def describe(self) -> str:
        return f"engine config ({type(self.cfg).__name__}), model {self.name}"

    def tokenize(self, text: str | None, *, truncate: bool = False) -> tuple[list[str], list[int]]:
        if isinstance(self.cfg, MatrixConfig):
            if text:
                raise UsageError(
                    f"{self.name} has a fixed input X of {len(self.cfg.x)} rows; leave out TEXT, or use a "
                    "transformer config such as sample_configs/tiny.toml for your own text"
                )
            return list(self.cfg.tokens), [-1] * len(self.cfg.tokens)
        if text is None or not text.strip():
            raise InputError("the text is empty; give a sentence, e.g. \"The cat sat on the mat\"")
        tokens = word_tokens(bound_characters(text, self.cfg.max_positions, truncate, self.name))
        if not tokens:
            raise InputError("the text has no words or symbols to tokenize; give a sentence")
        limit = self.cfg.max_positions
        if len(tokens) > limit and truncate:
            tokens = tokens[:limit]
        elif len(tokens) > limit:
            raise InputError(
                f"the text has {len(tokens)} tokens but {self.name} takes at most {limit} "
                "(max_positions); shorten it, pass [[truncate=True]], or raise max_positions in the config"
            )
        return tokens, [word_id(t, self.cfg.vocab_size) for t in tokens]

    def _extract_batch(self, texts: Sequence[str | None], pairs: list[str | None], options: ExtractOptions) -> list[AttentionResult]:
        """Each text alone (config models are small). Every layer is computed; ``options.layers``
        keeps only those; ``options.details`` adds the pre-softmax scores and the value vectors."""
        return [self._one(text, options) for text in texts]

    def _stream_batch(self, texts: list[str], pairs: list[str | None], options: ExtractOptions) -> LayerStream:
        if self._cross_matrices:  # what streams layers reads token-over-token self-attention: there is none
            from ..analysis.transforms import no_self_attention

            raise UsageError(no_self_attention(self.name, "self", "this", explain=True))
        return super()._stream_batch(texts, pairs, options)

    def _one(self, text: str | None, options: ExtractOptions) -> AttentionResult:
        if self.seq2seq_network is not None:  # encoder, decoder and cross-attention, for options.target
            from .own_seq2seq import extract_seq2seq

            return extract_seq2seq(self, self.seq2seq_network, text, options)
        truncate, details = options.truncate, options.details
        tokens, ids = self.tokenize(text, truncate=truncate)
        if self.network is None:
            inputs = self.explain_inputs(None)
            outs = [_run_matrices(inputs)]  # one layer
            if inputs.context is not None:
                return _cross_result(self.name, inputs, outs[0], options)
            o_weights = [inputs.attention.o_proj]
        else:
            outs = [out for _, out in self.network(torch.tensor([ids]), causal=self.causal)]
            o_weights = [block.attn.o_proj for block in self.network.layers]
        norms = [head_value_norms(o.values, None if w is None else w.weight) for o, w in zip(outs, o_weights, strict=True)]
        result = AttentionResult(
            tokens=tokens,
            token_ids=ids,
            attentions=torch.stack([built(o.weights)[0] for o in outs]),  # (L, H, T, T)
            causal=self.causal,
            model_name=self.name,
            scores=torch.stack([built(o.scores, "scores")[0] for o in outs]) if details else None,
            values=torch.stack([o.values[0] for o in outs]) if details else None,
            queries=torch.stack([built(o.queries, "queries")[0] for o in outs]) if details else None,
            keys=torch.stack([built(o.keys, "keys")[0] for o in outs]) if details else None,
            value_norms=torch.stack([n[0] for n in norms]).detach(),
            attention_mask=_key_mask(self.cfg),  # a matrices config's padded keys stay, weighted 0
            metadata={"engine": "config", "config_type": type(self.cfg).__name__},
        )
        return result.narrowed(None if options.layers is None else list(options.layers), float16=options.float16)


    def check_generates(self) -> None:
        """Refuse, in one line, a config model that cannot decode."""
        if self.seq2seq_network is not None:
            raise UsageError(f"{self.name} is an encoder-decoder config model, which does not generate; read its "
                             "attention over a target text with [[target]] and [[kind=cross]] (heatmap, view), or "
                             "generate with a causal config model such as sample_configs/causal.toml")
        if not self.capabilities.generation:
            raise UsageError(f"{self.name} has no language-model head to generate with: a config model generates "
                             "when it is causal and lists its words (causal = true and vocab = [...] in [model], "
                             "as in sample_configs/causal.toml)")

    def causal_model(self) -> CausalModel:
        """This model ready to decode (refused in one line where it cannot): its stepper, and its ``eos`` word's
        index in its ``vocab`` (what :func:`attnviz.sources.causal.load_causal` returns for it)."""
        from .stepping import CausalModel

        self.check_generates()
        cfg = self.cfg
        assert isinstance(cfg, TransformerConfig)  # check_generates refused the rest
        return CausalModel(self, ConfigStepper(self), [cfg.vocab.index(cfg.eos)] if cfg.eos is not None else [], None)

    def generate(self, prompt: str, *, max_new_tokens: int, sampling: Sampling, stop_at_eos: bool) -> AttentionResult:
        """Continue ``prompt`` word by word from the config's ``vocab``, on a key/value cache (for a source already
        loaded; :func:`attnviz.generate` loads through :func:`attnviz.sources.causal.load_causal` and runs the same
        :func:`attnviz.sources.generated.generate_on`)."""
        from .generated import generate_on

        return generate_on(self.causal_model(), prompt, max_new_tokens=max_new_tokens, sampling=sampling,
                           stop_at_eos=stop_at_eos)

    def explain_inputs(self, text: str | None, layer: int = 0) -> ExplainInputs:
        from ..layer_range import check_layer

        tokens, ids = self.tokenize(text)
        cfg = self.cfg
        if isinstance(cfg, MatrixConfig):  # no network: the one layer of its matrices
            check_layer(layer, owner=self.name, count=1)
            x = torch.tensor(cfg.x, dtype=torch.float64)
            context = None if cfg.context is None else torch.tensor(cfg.context, dtype=torch.float64)
            return ExplainInputs(x, matrix_attention(cfg), tokens, self.causal, self.name, cfg.reference,
                                 context=context,
                                 context_tokens=None if cfg.context_tokens is None else list(cfg.context_tokens),
                                 padding=None if cfg.padding is None else list(cfg.padding))
        network = self.network
        assert network is not None  # a transformer config's
        check_layer(layer, owner=self.name, count=cfg.n_layers)
        streams: list[torch.Tensor] = []
        captured = network(torch.tensor([ids]), causal=self.causal, streams=streams)
        x = captured[layer][0][0]
        return ExplainInputs(x, network.layers[layer].attn, tokens, self.causal, f"{self.name}, layer {layer}",
                             positions=self._positions(ids, layer, streams[layer][0]))

    def _positions(self, ids: list[int], layer: int, summed: torch.Tensor) -> PositionSteps:
        """How layer ``layer``'s X was made: for layer 0 the embedding rows plus the positional encoding."""
        if layer:
            return PositionSteps(None, None, summed, "residual", layer=layer)
        network = self.network
        assert network is not None  # only a transformer config's layers have positions
        embedding = network.embed.weight[torch.tensor(ids)].detach()
        kind = network.cfg.positions
        position = sinusoidal_positions(len(ids), network.cfg.d_model) if kind == "sinusoidal" else None
        return PositionSteps(embedding, position, summed, kind)


# --- matrices configs -------------------------------------------------------------------------------


def _run_matrices(inputs: ExplainInputs) -> AttentionOutput:
    """A matrices config's one layer: the queries of x over the keys of the context (cross-attention)
    or of x itself, padded keys never attended to, later keys too when causal. A query row left with
    no key (causal, and its only keys padding) gets weights 0 and an output of 0 (before W_O's bias)."""
    allowed = None if inputs.padding is None else ~torch.tensor(inputs.padding)[None, None, None, :]  # True = may attend
    context = None if inputs.context is None else inputs.context[None]
    return inputs.attention(inputs.x[None], context, mask=allowed, causal=inputs.causal)


def _key_mask(cfg: ModelConfig) -> list[int]:
    """``attention_mask`` of a matrices config's key positions: 0 where padding (kept in the result,
    weighted 0), 1 elsewhere; empty (all ones) for the rest."""
    padding = cfg.padding if isinstance(cfg, MatrixConfig) else None
    return [] if padding is None else [0 if p else 1 for p in padding]


def _cross_result(name: str, inputs: ExplainInputs, out: AttentionOutput, options: ExtractOptions) -> AttentionResult:
    """A matrices config with a context, laid out as an encoder-decoder's result is: the context's rows
    are the source (``tokens``, the key axis, ``attention_mask`` 0 where padding), x's rows the target
    (``target_tokens``, the query axis), and the layer's weights ``cross_attentions`` ``[1, H, T, S]``.

    The layer has no self-attention, so ``attentions`` holds no layer (``[0, H, S, S]``) rather than a
    made-up one; ``decoder_attentions`` is None. Reading such a result, ``self`` (the default kind)
    means its cross-attention (:func:`attnviz.analysis.transforms.kind_tensor`). With ``details`` the scores
    ``[1, H, T, S]``, queries ``[1, H, T, d_k]``, keys ``[1, H, S, d_k]`` and values ``[1, H, S, d_v]``
    are the cross layer's. ``options.layers`` was checked to be layer 0, the only one."""
    tokens = list(inputs.context_tokens or [])
    weights = built(out.weights)
    n, heads = len(tokens), weights.shape[1]

    def kept(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None or not options.details else t[0][None].detach()

    result = AttentionResult(
        tokens=tokens,
        attentions=torch.zeros(0, heads, n, n),
        attention_mask=[0 if p else 1 for p in inputs.padding] if inputs.padding is not None else [],
        causal=False,
        model_name=name,
        cross_attentions=weights[0][None].detach(),
        target_tokens=list(inputs.tokens),
        target_special=[False] * len(inputs.tokens),
        scores=kept(out.scores), values=kept(out.values), queries=kept(out.queries), keys=kept(out.keys),
        metadata={"engine": "config", "config_type": "MatrixConfig", "attention": "cross"},
    )
    return result.narrowed(None, float16=options.float16)


class ConfigStepper:
    """A causal config model with a ``vocab`` stepping on a key/value cache (:mod:`attnviz.sources.stepping`): the
    prompt goes in as word ids, every later feed as indices into ``vocab``, whose words its logits are over."""

    engine = "config"

    def __init__(self, source: ConfigSource) -> None:
        network = source.network
        assert network is not None  # a config that generates is a transformer's
        self.network, self.name = network, source.name
        cfg = network.cfg
        self.words = torch.tensor([word_id(w, cfg.vocab_size) for w in cfg.vocab])
        self.n_layers, self.n_heads = cfg.n_layers, cfg.n_heads
        self.max_positions: int | None = cfg.max_positions
        self.reset()

    def reset(self) -> None:
        from .kv_cache import KVCache

        self.cache, self.length = KVCache(), 0

    @torch.no_grad()
    def feed(self, ids: list[int], *, rows: Rows = "none",
             every_logit: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        if every_logit:
            raise UsageError(f"{self.name}: a config model gives the logits of its last token only")
        ids_new = torch.tensor([[int(self.words[i]) for i in ids]]) if self.cache.length else torch.tensor([ids])
        outs = list(self.network(ids_new, causal=True, cache=self.cache))  # (a generator: run it to the end)
        self.length = self.cache.length
        logits = self.network.next_token_logits(built(self.cache.hidden, "hidden states")[0, -1], self.words)
        if rows == "none":
            return logits, None
        weights = torch.stack([built(out.weights)[0] for _, out in outs])
        return logits, weights[:, :, -1] if rows == "last" else weights
