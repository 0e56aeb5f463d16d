"""One cell of a needle grid: its prompt run once with no weights, then its answer decoded greedily a token at a
time, each step's row of attention scored (:mod:`.scores`) and, for the page, kept (:mod:`.picture`); and the
check of a grid before any cell runs. Shared by the local grid (:func:`attnviz.needle.needle`) and the Ray actors
(:mod:`.ray_cells`)."""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor

from ..errors import UsageError
from ..sources.decoding import decode
from ..sources.stepping import Codec, Stepper
from .haystack import Prompt
from .picture import RunPicture
from .result import NeedleRun
from .scores import RETRIEVED_FROM, RunScores, rouge1_recall


def run_cell(stepper: Stepper, codec: Codec, prompt: Prompt, *, needle: str, max_new_tokens: int,
             picture: RunPicture | None = None) -> NeedleRun:
    """One run: the prompt, then a greedy answer scored step by step (see the module's docs); ``picture``
    keeps what the page draws of it."""
    scores = RunScores(stepper.n_layers, stepper.n_heads, prompt.ids, prompt.start, prompt.end)
    answer: list[int] = []

    def each(token: int, rows: Tensor | None) -> bool:
        assert rows is not None  # keep="rows" hands them over
        scores.add(rows, token)
        if picture is not None:
            picture.add(rows)
        answer.append(token)
        if token in codec.eos or (_ends_line(codec, token) and codec.decode(answer[:-1]).strip()):
            return True
        scores.extend_ids(token)
        return False

    decode(stepper, prompt.ids, max_new_tokens=max_new_tokens, eos_ids=codec.eos, keep="rows", each=each)
    text = codec.decode([t for t in answer if t not in codec.eos]).strip()
    if picture is not None:
        picture.name_keys(prompt.ids + answer, codec.label)
    recall = rouge1_recall(needle, text)
    return NeedleRun(
        length=len(prompt.ids), depth=prompt.depth, needle_start=prompt.start, needle_end=prompt.end, answer=text,
        answer_tokens=[codec.label(t) for t in answer], answer_ids=answer, recall=recall,
        retrieved=recall >= RETRIEVED_FROM, retrieval=scores.retrieval.tolist(), reasoning=scores.reasoning.tolist())


def _ends_line(codec: Codec, token: int) -> bool:
    return "\n" in codec.decode([token])


def check_grid(lengths: Sequence[int], depths: Sequence[float], max_positions: int | None, max_new_tokens: int,
               fixed: int) -> None:
    """Refuse a grid the model cannot run, naming the value, before any run."""
    if not lengths or not depths:
        raise UsageError("the grid is empty; give at least one length and one depth")
    for depth in depths:
        if not 0.0 <= depth <= 1.0:
            raise UsageError(f"[[depths]]: {depth:g} is not a fraction from 0 to 1")
    if not 1 <= max_new_tokens <= 4096:
        raise UsageError(f"[[max_new_tokens={max_new_tokens}]] must be between 1 and 4096")
    if max_positions is not None and fixed + 1 + max_new_tokens > max_positions:  # no length can work
        raise UsageError(f"the needle, the question and the prompt's template need {fixed:,} tokens (and the answer "
                         f"up to {max_new_tokens:,} more), but the model holds {max_positions:,} positions: give a "
                         "shorter [[needle]] or [[question]]"
                         + (" (or a smaller [[max_new_tokens]])" if fixed + 1 < max_positions else ""))
    for length in lengths:
        if length <= fixed:
            raise UsageError(f"[[lengths]]: {length} tokens cannot hold the needle, the question and the template "
                             f"({fixed} tokens); give lengths above {fixed}")
        if max_positions is not None and length + max_new_tokens > max_positions:
            raise UsageError(f"[[lengths]]: {length} tokens and an answer of up to {max_new_tokens} pass the "
                             f"{max_positions} positions the model takes; give lengths up to "
                             f"{max_positions - max_new_tokens}")
