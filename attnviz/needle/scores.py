"""Per-head retrieval scores of one needle run, from the answer's attention rows, one step at a time.

**Retrieval score** (Wu et al. 2024, ``retrieval_calculate`` in ``nightdessert/Retrieval_Head``): at each
decoding step, a head whose strongest key (over every token so far) lies inside the needle span and holds
the token the step generated adds 1/|needle|. Ties go to the earliest position, as ``torch.argmax``
documents (``torch.topk(1)``, which the authors call, leaves the order of ties unspecified).

**Retrieval-reasoning score** (HeadKV, Fu et al. 2024, ``retrieval_head_detection_r2.py``): no token
condition; each of the head's |needle| strongest keys that lies inside the needle adds its weight, scaled
by 10 / (|needle| · |answer|), the 10 as their code has it; |answer| is the expected answer's length in
tokens, here the needle's. Ties at the cut-off go to the earliest positions (a stable sort).

A run counts when its answer recalls the needle: ROUGE-1 recall ≥ 0.5 (:func:`rouge1_recall`); a head's
score is its mean over counted runs.
"""

from __future__ import annotations

import re
from collections import Counter

import torch
from torch import Tensor

RETRIEVED_FROM = 0.5  # ROUGE-1 recall of the needle from which a run counts as retrieved
RETRIEVAL_HEAD_FROM = 0.1  # a head whose retrieval score reaches this is a retrieval head (the paper's threshold)
HEADKV_SCALE = 10.0

_WORD = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]|[^\W_]+", re.UNICODE)


def words(text: str) -> list[str]:
    """ROUGE's tokens: lower-cased runs of letters and digits (as ``rouge_score``'s tokenizer, which keeps only
    a-z0-9), extended to every script, with each CJK character a token of its own. No stemming."""
    return _WORD.findall(text.lower())


def rouge1_recall(reference: str, answer: str) -> float:
    """ROUGE-1 recall of ``reference`` by ``answer``: the clipped count of shared words over the reference's."""
    ref, got = Counter(words(reference)), Counter(words(answer))
    total = sum(ref.values())
    return sum(min(n, got[w]) for w, n in ref.items()) / total if total else 0.0


def missed_words(reference: str, answer: str) -> list[str]:
    """The words of ``reference`` its ``answer`` does not recall (ROUGE-1's clipped counts: a word needed twice and
    said once is missed once), in the reference's order: why a run's recall is below 1."""
    got = Counter(words(answer))
    missed = []
    for word in words(reference):
        if got[word] > 0:
            got[word] -= 1
        else:
            missed.append(word)
    return missed


class RunScores:
    """The two scores of every head, accumulated step by step over one run's answer."""

    def __init__(self, n_layers: int, n_heads: int, ids: list[int], start: int, end: int) -> None:
        self.ids = torch.tensor(ids)
        self.start, self.end = start, end
        self.size = end - start
        self.retrieval = torch.zeros(n_layers, n_heads, dtype=torch.float64)
        self.reasoning = torch.zeros(n_layers, n_heads, dtype=torch.float64)

    def add(self, rows: Tensor, token: int) -> None:
        """One step: ``rows`` ``[layers, heads, T]`` is the attention of the query that generated ``token``."""
        n_keys = rows.shape[-1]
        ids = self.ids[:n_keys] if len(self.ids) >= n_keys else torch.cat(
            [self.ids, torch.full((n_keys - len(self.ids),), -1, dtype=self.ids.dtype)])
        best = rows.argmax(dim=-1)  # the first of equal maxima
        inside = (best >= self.start) & (best < self.end)
        hit = inside & (ids[best] == token)
        self.retrieval += hit.double() / self.size
        k = min(self.size, n_keys)
        values, order = torch.sort(rows, dim=-1, descending=True, stable=True)
        values, order = values[..., :k], order[..., :k]
        in_needle = (order >= self.start) & (order < self.end)
        self.reasoning += (values.double() * in_needle).sum(-1) * HEADKV_SCALE / (self.size * self.size)

    def extend_ids(self, token: int) -> None:
        """The generated ``token`` becomes a key the next steps can attend to."""
        self.ids = torch.cat([self.ids, torch.tensor([token], dtype=self.ids.dtype)])
