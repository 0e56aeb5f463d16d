"""Reading the clips of an ``align-heads`` search (:mod:`.head_search`): one teacher-forced pass a clip with every
decoder layer's cross-attention scores kept, read into what the search scores, each head's label-free score and,
with a reference, each head's own alignment matrix and the reference's word times matched to the transcript's words;
on this machine in order, or on Ray actors (a model each) as they come back. The search and its scores are
:mod:`.head_search`'s; this module reads, it does not rank."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InputError, UsageError
from .references import Clip, normalise


def label_free_scores(scores: Any, positions: int, width: int = 7) -> np.ndarray:
    """``[layers, heads]``: the label-free score of each head (see the module) of one pass, ``scores`` ``[layers,
    heads, T, window]`` (or a mapping of layers to ``[heads, T, window]``) before the softmax."""
    from .dtw import median_filter

    found = []
    for layer in range(len(scores)):
        maps = median_filter(scores[layer][..., :positions].float(), width).softmax(dim=-1)
        found.append((maps.norm(dim=-2).sum(-1) + maps.norm(dim=-1).sum(-1)).double().numpy())
    return np.stack(found)


def match_reference(clip: Clip, words: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The aligned words (their indices) matched to the reference's, and those reference words' starts and ends;
    words that differ are one line naming the clip."""
    assert clip.reference is not None
    aligned = [(i, normalise(w)) for i, w in enumerate(words)]
    aligned = [(i, w) for i, w in aligned if w]
    reference = [(w, normalise(w.word)) for w in clip.reference]
    reference = [(w, n) for w, n in reference if n]
    for k, ((_, got), (word, wanted)) in enumerate(zip(aligned, reference, strict=False)):
        if got != wanted:
            raise InputError(f"{clip.name}: its reference's word {k + 1} is {word.word!r} where the transcript has "
                             f"{words[aligned[k][0]].strip()!r}; give this clip's reference, or its transcript as "
                             "the reference's words")
    if len(aligned) != len(reference):
        raise InputError(f"{clip.name}: its reference has {len(reference)} words and the transcript {len(aligned)}; "
                         "give this clip's reference, or its transcript as the reference's words")
    return (np.array([i for i, _ in aligned], dtype=np.int64), np.array([w.start for w, _ in reference]),
            np.array([w.end for w, _ in reference]))


@dataclass
class ClipPass:
    """What one clip's pass gives the search: each head's label-free score ``[layers, heads]`` and, with a
    reference, each head's alignment matrix ``[layers × heads, rows, positions]`` (float32), the word bounds, the
    words matched and their reference times (see :class:`_ClipData`)."""

    free: np.ndarray
    matrices: np.ndarray | None = None
    bounds: np.ndarray | None = None
    matched: np.ndarray | None = None
    starts: np.ndarray | None = None
    ends: np.ndarray | None = None


def clip_pass(loaded: Any, clip: Clip, *, language: str | None, task: str, width: int) -> ClipPass:
    """One teacher-forced pass over ``clip`` (its text, else its reference's words, else the model's own
    transcript) with every decoder layer's cross-attention scores, read into what the search scores (see the
    module): the same on this machine and on a Ray actor."""
    from .timing import alignment_matrix, decoder_of
    from .whisper import forward
    from .words import split_words

    layers, per_layer = int(loaded.config.decoder_layers), int(loaded.config.decoder_attention_heads)
    text = clip.text if clip.text is not None else (
        " ".join(w.word for w in clip.reference) if clip.reference is not None else None)
    run = forward(clip.audio, loaded, text=text, language=language, task=task, encoder=False,
                  weights=False, scores=range(layers), text_only=True)
    positions = run.heard.positions
    free = label_free_scores(run.scores, positions, width)
    if clip.reference is None:
        return ClipPass(free)
    read = run.read
    words, groups = split_words([*read.text_ids, read.eot], decoder_of(loaded), read.eot, read.language)
    words, groups = (words[:-1], groups[:-1]) if len(groups) > 1 else ([], [])
    matched, starts, ends = match_reference(clip, words)
    start = len(read.prompt) - 1
    rows = len(read.ids) - 1 - start
    matrices = np.empty((layers * per_layer, rows, positions), dtype=np.float32)
    for k, head in enumerate((layer, head) for layer in range(layers) for head in range(per_layer)):
        matrices[k] = alignment_matrix(run.scores, [head], positions, scores=True, width=width)[start:-1].numpy()
    bounds = np.pad(np.cumsum([len(g) for g in groups]), (1, 0))
    return ClipPass(free, matrices, bounds, matched, starts, ends)


class HeadPassActor:
    """One Whisper, loaded once, reading clips (made a Ray actor by :func:`find_alignment_heads` with
    ``backend="ray"``)."""

    def __init__(self, model: str, options: dict[str, Any], threads: int) -> None:
        import torch

        from .model import load_whisper

        torch.set_num_threads(max(1, threads))
        self.options = options
        self.loaded = load_whisper(model, device=options["device"], revision=options["revision"])

    def ready(self) -> str:
        return self.loaded.name

    def run(self, clip: Clip) -> ClipPass:
        return clip_pass(self.loaded, clip, language=self.options["language"], task=self.options["task"],
                         width=self.options["width"])


def clip_passes(clips: list[Clip], loaded: Any, model: Any, take: Callable[[int, ClipPass], None], *,
            language: str | None, task: str, width: int, backend: str, jobs: int, ray_address: str | None,
            device: str, revision: str | None) -> None:
    """Each clip's pass handed to ``take(index, pass)``: on this machine in order, or on ``jobs`` Ray actors as they
    come back (a local cluster, or the one at ``ray_address``)."""
    if backend == "local":
        for index, clip in enumerate(clips):
            take(index, clip_pass(loaded, clip, language=language, task=task, width=width))
        return
    from ..cluster import check_reachable, ray_module, spread, start_actors, start_ray

    if not isinstance(model, str):
        raise UsageError("[[backend=ray]] loads the model on each actor: give it by name (a folder, a hub id or a "
                         "sound organism's TOML), not loaded")
    check_reachable(ray_address)
    ray = ray_module()
    started = start_ray(ray, ray_address)
    try:
        options = {"device": device, "revision": revision, "language": language, "task": task, "width": width}
        actors = start_actors(ray, HeadPassActor, (model, options), jobs=jobs, tasks=len(clips), address=ray_address)
        spread(ray, actors, [(clip,) for clip in clips], "run", take, lambda index: clips[index].name)
    finally:
        if started:
            ray.shutdown()
