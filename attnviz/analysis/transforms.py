"""Views of an AttentionResult for reading: one kind of attention, without special tokens, or at word level.

Each returns a new result and leaves the original alone. Scores and value vectors do not survive
either transform (they have no word-level or renormalised meaning), so they are dropped.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal, TypeVar

import torch

from ..errors import UsageError
from ..labels import CONTINUATION
from . import AttentionResult

KINDS = ("self", "encoder", "decoder", "cross")


def kind_tensor(result: AttentionResult, kind: str) -> tuple[torch.Tensor, list[str], list[str]]:
    """``(tensor [L, H, Q, K], row labels, column labels)`` of one kind of attention: ``self`` (or
    ``encoder``) over the input; for encoder-decoder models ``decoder`` (target over target) or
    ``cross`` (target queries over source keys). A result of cross-attention alone (no self-attention
    layer: a matrices config with a context) gives its cross-attention for ``self`` too, the default."""
    cross_only = result.cross_only
    if kind in ("self", "encoder") and not cross_only:
        return result.attentions, list(result.tokens), list(result.tokens)
    kind = resolved_kind(result, kind)
    if kind not in KINDS:
        raise UsageError(f"[[kind={kind!r}]] is unknown; use one of {', '.join(KINDS)}")
    tensor = result.decoder_attentions if kind == "decoder" else result.cross_attentions
    if tensor is None and cross_only:
        raise UsageError(f"[[kind={kind}]]: {result.model_name or 'this model'} is one cross-attention layer and has no "
                         "decoder self-attention; show its cross-attention ([[kind=cross]], the default for it)")
    count = result.metadata.get("decoder_layer_count")
    if tensor is None and count is not None and result.target_tokens is not None:
        held = ", ".join(map(str, result.metadata.get("layers", [])))
        raise UsageError(f"[[kind={kind}]]: the decoder of {result.model_name or 'this model'} has {count} "
                         f"layer{'s' if count != 1 else ''} (0 to {count - 1}), fewer than its encoder; layer {held} is not one of them")
    if tensor is None or result.target_tokens is None:
        raise UsageError(f"[[kind={kind}]] needs an encoder-decoder model (T5, BART); {result.model_name or 'this model'} "
                         "has only self-attention")
    cols = result.target_tokens if kind == "decoder" else result.tokens
    return tensor, list(result.target_tokens), list(cols)


KindName = TypeVar("KindName", bound=str)


def resolved_kind(result: AttentionResult, kind: KindName) -> KindName | Literal["cross"]:
    """The kind :func:`kind_tensor` shows for ``kind``: ``cross`` for the default (``self``/``encoder``) of a
    cross-only result (:attr:`AttentionResult.cross_only`), else ``kind`` itself."""
    return "cross" if kind in ("self", "encoder") and result.cross_only else kind


def no_self_attention(name: str, kind: str, purpose: str, *, explain: bool) -> str:
    """Why ``purpose`` (head statistics, rollout…), which reads token-over-token self-attention, cannot
    read ``name``: one cross-attention layer and no self-attention at all (whatever ``kind`` asks for),
    and what shows it instead; ``explain``: ``attnviz explain`` can walk through it (a config, not a
    saved result)."""
    asked = "" if kind in ("self", "encoder") else f"[[kind={kind}]]: "
    walk = ", or walk through it with attnviz explain" if explain else ""
    return (f"{asked}{name} has one cross-attention layer (target queries over source keys) and no self-attention; "
            f"{purpose} needs self-attention (token over token). Draw its cross-attention with attnviz heatmap or "
            f"attnviz view{walk}")


def self_attention(result: AttentionResult, kind: str, *, purpose: str) -> AttentionResult:
    """One kind of square self-attention as a result of its own, for what reads token over token
    (head statistics, rollout, head comparisons): the input's (``self``/``encoder``: ``result``
    itself), or an encoder-decoder model's ``decoder`` self-attention over the target tokens
    (causal). Cross-attention is target × source, not square: ``purpose`` says what refused it."""
    tensor, rows, _ = kind_tensor(result, kind)
    if kind in ("self", "encoder"):
        return result
    if kind == "cross":
        refuse_cross(purpose)
    special = result.target_special or [False] * len(rows)
    ids = result.metadata.get("target_ids") or []
    meta = {k: v for k, v in result.metadata.items() if k != "target_ids"}
    return type(result)(tokens=rows, attentions=tensor, token_ids=list(ids), special=list(special), causal=True,
                           model_name=result.model_name, metadata={**meta, "kind": "decoder"})


def refuse_cross(purpose: str) -> None:
    """Cross-attention where token-over-token attention is needed: an error saying what to use."""
    raise UsageError(f"[[kind=cross]] attention is target queries over source keys, not token over token; "
                     f"{purpose} needs self-attention: [[kind=encoder]] or [[kind=decoder]] "
                     "(a heatmap draws cross-attention)")


def drop_special(result: AttentionResult, *, renormalize: bool = False) -> AttentionResult:
    """Remove special tokens ([CLS], [SEP], BOS, …) from both axes.

    With ``renormalize`` each remaining row is divided by its sum, so it shows how a query splits
    its attention among ordinary tokens; without, the weights are as the model gave them.
    """
    keep = [i for i, s in enumerate(result.special) if not s]
    if not keep:
        raise UsageError("every token is special; nothing is left to show with [[hide_special=True]]")
    target_keep = None
    if result.target_tokens is not None:
        flags = result.target_special or [False] * len(result.target_tokens)
        target_keep = [i for i, s in enumerate(flags) if not s] or list(range(len(flags)))
    if len(keep) == len(result.tokens) and (target_keep is None or len(target_keep) == len(result.target_tokens)):
        return result

    def pick(t: torch.Tensor | None, rows: list[int] | None, cols: list[int]) -> torch.Tensor | None:
        return None if t is None else pick_from(t, rows, cols)

    def pick_from(t: torch.Tensor, rows: list[int] | None, cols: list[int]) -> torch.Tensor:
        t = t.index_select(3, torch.tensor(cols))
        if rows is not None:
            t = t.index_select(2, torch.tensor(rows))
        if renormalize:
            t = t / t.sum(-1, keepdim=True).clamp_min(torch.finfo(t.dtype).tiny)
        return t

    out = _subset(result, keep, pick_from(result.attentions, keep, keep))
    if target_keep is None:
        return out
    return replace(
        out,
        target_tokens=[result.target_tokens[i] for i in target_keep],
        target_special=[False] * len(target_keep),
        decoder_attentions=pick(result.decoder_attentions, target_keep, target_keep),
        cross_attentions=pick(result.cross_attentions, target_keep, keep),
    )


def to_words(result: AttentionResult) -> AttentionResult:
    """Aggregate to words as Clark et al. 2019 ("What Does BERT Look At?", section 2) do.

    Attention *to* a word is the sum of the attention to its pieces; attention *from* a word is
    the mean of its pieces' attention. Rows still sum to 1. Special tokens stay words of their own.
    For encoder-decoder models the source side is merged (the encoder's attention, and the key
    axis of cross-attention); the decoder's own tokens are left as they are.
    """
    groups: list[list[int]] = []
    for i, word in enumerate(result.word_ids):
        same_word = groups and word >= 0 and result.word_ids[groups[-1][-1]] == word
        if same_word:
            groups[-1].append(i)
        else:
            groups.append([i])
    if len(groups) == len(result.tokens):
        return result
    n = len(result.tokens)
    member = torch.zeros(len(groups), n)  # (W, T): 1 where token t belongs to word w
    for w, group in enumerate(groups):
        member[w, group] = 1.0
    mean_rows = member / member.sum(-1, keepdim=True)
    attn = mean_rows @ result.attentions @ member.T  # (L, H, W, W)
    labels = ["".join(_piece(result.tokens[i]) for i in group) for group in groups]
    first = [group[0] for group in groups]
    # Cross-attention has the source on its key axis: attention to a source word is the sum too.
    cross = None if result.cross_attentions is None else result.cross_attentions @ member.T
    return replace(
        result,
        tokens=labels,
        attentions=attn,
        cross_attentions=cross,
        token_ids=[result.token_ids[i] for i in first],
        special=[result.special[i] for i in first],
        attention_mask=[1] * len(groups),
        word_ids=[result.word_ids[i] for i in first],
        segment_ids=[result.segment_ids[i] for i in first],
        scores=None,
        values=None,
        value_norms=None,
        queries=None,
        keys=None,
        metadata={**result.metadata, "words": True},
    )


def _piece(label: str) -> str:
    return label[len(CONTINUATION):] if label.startswith(CONTINUATION) and len(label) > len(CONTINUATION) else label


def _subset(result: AttentionResult, keep: list[int], attn: torch.Tensor) -> AttentionResult:
    return replace(
        result,
        tokens=[result.tokens[i] for i in keep],
        attentions=attn,
        token_ids=[result.token_ids[i] for i in keep],
        special=[result.special[i] for i in keep],
        attention_mask=[result.attention_mask[i] for i in keep],
        word_ids=[result.word_ids[i] for i in keep],
        segment_ids=[result.segment_ids[i] for i in keep],
        scores=None,
        values=None,
        value_norms=None,
        queries=None,
        keys=None,
        metadata={**result.metadata, "special_removed": True},
    )
