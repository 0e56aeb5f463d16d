"""The config-model source: tokenizes, runs the network a TOML config describes, returns results."""

from __future__ import annotations

import torch

from ..attention import head_value_norms
from ..config import MatrixConfig, ModelConfig, TransformerConfig
from ..errors import InputError, UsageError
from ..explain import ExplainInputs
from ..result import AttentionResult
from .own_model import OwnTransformer, matrix_attention
from .words import word_id, word_tokens


class ConfigSource:
    """A source built from a TOML config: ``extract`` gives every head, ``explain_inputs`` one layer."""

    def __init__(self, cfg: ModelConfig, *, causal: bool | None = None) -> None:
        self.cfg = cfg
        self.name = cfg.name
        self.causal = cfg.causal if causal is None else causal
        self._model = OwnTransformer(cfg).eval() if isinstance(cfg, TransformerConfig) else None

    engine = "config"

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
                "(max_positions); shorten it, pass --truncate, or raise max_positions in the config"
            )
        return tokens, [word_id(t, self.cfg.vocab_size) for t in tokens]

    def extract(
        self,
        text: str | None,
        *,
        pair: str | None = None,
        target: str | None = None,
        truncate: bool = False,
        details: bool = False,
        layers: list[int] | None = None,
        float16: bool = False,
    ) -> AttentionResult:
        """Every head's attention; ``details`` adds the pre-softmax scores and the value vectors.

        ``layers`` keeps only those layers (config models are small: all are computed).
        """
        if pair is not None or target is not None:
            raise UsageError(f"--pair and --target need a model with a real tokenizer; {self.name} is a config model")
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
            value_norms=torch.stack([n[0] for n in norms]).detach(),
            metadata={"engine": "config", "config_type": type(self.cfg).__name__},
        )
        return result.narrowed(layers, float16=float16)

    def extract_batch(self, texts: list[str], **kwargs: object) -> list[AttentionResult]:
        """One result per text (config models are small; each text runs alone)."""
        pairs = kwargs.pop("pairs", None) or [None] * len(texts)
        return [self.extract(t, pair=p, **kwargs) for t, p in zip(texts, pairs, strict=True)]  # type: ignore[arg-type]

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
