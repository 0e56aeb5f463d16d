"""The config-model source: tokenizes, runs the network a TOML config describes, returns results."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..attention import head_value_norms
from ..config import MatrixConfig, ModelConfig, TransformerConfig
from ..errors import InputError, UsageError
from ..explain_inputs import ExplainInputs
from ..result import AttentionResult
from .base import Capabilities, ExtractOptions, Source
from .own_model import OwnTransformer, matrix_attention
from .words import word_id, word_tokens

if TYPE_CHECKING:  # pragma: no cover
    from ..generation import Sampling


class ConfigSource(Source):
    """A source built from a TOML config: ``extract`` gives every head, ``explain_inputs`` one layer."""

    engine = "config"

    def __init__(self, cfg: ModelConfig, *, causal: bool | None = None) -> None:
        self.cfg = cfg
        self.name = cfg.name
        self.causal = cfg.causal if causal is None else causal
        self._model = OwnTransformer(cfg).eval() if isinstance(cfg, TransformerConfig) else None
        self.capabilities = Capabilities(details=True, value_norms=True, fixed_input=self._model is None,
                                         generation=self._model is not None and self.causal and bool(cfg.vocab))

    @property
    def n_layers(self) -> int:
        return 1 if self._model is None else self.cfg.n_layers

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
        tokens = word_tokens(text)
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

    def _extract_batch(self, texts: list[str], pairs: list[str | None], options: ExtractOptions) -> list[AttentionResult]:
        """Each text alone (config models are small). Every layer is computed; ``options.layers``
        keeps only those; ``options.details`` adds the pre-softmax scores and the value vectors."""
        return [self._one(text, options) for text in texts]

    def _one(self, text: str | None, options: ExtractOptions) -> AttentionResult:
        truncate, details = options.truncate, options.details
        tokens, ids = self.tokenize(text, truncate=truncate)
        if self._model is None:
            inputs = self.explain_inputs(None)
            outs = [inputs.attention(inputs.x[None], causal=self.causal)]  # one layer
            o_weights = [inputs.attention.o_proj]
        else:
            outs = [out for _, out in self._model(torch.tensor([ids]), causal=self.causal)]
            o_weights = [block.attn.o_proj for block in self._model.blocks]
        norms = [head_value_norms(o.values, None if w is None else w.weight) for o, w in zip(outs, o_weights, strict=True)]
        result = AttentionResult(
            tokens=tokens,
            token_ids=ids,
            attentions=torch.stack([o.weights[0] for o in outs]),  # (L, H, T, T)
            causal=self.causal,
            model_name=self.name,
            scores=torch.stack([o.scores[0] for o in outs]) if details else None,
            values=torch.stack([o.values[0] for o in outs]) if details else None,
            queries=torch.stack([o.queries[0] for o in outs]) if details else None,
            keys=torch.stack([o.keys[0] for o in outs]) if details else None,
            value_norms=torch.stack([n[0] for n in norms]).detach(),
            metadata={"engine": "config", "config_type": type(self.cfg).__name__},
        )
        return result.narrowed(None if options.layers is None else list(options.layers), float16=options.float16)


    def generate(self, prompt: str, *, max_new_tokens: int, sampling: Sampling, stop_at_eos: bool) -> AttentionResult:
        """Continue ``prompt`` word by word from the config's ``vocab``, on a key/value cache."""
        from ..decoding import KVCache, decode, sampling_metadata

        if not self.capabilities.generation:
            raise UsageError(f"{self.name} has no language-model head to generate with: a config model generates "
                             "when it is causal and lists its words (causal = true and vocab = [...] in [model], "
                             "as in sample_configs/causal.toml)")
        cfg: TransformerConfig = self.cfg  # type: ignore[assignment]
        tokens, ids = self.tokenize(prompt)
        if len(ids) + max_new_tokens > cfg.max_positions:
            raise InputError(f"the prompt ({len(ids)} tokens) and [[max_new_tokens={max_new_tokens}]] pass the "
                             f"{cfg.max_positions} positions of {self.name}; ask for fewer tokens")
        words = torch.tensor([word_id(w, cfg.vocab_size) for w in cfg.vocab])
        cache = KVCache()

        def step(new: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
            ids_new = torch.tensor([[int(words[i]) for i in new]]) if cache.length else torch.tensor([new])
            outs = self._model(ids_new, causal=True, cache=cache)  # type: ignore[misc]
            return (self._model.next_token_logits(cache.hidden[0, -1], words),  # type: ignore[union-attr, index]
                    torch.stack([out.weights[0] for _, out in outs]))

        eos = [cfg.vocab.index(cfg.eos)] if cfg.eos is not None else []
        # The prompt goes in as word ids; every later step feeds back a vocabulary index.
        done = decode(step, ids, max_new_tokens=max_new_tokens, sampling=sampling, eos_ids=eos, stop_at_eos=stop_at_eos)
        new = [cfg.vocab[i] for i in done.ids[len(ids):]]
        return AttentionResult(
            tokens=tokens + new, token_ids=ids + [word_id(w, cfg.vocab_size) for w in new],
            attentions=done.attentions, causal=True, model_name=self.name,
            metadata={"engine": "config", "config_type": "TransformerConfig", "generation": True,
                      "prompt_length": len(ids), "sampling": sampling_metadata(sampling),
                      "stopped_at_eos": done.stopped_at_eos},
        )

    def explain_inputs(self, text: str | None, layer: int = 0) -> ExplainInputs:
        tokens, ids = self.tokenize(text)
        if self._model is None:
            if layer != 0:
                raise UsageError(f"layer {layer} is out of range: {self.name} has one attention layer, layer 0")
            x = torch.tensor(self.cfg.x, dtype=torch.float64)
            return ExplainInputs(x, matrix_attention(self.cfg), tokens, self.causal, self.name, self.cfg.reference)
        n_layers = self.cfg.n_layers
        if not 0 <= layer < n_layers:
            raise UsageError(f"layer {layer} is out of range: {self.name} has layers 0 to {n_layers - 1}")
        captured = self._model(torch.tensor([ids]), causal=self.causal)
        x = captured[layer][0][0]
        return ExplainInputs(x, self._model.blocks[layer].attn, tokens, self.causal, f"{self.name}, layer {layer}")
