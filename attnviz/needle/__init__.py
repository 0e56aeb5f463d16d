"""Needle in a haystack, and the heads that retrieve: a depth × length grid of greedy answers on a causal
model, each head scored as Wu et al. (2024) and HeadKV (Fu et al. 2024) define it (:mod:`.scores`).

Each cell's prompt (:mod:`.haystack`) runs once with no attention weights; then the answer is decoded
greedily one token at a time on the key/value cache (:mod:`attnviz.sources.stepping`), and each step's
row of attention, ``[layers, heads, T]``, is scored and dropped: memory O(T) per step, never O(T²).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..defaults import ANSWER_TOKENS, DEPTHS
from .cells import check_grid, run_cell
from .haystack import NEEDLE, QUESTION, PromptBuilder
from .picture import RunPicture
from .result import NeedleResult, NeedleRun

__all__ = ["DEPTHS", "NEEDLE", "QUESTION", "NeedleResult", "NeedleRun", "grid_lengths", "needle", "run_cell"]

MAX_DEFAULT_LENGTH = 4096  # the default grid's longest prompt: a laptop's afternoon, not its week
MAX_NEW_TOKENS = ANSWER_TOKENS  # the default answer's tokens (attnviz.defaults, as the command's --max-new-tokens)


def grid_lengths(max_positions: int | None, max_new_tokens: int, count: int = 3) -> list[int]:
    """The default lengths: ``count`` evenly spaced up to the model's positions less the answer's (at most
    :data:`MAX_DEFAULT_LENGTH`)."""
    top = MAX_DEFAULT_LENGTH if max_positions is None else min(MAX_DEFAULT_LENGTH, max_positions - max_new_tokens)
    return sorted({max(1, round(top * (n + 1) / count)) for n in range(count)})


def needle(model: str | None, *, haystack: str | None = None, needle: str | None = None, question: str | None = None,
           lengths: Sequence[int] | None = None, depths: Sequence[float] = DEPTHS,
           max_new_tokens: int = MAX_NEW_TOKENS, seed: int = 0, engine: str = "auto", revision: str | None = None,
           device: str = "cpu", trust_remote_code: bool = False, dtype: str | None = None,
           haystack_name: str | None = None, backend: str = "local", jobs: int = 2, ray_address: str | None = None,
           pictures: bool = False, progress: Callable[[int, int, NeedleRun | None], None] | None = None) -> NeedleResult:
    """Run the depth × length grid on ``model`` (a causal model's folder or hub id) and score every head.

    ``needle``, ``question``: the sentence to hide and the question whose answer it is (default: the ones a model
    organism declares, else :data:`NEEDLE` and :data:`QUESTION`). ``haystack``: the text to hide the needle in (default: attnviz's own seeded prose, ``seed``); ``lengths``:
    prompt lengths in tokens (default :func:`grid_lengths`); ``depths``: where the needle goes, 0 (first) to 1
    (last). ``pictures``: keep what the page draws of each run (``result.pictures``). ``backend="ray"``: the cells on a Ray cluster, ``jobs`` actors with a model each (a local cluster,
    or the one at ``ray_address``); the runs are the same as a local grid's. ``progress(done, total, run)`` is
    called before the first run and after each."""
    from ..organisms import declared_needle
    from .model import load_codec, load_stepper

    if needle is None or question is None:
        own_needle, own_question = declared_needle(model)
        needle = needle if needle is not None else own_needle or NEEDLE
        question = question if question is not None else own_question or QUESTION

    from ..cluster import check_backend

    check_backend(backend, ray_address, jobs)
    load: dict[str, Any] = {"engine": engine, "revision": revision, "device": device, "trust_remote_code": trust_remote_code,
            "dtype": dtype}
    if backend == "ray":
        codec, facts = load_codec(model, **load)  # the actors load the model; the driver plans and checks
        stepper = None
    else:
        stepper, codec = load_stepper(model, **load)
    builder = PromptBuilder(codec, haystack=haystack, needle=needle, question=question, seed=seed)
    max_positions = stepper.max_positions if stepper is not None else facts.max_positions
    chosen = sorted(set(lengths)) if lengths else grid_lengths(max_positions, max_new_tokens)
    chosen_depths = sorted(set(float(d) for d in depths))
    check_grid(chosen, chosen_depths, max_positions, max_new_tokens, builder.fixed)
    cells = [(length, depth) for length in chosen for depth in chosen_depths]
    total = len(cells)
    if progress is not None:
        progress(0, total, None)
    finished: list[NeedleRun] = []
    kept: list[RunPicture | None] = []

    def done(run: NeedleRun, picture: RunPicture | None = None) -> None:
        finished.append(run)
        kept.append(picture)
        if progress is not None:
            progress(len(finished), total, run)

    if stepper is None:
        from .ray_cells import run_on_ray

        spec = {"model": model, "load": load, "haystack": haystack, "needle": needle, "question": question,
                "seed": seed, "max_new_tokens": max_new_tokens, "pictures": pictures}
        runs, shown, name, engine_used = run_on_ray(spec, cells, jobs=jobs, address=ray_address, done=done)
        n_layers, n_heads = facts.n_layers, facts.n_heads
    else:
        runs, shown = [], []
        for length, depth in cells:
            prompt = builder.build(length, depth)
            picture = RunPicture(len(prompt.ids), prompt.start, prompt.end) if pictures else None
            runs.append(run_cell(stepper, codec, prompt, needle=builder.needle_text, max_new_tokens=max_new_tokens,
                                 picture=picture))
            shown.append(picture)
            done(runs[-1], picture)
        name, engine_used, n_layers, n_heads = stepper.name, stepper.engine, stepper.n_layers, stepper.n_heads
    result = NeedleResult(model_name=name, engine=engine_used, n_layers=n_layers, n_heads=n_heads,
                          needle=builder.needle_text, question=builder.question,
                          haystack=haystack_name or (f"attnviz prose (seed {seed})" if haystack is None else "given"),
                          lengths=chosen, depths=chosen_depths, max_new_tokens=max_new_tokens, runs=runs)
    result.pictures = [p for p in shown if p is not None]
    return result
