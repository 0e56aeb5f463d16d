"""Finding a Whisper model's alignment heads over a corpus of clips (issue 61 item 4, ``attnviz align-heads``).

With reference word timings (:mod:`.references`): one teacher-forced pass per clip for every head (each decoder
layer's cross-attention scores before the softmax, kept as :func:`~attnviz.audio.whisper.cross_scores` reads them),
then for every (layer, head) that head's own word timings, the steps of :func:`attnviz.audio.timing.align` with a
one-head set (softmax over the clip's positions, normalisation over tokens, median filter, DTW, jumps, words),
scored against the clip's reference: the mean absolute error of the word boundaries (each matched word's start and
end) in seconds, and the share of boundaries within 20, 50 and 100 ms; each averaged over the clips, every clip
weighing the same. The reference's words are matched to the aligned words in order after :func:`.references.normalise`
(casefolded, punctuation stripped; words that are punctuation alone dropped on both sides): a clip whose words differ
is refused by name.

Heads are ranked by that mean error. The set: a greedy forward selection, the method discussed in huggingface
transformers issue #28365 ("How to find the alignment heads of a fine-tuned Whisper"): start from the best head, add
the head whose addition most lowers the set's error (its timings from ``align``'s mean over the set's heads, on the
same passes), stop when no head lowers it by more than ``tolerance`` seconds, at most ``2 × layers`` heads. Each step
tries the ``candidates`` best-ranked heads not yet chosen (default: all of them).

Without references, a label-free score: the one of Yeh, Meng and Tang, "Whisper Has an Internal Word Aligner"
(arXiv 2509.09987), as their code defines it (github.com/30stomercury/whisper-char-alignment, ``timing.py``:
``get_attentions`` and ``filter_attention`` with its defaults ``w_colnorm = w_rownorm = 1``, ``w_coverage = 0``):
each head's map ``A`` over every row of the teacher-forced pass, ``A = softmax(median_filter_7(scores[:, :positions]))``
over the clip's positions (the filter before the softmax, as their code does), scored ``Σ_positions ‖A[:, p]‖₂ +
Σ_tokens ‖A[t, :]‖₂`` (the L2 norms of its columns over the tokens and of its rows over the positions: a map whose
rows and columns each hold their weight in few cells scores high). The paper picks the top-k heads per utterance;
here the score is averaged over the clips, heads ranked by it (highest first) and the set is the ``label_free_heads``
best (default: as many as the decoder has layers). It is computed, and shown, with references too."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError, UsageError
from .clip_passes import clip_passes
from .references import Clip, read_head_corpus

Head = tuple[int, int]
TOLERANCES = (0.02, 0.05, 0.1)
"""The boundary tolerances (seconds) whose shares are reported."""
DEFAULT_TOLERANCE = 0.001
"""The least lowering of the set's error (seconds) that adds a head."""
COLUMNS = ("rank", "layer", "head", "error", "within_20ms", "within_50ms", "within_100ms", "label_free", "chosen")


@dataclass(frozen=True)
class HeadScore:
    """One head over the corpus: its mean boundary error (seconds; None without references), the shares of
    boundaries within 20, 50 and 100 ms, and its label-free score (see the module)."""

    layer: int
    head: int
    error: float | None
    within: tuple[float, ...] | None
    label_free: float


@dataclass
class HeadSearch:
    """The heads of ``model`` ranked (:attr:`heads`), the set chosen and how (:attr:`steps`: each head added and the
    set's error after it), over :attr:`clips`."""

    model: str
    layers: int
    per_layer: int
    heads: list[HeadScore]
    chosen: tuple[Head, ...]
    set_error: float | None
    set_within: tuple[float, ...] | None
    labelled: bool
    clips: list[str]
    steps: list[dict[str, Any]] = field(default_factory=list)
    tolerance: float = DEFAULT_TOLERANCE

    def rows(self) -> list[dict[str, Any]]:
        chosen = set(self.chosen)
        return [{"rank": rank, "layer": s.layer, "head": s.head, "error": s.error,
                 "within_20ms": None if s.within is None else s.within[0],
                 "within_50ms": None if s.within is None else s.within[1],
                 "within_100ms": None if s.within is None else s.within[2],
                 "label_free": s.label_free, "chosen": (s.layer, s.head) in chosen}
                for rank, s in enumerate(self.heads, start=1)]

    def grid(self) -> np.ndarray:
        """``[layers, heads]``: each head's error (with references) or label-free score (without)."""
        grid = np.full((self.layers, self.per_layer), np.nan)
        for s in self.heads:
            grid[s.layer, s.head] = s.error if self.labelled and s.error is not None else s.label_free
        return grid

    def forms(self) -> dict[str, Any]:
        """The chosen set in the three forms people load (:mod:`.heads_format`)."""
        from .heads_format import generation_config_heads, openai_mask, whisper_cpp_heads

        return {"alignment_heads": generation_config_heads(self.chosen),
                "openai_mask": openai_mask(self.chosen, self.layers, self.per_layer),
                "whisper_cpp": whisper_cpp_heads(self.chosen)}

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "alignment_heads", "model": self.model, "decoder_layers": self.layers,
                "heads_per_layer": self.per_layer, "labelled": self.labelled,
                "score": "mean absolute word-boundary error (s)" if self.labelled else
                "label-free: sum of column and row L2 norms (arXiv 2509.09987)",
                "clips": list(self.clips), "tolerance": self.tolerance,
                "chosen": [list(h) for h in self.chosen], "set_error": self.set_error,
                "set_within": None if self.set_within is None else dict(zip(("20ms", "50ms", "100ms"),
                                                                            self.set_within, strict=True)),
                "steps": self.steps, "forms": self.forms(), "heads": self.rows()}


@dataclass
class _ClipData:
    """What one clip's pass leaves for scoring: each head's alignment matrix (the rows DTW reads), the word
    bounds of the transcript, which aligned words match which reference words, and the reference's times."""

    name: str
    matrices: Any  # [layers × heads, rows, positions] float32 (memory, or a file mapped)
    bounds: np.ndarray  # each word's first row, then end of text's
    matched: np.ndarray  # the aligned words matched, in order
    starts: np.ndarray  # their reference starts and ends
    ends: np.ndarray
    per_second: float


def boundary_errors(times: np.ndarray, data: _ClipData) -> np.ndarray:
    """The absolute errors (seconds) of the matched words' starts and ends, from the rows' jump times."""
    starts = times[data.bounds[:-1]][data.matched]
    ends = times[data.bounds[1:]][data.matched]
    return np.abs(np.concatenate([starts - data.starts, ends - data.ends]))


def jump_times(matrix: Any, per_second: float) -> np.ndarray:
    """openai-whisper's steps after the matrix (:func:`attnviz.audio.timing.word_alignment`): DTW of the negated
    matrix, each row's time where the path first reaches it."""
    from .dtw import dtw

    rows, columns = dtw(-matrix.double().numpy())
    jumps = np.pad(np.diff(rows), (1, 0), constant_values=1).astype(bool)
    return columns[jumps] / per_second


def set_times(data: _ClipData, heads: Sequence[int]) -> np.ndarray:
    """The rows' jump times of the set of heads ``heads`` (flat indices): the mean of their matrices, as ``align``."""
    import torch

    stacked = torch.from_numpy(np.stack([np.asarray(data.matrices[k]) for k in heads]))
    return jump_times(stacked.mean(dim=0), data.per_second)


def _summary(errors: list[np.ndarray]) -> tuple[float, tuple[float, ...]]:
    """The mean over clips of each clip's mean error, and of its shares within each tolerance."""
    means = [float(e.mean()) for e in errors]
    within = tuple(float(np.mean([(e <= t + 1e-9).mean() for e in errors])) for t in TOLERANCES)
    return float(np.mean(means)), within


def find_alignment_heads(corpus: str | os.PathLike[str] | Sequence[Clip], model: Any, *,
                         references: str | os.PathLike[str] | None = None, language: str | None = None,
                         task: str = "transcribe", tolerance: float = DEFAULT_TOLERANCE,
                         max_heads: int | None = None, candidates: int | None = None,
                         label_free_heads: int | None = None, width: int = 7, device: str = "cpu",
                         revision: str | None = None, allow_outside: bool = False,
                         progress: Callable[[int, int, str], None] | None = None, backend: str = "local",
                         jobs: int = 2, ray_address: str | None = None) -> HeadSearch:
    """Rank every cross-attention head of the Whisper ``model`` over the clips of ``corpus`` and choose a set (see
    the module). ``corpus``: a corpus file, a folder of clips, one clip (:func:`.references.read_head_corpus`), or
    its clips. ``progress(done, total, clip name)`` after each clip."""
    import torch

    from ..cluster import check_backend
    from .model import whisper_model

    check_backend(backend, ray_address, jobs)
    if not (tolerance >= 0 and np.isfinite(tolerance)):
        raise UsageError(f"[[tolerance]] {tolerance!r} is not a number of seconds from 0")
    clips = list(corpus) if not isinstance(corpus, (str, os.PathLike)) else read_head_corpus(
        corpus, references=references, allow_outside=allow_outside)
    if not clips:
        raise InputError("the corpus has no clips")
    labelled = clips[0].reference is not None
    if any((c.reference is not None) != labelled for c in clips):
        raise InputError("some clips have references and some not; give every clip one, or none")
    loaded = whisper_model(model, device=device, revision=revision)
    layers, per_layer = int(loaded.config.decoder_layers), int(loaded.config.decoder_attention_heads)
    every = [(layer, head) for layer in range(layers) for head in range(per_layer)]
    limit = 2 * layers if max_heads is None else max_heads
    if limit < 1:
        raise UsageError(f"[[max_heads]] {max_heads} is not a positive number of heads")
    per_second = loaded.sampling_rate / (loaded.hop_length * loaded.stride)
    free = np.zeros((layers, per_layer))
    scratch = tempfile.TemporaryDirectory(prefix="attnviz-heads-")
    data: list[_ClipData] = []
    kept: dict[int, _ClipData] = {}
    frees: dict[int, np.ndarray] = {}  # summed in the clips' order: the same sum whichever backend ran them

    def take(index: int, found: Any) -> None:
        frees[index] = found.free
        if labelled:
            assert found.matrices is not None and found.bounds is not None and found.matched is not None
            assert found.starts is not None and found.ends is not None
            matrices = np.lib.format.open_memmap(Path(scratch.name) / f"{index}.npy", mode="w+", dtype=np.float32,
                                                 shape=found.matrices.shape)
            matrices[:] = found.matrices
            matrices.flush()
            kept[index] = _ClipData(clips[index].name, matrices, found.bounds, found.matched, found.starts,
                                    found.ends, per_second)
        if progress is not None:
            progress(len(frees), len(clips), clips[index].name)

    try:
        clip_passes(clips, loaded, model, take, language=language, task=task, width=width, backend=backend, jobs=jobs,
                ray_address=ray_address, device=device, revision=revision)
        data.extend(kept[index] for index in sorted(kept))
        for number in sorted(frees):
            free += frees[number]
        free /= len(clips)
        if not labelled:
            order = sorted(every, key=lambda h: (-free[h], h))
            scores = [HeadScore(layer, head, None, None, float(free[layer, head])) for layer, head in order]
            size = layers if label_free_heads is None else label_free_heads
            if size < 1:
                raise UsageError(f"[[label_free_heads]] {size} is not a positive number of heads")
            chosen = tuple(order[:size])
            return HeadSearch(loaded.name, layers, per_layer, scores, chosen, None, None, False,
                              [c.name for c in clips], tolerance=tolerance)
        per_head: dict[Head, tuple[float, tuple[float, ...]]] = {}
        for k, head in enumerate(every):
            errors = [boundary_errors(jump_times(torch.from_numpy(np.asarray(d.matrices[k])), d.per_second), d)
                      for d in data]
            per_head[head] = _summary(errors)
        order = sorted(every, key=lambda h: (per_head[h][0], -free[h], h))
        scores = [HeadScore(layer, head, per_head[(layer, head)][0], per_head[(layer, head)][1],
                            float(free[layer, head])) for layer, head in order]
        index = {head: k for k, head in enumerate(every)}
        pool = order if candidates is None else order[:max(candidates, 1)]
        chosen_list = [order[0]]
        best, best_within = per_head[order[0]]
        steps = [{"added": list(order[0]), "set_error": best}]
        while len(chosen_list) < min(limit, len(every)):
            tried = []
            for head in pool:
                if head in chosen_list:
                    continue
                flat = [index[h] for h in [*chosen_list, head]]
                tried.append((_summary([boundary_errors(set_times(d, flat), d) for d in data]), head))
            if not tried:
                break
            (error, within), head = min(tried, key=lambda t: (t[0][0], order.index(t[1])))
            if best - error <= tolerance:
                break
            chosen_list.append(head)
            best, best_within = error, within
            steps.append({"added": list(head), "set_error": error})
        return HeadSearch(loaded.name, layers, per_layer, scores, tuple(chosen_list), best, best_within, True,
                          [c.name for c in clips], steps, tolerance)
    finally:
        data.clear()
        scratch.cleanup()


def model_folder(model: str) -> Path | None:
    """The local folder of ``model`` (a folder, or a sound organism's built one), or None for a hub id."""
    if model.lower().endswith(".toml"):
        from .organism import sound_organism_folder
        from .organism_spec import is_sound_organism

        if is_sound_organism(model):
            return sound_organism_folder(model)[0]
    path = Path(model)
    return path if path.is_dir() else None


def write_config(folder: str | os.PathLike[str], model: str, heads: Sequence[Sequence[int]], *,
                 loaded: Any = None, revision: str | None = None) -> Path:
    """A copy of the Whisper ``model`` in ``folder`` with its generation_config.json's ``alignment_heads`` set to
    ``heads``: the model's folder copied (a hub id: the model loaded and saved with its processor), written in a
    temporary folder beside ``folder`` and renamed into place. A ``folder`` that exists and is not empty, or that
    is (or is inside) the model's own folder, is refused."""
    import json

    from .heads_format import generation_config_heads

    target = Path(folder)
    source = model_folder(model)
    resolved = target.resolve()
    if source is not None and (resolved == source.resolve() or resolved.is_relative_to(source.resolve())):
        raise UsageError(f"[[write_config]] {target} is the model's own folder; give a new folder for the copy")
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        raise UsageError(f"[[write_config]] {target} is not a folder; give a new folder for the copy")
    if target.is_dir() and any(target.iterdir()):
        raise UsageError(f"[[write_config]] {target} exists and is not empty; give a new or empty folder")
    parent = resolved.parent
    if not parent.is_dir():
        raise UsageError(f"[[write_config]] {target}: its folder {parent} does not exist")
    temporary = Path(tempfile.mkdtemp(prefix=f".{resolved.name}.", dir=parent))
    try:
        if source is not None:
            shutil.rmtree(temporary)
            shutil.copytree(source, temporary, symlinks=False)
            for mark in temporary.glob("attnviz_sound_organism.json"):
                mark.unlink()
        else:
            from .model import whisper_model

            whole = whisper_model(loaded if loaded is not None else model, revision=revision)
            whole.network.save_pretrained(temporary)
            whole.tokenizer.save_pretrained(temporary)
            whole.features.save_pretrained(temporary)
        config_path = temporary / "generation_config.json"
        if config_path.is_file():
            config = json.loads(config_path.read_text(encoding="utf-8"))
        else:
            from .model import whisper_model

            whole = whisper_model(loaded if loaded is not None else model, revision=revision)
            config = whole.network.generation_config.to_dict()
        config["alignment_heads"] = generation_config_heads(heads)
        config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        if target.is_dir():
            target.rmdir()
        temporary.rename(target)
    except OSError as exc:
        shutil.rmtree(temporary, ignore_errors=True)
        raise UsageError(f"[[write_config]] cannot write {target} ({exc.strerror or exc})") from None
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    return target
