"""What a walkthrough (attnviz.explain) needs from a model: kept apart so that the sources that
provide it and the walkthrough that reads it both stand on it, and neither imports the other."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from torch import Tensor

    from .attention import MultiHeadAttention
    from .config import Reference


@dataclass
class ExplainInputs:
    """What a walkthrough needs: the attention's input X, its module, labels and masking."""

    x: Tensor  # [T, d_in]
    attention: MultiHeadAttention
    tokens: list[str]
    causal: bool
    title: str
    reference: Reference | None = None
