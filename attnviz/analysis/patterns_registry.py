"""Sparse prefill patterns as records: a registry that plugins extend (issue 51).

A pattern is one :class:`Pattern`: its name, a summary and citation, MInference's name for it (the config
``attnviz patterns --minference`` writes), and how its recall is found. The three built-in patterns (MInference's
A-shape, vertical-slash and block-sparse) are measured together in one pass over a layer's rows
(:func:`attnviz.analysis.sparse_patterns.search_patterns`: sums by column, diagonal and block); a pattern a plugin
registers brings its own ``recall(rows, budget) -> [H]`` function (``"module:function"`` or the function), which
reads the same row blocks (:class:`~attnviz.analysis.kv_policies.RowBlocks`, causal) and returns each query head's
mean kept attention mass over rows ``i ≥ budget``, as the built-ins define recall. Every registered pattern is then
a column of ``attnviz patterns``' table and a candidate for each head's winner (ties go to the first registered);
MInference's config names the best of the patterns MInference has.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import PluginError
from ..records import Registry, resolve

RECALL_SLACK = 1e-6  # a recall summed in float32 may pass 1 by rounding
TIE = 1e-6  # recalls this close are equal: the first registered (the simpler) wins

if TYPE_CHECKING:  # pragma: no cover
    from torch import Tensor

    from .kv_policies import RowBlocks


@dataclass(frozen=True)
class Pattern:
    """One sparse prefill pattern (see the module); ``recall`` None: measured in the built-in single pass."""

    name: str
    summary: str
    citation: str
    minference: str | None = None
    recall: str | Callable[..., Any] | None = None

    def __post_init__(self) -> None:
        if not self.name or not all(c.isalnum() or c == "_" for c in self.name) or self.name != self.name.lower():
            raise ValueError(f"a pattern's name is lower-case letters, digits and _; got {self.name!r}")
        for what, text in (("summary", self.summary), ("citation", self.citation)):
            if not isinstance(text, str) or not text.isprintable():
                raise ValueError(f"{self.name}: a pattern's {what} is printable text")

    def measure(self, rows: RowBlocks, budget: int) -> Tensor:
        """This pattern's recall per query head on ``rows`` at ``budget`` keys per row (a plugin's function)."""
        import torch

        function = self.recall
        if function is None:
            raise ValueError(f"pattern {self.name} is measured in the built-in pass, not on its own")
        found = resolve(function, f"pattern {self.name}")(rows, budget)
        if not isinstance(found, torch.Tensor) or tuple(found.shape) != (rows.n_heads,) or found.is_complex():
            got = f"a tensor {tuple(found.shape)}" if isinstance(found, torch.Tensor) else f"a {type(found).__name__}"
            raise PluginError(f"pattern {self.name}'s recall function gave {got}, not one real value per query head "
                              f"({rows.n_heads},)")
        recall = found.double()
        if not bool(torch.isfinite(recall).all()) or bool((recall < -RECALL_SLACK).any()) or \
                bool((recall > 1 + RECALL_SLACK).any()):
            bad = recall[~torch.isfinite(recall) | (recall < -RECALL_SLACK) | (recall > 1 + RECALL_SLACK)][0].item()
            raise PluginError(f"pattern {self.name}'s recall function gave {bad}, outside 0 to 1: a recall is the share "
                              "of each row's attention the pattern keeps")
        return recall.clamp(0, 1)


PATTERNS: Registry[Pattern] = Registry("pattern")
register, unregister, registered = PATTERNS.register, PATTERNS.unregister, PATTERNS.registered

register(Pattern("a_shape", "attention sinks and a local band (StreamingLLM's shape)",
                 "Jiang et al. 2024, MInference (arXiv 2407.02490); Xiao et al. 2023", "stream_llm"))
register(Pattern("vertical_slash", "the strongest columns and diagonals, estimated from the last 64 rows",
                 "Jiang et al. 2024, MInference (arXiv 2407.02490)", "vertical_and_slash"))
register(Pattern("block_sparse", "the top 64×64 key blocks per query block, by pooled queries and keys",
                 "Jiang et al. 2024, MInference (arXiv 2407.02490)", "block_sparse"))
BUILT_IN = PATTERNS.seal()


def winners(recall: Mapping[str, Tensor]) -> list[str]:
    """Each query head's winning pattern among those ``recall`` holds (``[H]`` each): the first, in the registry's
    order, within :data:`TIE` of the best. The one choice of a winner: the table's, the search's, MInference's."""
    import torch

    names = [name for name in PATTERNS if name in recall]
    if not names:
        raise ValueError("no registered pattern among the recalls given")
    table = torch.stack([recall[name].double() for name in names])
    top = table.max(0).values
    return [names[int((table[:, head] >= top[head] - TIE).nonzero()[0])] for head in range(table.shape[1])]
