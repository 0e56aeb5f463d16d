"""Probes: inputs built to make a kind of head show itself.

The induction probe is the standard one (Olsson et al. 2022; TransformerLens and ARENA use it):
a sequence of random tokens, then the same sequence again. On the second copy an induction head
attends to the token that followed the current token's earlier occurrence.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..errors import UsageError

if TYPE_CHECKING:  # pragma: no cover
    from ..result import AttentionResult

PROBE_LENGTH = 50  # random tokens per copy


def induction_probe(source, *, length: int = PROBE_LENGTH, seed: int = 0) -> AttentionResult:
    """Run ``source`` on random tokens repeated twice (a leading BOS kept where the tokenizer adds one)."""
    if source.capabilities.fixed_input:
        raise UsageError(f"[[probe=induction]] runs the model on random tokens; {source.name} has a fixed input "
                         "(a matrices config or a saved result)")
    if not getattr(source, "causal", False):
        raise UsageError(
            f"[[probe=induction]] needs a causal (decoder) model; {source.name} attends both ways, "
            "so every head could look ahead at the second copy"
        )
    gen = torch.Generator().manual_seed(seed)
    if source.capabilities.token_ids:
        limit = source.max_positions or 2 * length + 1
        length = max(2, min(length, (limit - 1) // 2))
        specials = source.special_ids()
        pool = torch.tensor([i for i in range(source.tokenizer.get_vocab_size()) if i not in specials])
        body = pool[torch.randint(len(pool), (length,), generator=gen)].tolist()
        # A BOS first, as TransformerLens's probe has (GPT-2's tokenizer adds none itself).
        added = [i for i in source.tokenizer.encode("x").ids if i in specials][:1]
        bos = getattr(source, "bos_id", None)
        prefix = added or ([bos] if bos is not None and bos < source.tokenizer.get_vocab_size() else [])
        return source.extract_ids(prefix + body + body)
    # Config models tokenize words: use made-up words that never repeat within one copy.
    limit = source.cfg.max_positions
    length = max(2, min(length, limit // 2))
    words = [f"w{int(i)}" for i in torch.randperm(10 * length, generator=gen)[:length]]
    return source.extract(" ".join(words + words))
