"""How every command reads a result: without special tokens, rows rescaled, word pieces joined.

Light to import (torch only once a result is read), so commands can check these options before
loading anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import UsageError

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from ..result import AttentionResult


@dataclass(frozen=True)
class Reading:
    """How a result is read, the same for every command: without special tokens (``hide_special``,
    rows rescaled with ``renormalize``), and/or with word pieces joined into words (``words``)."""

    hide_special: bool = False
    renormalize: bool = False
    words: bool = False

    def __post_init__(self) -> None:
        if self.renormalize and not self.hide_special:
            raise UsageError("[[renormalize=True]] rescales rows after [[hide_special=True]]; set that too")

    @property
    def plain(self) -> bool:
        return not (self.hide_special or self.words)

    def apply(self, result: AttentionResult) -> AttentionResult:
        from .transforms import drop_special, to_words  # torch: only when a result is read

        if self.hide_special:
            result = drop_special(result, renormalize=self.renormalize)
        if self.words:
            result = to_words(result)
        return result

    def layer(self, header: AttentionResult, attentions: torch.Tensor) -> AttentionResult:
        """One layer ``[heads, q, k]`` of ``header``'s tokens as a one-layer result, read this way."""
        from dataclasses import replace

        one = replace(header, attentions=attentions[None], cross_attentions=None, decoder_attentions=None,
                      scores=None, values=None, value_norms=None, queries=None, keys=None)
        return self.apply(one)
