"""What ``y`` is, for gradients with respect to the attention weights: the choice, the tokens it
names, and the words that say it (:mod:`attnviz.sources.gradients` runs the models).

Three outputs, after what the model was trained to give:

- a causal language model: the logit of the next token after the last position (the likeliest by
  default, or one the user names);
- an encoder with a masked-language-model head: the logit at the first mask token of the text;
- an encoder without one (a sentence encoder such as all-MiniLM-L6-v2): the cosine similarity of
  the text's mean-pooled last hidden states with those of a second text (``vs``), the pooling of
  sentence-transformers (the mean over every real token, special tokens included).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

from ..errors import UsageError
from .tokens import label_from_piece

Kind = Literal["next", "mask", "similarity"]
_MASK_NAMES = ("[MASK]", "<mask>")


@dataclass(frozen=True)
class Plan:
    """Which output ``y`` is: its kind, the position it is read at (next, mask), and the token whose
    logit it is (None: the likeliest one, chosen once the logits are known)."""

    kind: Kind
    position: int = -1
    token: int | None = None
    mask_label: str | None = None


def plan_target(*, name: str, causal: bool, ids: list[int], tokenizer: Any, mlm: bool | None,
                target_token: str | None, vs: str | None, mask: tuple[str, int] | None) -> Plan:
    """The output a gradient run differentiates, for a model with a real tokenizer.

    ``mlm`` says whether the encoder has a masked-language-model head (None: not yet known, and
    asked only when needed; the caller passes True or False once it knows). ``mask`` is the
    tokenizer's mask token (text, id) or None.
    """
    if causal:
        if vs is not None:
            raise UsageError(f"[[vs]] compares the sentence embeddings of an encoder; {name} is a causal language "
                             "model, so y is the logit of the next token: leave out [[vs]] (the predicted token) "
                             "or name a token with [[target_token]]")
        return Plan("next", len(ids) - 1, one_token(tokenizer, target_token, name))
    if vs is not None:
        if target_token is not None:
            raise UsageError("[[target_token]] picks a logit, and with [[vs]] y is a similarity of two texts; "
                             "give one of them")
        return Plan("similarity")
    if not mlm:
        raise UsageError(f"{name} is an encoder without a masked-language-model head, so y is the cosine similarity "
                         "of its mean-pooled embedding with a second text: give that text with [[vs]]")
    if mask is None:
        raise UsageError(f"{name}'s tokenizer has no mask token, so no masked position can be scored; give a "
                         "second text with [[vs]] to explain the similarity of the two")
    label, mask_id = mask
    if mask_id not in ids:
        raise UsageError(f"y for {name} is the logit at a masked position: put its mask token {label} in the "
                         f"text (e.g. \"The cat sat on the {label}.\"), or give a second text with [[vs]] to "
                         "explain the similarity of the two")
    return Plan("mask", ids.index(mask_id), one_token(tokenizer, target_token, name), label)


def one_token(tokenizer: Any, text: str | None, name: str) -> int | None:
    """The id ``text`` stands for: the one token it encodes to, else a vocabulary piece written out
    (``Ġmat``); None for None. Several pieces, or none, is an error naming them."""
    if text is None:
        return None
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    if len(ids) == 1:
        return int(ids[0])
    direct = tokenizer.token_to_id(text)
    if direct is not None:
        return int(direct)
    pieces = [tokenizer.id_to_token(i) for i in ids]
    if not pieces:
        raise UsageError(f"[[target_token={text!r}]] gives no token in {name}'s tokenizer; give one token")
    raise UsageError(f"[[target_token={text!r}]] is {len(pieces)} tokens in {name}'s tokenizer "
                     f"({', '.join(repr(p) for p in pieces)}); give a single token, e.g. {pieces[0]!r}")


def mask_token(tokenizer: Any) -> tuple[str, int] | None:
    """The tokenizer's mask token as (text, id), from its special added tokens ([MASK], <mask>)."""
    decoder = tokenizer.get_added_tokens_decoder()
    for wanted in _MASK_NAMES:
        for i, token in decoder.items():
            if token.content == wanted:
                return wanted, int(i)
    return None


def choose_logit(logits: Tensor, plan: Plan) -> tuple[Tensor, int, int]:
    """(y, the token it is the logit of, the likeliest token) from ``logits`` ``[vocab]``."""
    predicted = int(logits.detach().argmax())
    token = predicted if plan.token is None else plan.token
    if not 0 <= token < logits.shape[-1]:
        raise UsageError(f"[[target_token]] is token id {token}, past the model's {logits.shape[-1]} logits")
    return logits[token], token, predicted


def describe_logit(plan: Plan, token: int, predicted: int, label: Any) -> str:
    """What y is, in words: ``logit of 'mat' (id 2603), the predicted next token``; ``label(id)``
    names a token."""
    what = f"logit of {label(token)!r} (id {token})"
    where = "the next token" if plan.kind == "next" else f"{plan.mask_label} at position {plan.position}"
    if plan.token is None:
        return f"{what}, the predicted {'next token' if plan.kind == 'next' else 'token at ' + where}"
    return f"{what} as {where}, the token asked for (the model predicts {label(predicted)!r}, id {predicted})"


def token_label(tokenizer: Any) -> Any:
    """A function from id to a readable label (``Ġmat`` → ``mat``)."""
    return lambda i: label_from_piece(tokenizer.id_to_token(i) or f"<{i}>")


def mean_pooled(hidden: Tensor) -> Tensor:
    """``[T, d]`` → ``[d]``: the mean over the tokens (sentence-transformers' mean pooling of one text,
    where every token is real)."""
    return hidden.mean(dim=0)


def cosine(a: Tensor, b: Tensor) -> Tensor:
    """Cosine similarity of two vectors (as sentence-transformers' ``cos_sim``)."""
    return torch.nn.functional.cosine_similarity(a, b, dim=0)


def describe_similarity(vs: str) -> str:
    shown = vs if len(vs) <= 60 else vs[:57] + "…"
    return f"cosine similarity of the mean-pooled embeddings of the text and of {shown!r}"
