"""Each cross-attention head's statistics over time (issue 61 item 2, ``attnviz heads --audio``): how a Whisper
decoder head spreads its weight over the clip as the transcript is written, from one teacher-forced pass.

Read over the rows that write the transcript (each the step that reads a token and predicts the next: from the
no-timestamps row to the one that predicts end of text, the rows :func:`attnviz.audio.timing.word_alignment` aligns),
``w[t, p]`` the head's weight (the model's softmax over its whole window) on the clip's position ``p`` (``P`` of them,
the window's padding after the clip left out), each row's weights renormalised over the clip ``a[t, p] = w[t, p] /
Σ_p w[t, p]``; ``n`` rows, every statistic a mean over them unless said:

* ``clip_share``: ``Σ_p w[t, p]``, the weight on the clip rather than on the silence after it;
* ``entropy``: ``−Σ_p a log a / log P``, 0 when a row reads one position, 1 when it reads the clip evenly;
* ``focus``: ``max_p a[t, p]``, the *focus rate* of Ren et al., "FastSpeech" (NeurIPS 2019, §3.3), with which they
  chose the encoder-decoder head whose alignment to trust;
* ``monotonicity``: Spearman's rank correlation between a row's index and its centre of mass in time ``Σ_p p a[t,
  p]`` (centres within :data:`TIED` of a position are tied, and ties are at their mean rank; 0 where the centres are
  all tied or there are fewer than two rows): 1 when each
  token is read later than the one before, as speech is spoken;
* ``diagonal``: the *diagonal attention rate* of Chen et al., "MultiSpeech" (Interspeech 2020, §2.3): the weight
  within a band around the diagonal from the clip's start to its end, ``Σ_t Σ_{|p − c_t| ≤ b} a[t, p] / n`` with
  row ``t``'s centre ``c_t = (t + ½) P / n`` and ``b`` = :data:`DIAGONAL_BAND` of the clip's positions (one at least);
  a clip whose speech fills it evenly puts an alignment head near 1, a head on a few positions near the band's share;
* ``label_free``: the score of Yeh, Meng and Tang (arXiv 2509.09987) that ``align-heads`` ranks heads by without
  references (:func:`attnviz.audio.clip_passes.label_free_scores`), over every row of the pass;
* ``alignment``: whether the head is one of the model's alignment heads (:func:`attnviz.audio.timing.alignment_heads`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

DIAGONAL_BAND = 0.1
"""The diagonal band's half-width as a share of the clip's positions."""
TIED = 1e-6
"""Centres of mass closer than this (positions) are one: a float's last digits do not order tokens in time."""
STATISTICS = ("clip_share", "entropy", "focus", "monotonicity", "diagonal", "label_free")
COLUMNS = ("layer", "head", *STATISTICS, "alignment")


def rank(values: np.ndarray) -> np.ndarray:
    """Ranks from 0, ties at their mean rank (what Spearman's correlation reads)."""
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(len(values))
    for value in np.unique(values):
        tied = values == value
        if tied.sum() > 1:
            ranks[tied] = ranks[tied].mean()
    return ranks


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation of ``x`` and ``y``; 0 where either is constant or shorter than two."""
    if len(x) < 2:
        return 0.0
    rx, ry = rank(x), rank(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    scale = float(np.sqrt((rx * rx).sum() * (ry * ry).sum()))
    return 0.0 if scale == 0.0 else float((rx * ry).sum() / scale)


def head_time_statistics(weights: np.ndarray, band: float = DIAGONAL_BAND) -> dict[str, float]:
    """The statistics of one head (see the module) from its weights ``[rows, P]`` on the clip's positions (each row
    part of a softmax over the window)."""
    w = np.asarray(weights, dtype=np.float64)
    rows, positions = w.shape
    share = w.sum(axis=1)
    a = w / np.where(share > 0, share, 1.0)[:, None]
    logs = np.log(np.where(a > 0, a, 1.0))
    entropy = -(a * logs).sum(axis=1) / np.log(positions) if positions > 1 else np.zeros(rows)
    centres = np.round((a @ np.arange(positions)) / TIED) * TIED
    middle = (np.arange(rows) + 0.5) * positions / rows
    width = max(1.0, band * positions)
    inside = np.abs(np.arange(positions)[None, :] - middle[:, None]) <= width
    return {"clip_share": float(share.mean()), "entropy": float(entropy.mean()), "focus": float(a.max(axis=1).mean()),
            "monotonicity": spearman(np.arange(rows, dtype=np.float64), centres),
            "diagonal": float((a * inside).sum(axis=1).mean())}


@dataclass(frozen=True)
class SoundHeads:
    """``heads --audio``'s table: one row per decoder layer × head (:data:`COLUMNS`), and what it was read over."""

    model: str
    rows: list[dict[str, Any]]
    transcript: str
    teacher_forced: bool
    duration: float
    tokens: int
    alignment_heads: list[tuple[int, int]]

    def document(self) -> dict[str, Any]:
        """The table as one JSON object (``--format json``, ``--out x.json``)."""
        return {"model": self.model, "transcript": self.transcript, "teacher_forced": self.teacher_forced,
                "duration": self.duration, "tokens": self.tokens,
                "alignment_heads": [list(h) for h in self.alignment_heads], "columns": list(COLUMNS),
                "heads": self.rows}


def sound_head_statistics(audio: str | os.PathLike[str] | np.ndarray, model: Any, *, text: str | None = None,
                          heads: Sequence[Sequence[int]] | None = None, language: str | None = None,
                          task: str = "transcribe", band: float = DIAGONAL_BAND, device: str = "cpu",
                          revision: str | None = None) -> SoundHeads:
    """Every cross-attention head of the Whisper ``model`` over ``audio`` (a file or mono samples at the model's
    rate), ``text`` teacher-forced or the model's greedy transcript: one pass, its weights and scores (see the
    module). ``heads``: the alignment heads marked (default: the model's)."""
    from .model import whisper_model
    from .timing import alignment_heads
    from .whisper import forward

    loaded = whisper_model(model, device=device, revision=revision)
    layers = int(loaded.config.decoder_layers)
    marked = alignment_heads(loaded, heads)
    run = forward(audio, loaded, text=text, language=language, task=task, encoder=False, weights=True,
                  scores=range(layers), text_only=True)
    return pass_head_statistics(loaded, run, marked, band)


def pass_head_statistics(loaded: Any, run: Any, marked: Sequence[tuple[int, int]],
                         band: float = DIAGONAL_BAND) -> SoundHeads:
    """The table of one pass ``run`` (:class:`attnviz.audio.whisper.Forward` with the cross weights and every
    layer's scores), ``marked`` the alignment heads."""
    from .clip_passes import label_free_scores

    positions = run.heard.positions
    start = len(run.read.prompt) - 1
    cross = run.cross[:, :, start:-1, :positions].double().numpy()  # [layers, heads, rows, P]
    free = label_free_scores(run.scores, positions)
    found = []
    for layer in range(cross.shape[0]):
        for head in range(cross.shape[1]):
            stats = head_time_statistics(cross[layer, head], band)
            found.append({"layer": layer, "head": head, **stats, "label_free": float(free[layer, head]),
                          "alignment": (layer, head) in marked})
    return SoundHeads(loaded.name, found, loaded.tokenizer.decode(list(run.read.text_ids)), run.read.given,
                      run.heard.seconds, len(run.read.text_ids), list(marked))
