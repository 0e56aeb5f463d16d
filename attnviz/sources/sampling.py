"""How the next token is chosen, the same on every engine: greedily, or sampled as transformers samples."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import UsageError

MAX_NEW_TOKENS = 4096
"""New tokens one call may ask for (the attention of T tokens costs layers × heads × T² floats)."""


@dataclass(frozen=True)
class Sampling:
    """How the next token is chosen: greedily (the default), or sampled."""

    sample: bool = False
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None

    def check(self) -> None:
        if not self.sample and (self.temperature != 1.0 or self.top_k is not None or self.top_p is not None
                                or self.seed is not None):
            raise UsageError("[[temperature]], [[top_k]], [[top_p]] and [[seed]] choose how to sample; add "
                             "[[sample=True]] (greedy decoding ignores them)")
        if not self.temperature > 0 or self.temperature == float("inf"):
            raise UsageError(f"[[temperature={self.temperature}]] must be a positive number")
        if self.top_k is not None and self.top_k < 1:
            raise UsageError(f"[[top_k={self.top_k}]] must be at least 1")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise UsageError(f"[[top_p={self.top_p}]] must be in (0, 1]")
        from ..config import MAX_SEED

        if self.seed is not None and not 0 <= self.seed <= MAX_SEED:
            raise UsageError(f"[[seed={self.seed}]] must be a whole number from 0 to {MAX_SEED:,} (2⁶³ − 1)")

    def overflow(self) -> UsageError:
        """The error for logits that overflow once divided by the temperature (1e-300: ±inf, a NaN softmax)."""
        return UsageError(f"[[temperature={self.temperature}]] is so small that the logits divided by it overflow; "
                          "use a temperature of 1e-3 or more, or greedy decoding (leave out [[sample=True]])")

    def generate(self, model: Any, **kwargs: Any) -> Any:
        """transformers' ``model.generate(**kwargs)`` sampling this way: its NaN probabilities from an
        overflowing temperature are this error, not a crash."""
        options = self.options(stop_at_eos=kwargs.pop("stop_at_eos", True))
        try:
            return model.generate(**kwargs, **options)
        except RuntimeError as exc:
            if self.sample and "probability tensor contains" in str(exc):
                raise self.overflow() from None
            raise

    def options(self, *, stop_at_eos: bool = True) -> dict[str, Any]:
        """The keyword arguments of transformers' ``generate`` for this choice. Every setting is said
        explicitly, so a checkpoint's own ``generation_config.json`` (beams, penalties, a forced end
        token, top-p) cannot add what the native engine would not do: the engines pick the same tokens."""
        neutral: dict[str, Any] = {"num_beams": 1, "repetition_penalty": 1.0, "no_repeat_ngram_size": 0,
                                   "encoder_no_repeat_ngram_size": 0, "min_length": 0, "bad_words_ids": None,
                                   "suppress_tokens": None, "begin_suppress_tokens": None}
        if not stop_at_eos:  # never the end token, as transformers' min_new_tokens; and none forced at the end
            neutral["forced_eos_token_id"] = None
        if not self.sample:
            return {**neutral, "do_sample": False}
        # 0 and 1.0 switch top-k and top-p off.
        return {**neutral, "do_sample": True, "temperature": self.temperature, "top_k": self.top_k or 0,
                "top_p": 1.0 if self.top_p is None else self.top_p, "min_p": None, "typical_p": 1.0}
