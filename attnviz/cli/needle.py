"""``attnviz needle``: can a causal model find a fact hidden in a long prompt, and which heads do the finding."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import typer

from ..api import result_suffixes as suffixes
from ..defaults import ANSWER_TOKENS, DEPTHS, NEEDLE, QUESTION
from ..errors import UsageError
from .common import cli_command, echo_json, note, stdout_console
from .options import CausalModel, Column, Field, InputFormat, ModelOptions, Width, model_command, ray_options
from .outputs import StdoutFormat, announcer, check_outputs, csv_text

NEEDLE_TEXT, QUESTION_TEXT = NEEDLE, QUESTION  # the library's (attnviz.defaults)


RAY = ray_options("the grid's cells")


@cli_command
@model_command(without=("device_map", "causal"), model=CausalModel)
def needle(
    options: ModelOptions,
    haystack: Path | None = typer.Option(None, "--haystack", help="The text to hide the needle in: a .txt file whole, or "
                                         "any file of texts attnviz reads (JSONL, CSV, Parquet: the texts joined), "
                                         "repeated as needed. Default: attnviz's own seeded prose (offline).",
                                         show_default=False),
    field: str | None = Field,
    column: str | None = Column,
    input_format: str | None = InputFormat,
    needle_text: str | None = typer.Option(None, "--needle", help=f"The sentence to hide (default: a model organism's own, else {NEEDLE_TEXT!r}).", show_default=False),
    question: str | None = typer.Option(None, "--question", help=f"The question whose answer is the needle (default: a model organism's own, else {QUESTION_TEXT!r}).", show_default=False),
    lengths: str = typer.Option("auto", "--lengths", help="Prompt lengths in tokens, e.g. 1000,2000,4000 (k is 1,024 "
                                "tokens: 4k is 4,096); auto: three up to the model's positions less the answer's, at "
                                "most 4,096."),
    depths: str = typer.Option(",".join(f"{d:g}" for d in DEPTHS), "--depths", help="Where the needle goes, as fractions of the "
                               "haystack (0.5, or 50%): 0 first, 1 last (moved back to a sentence's end)."),
    max_new_tokens: int = typer.Option(ANSWER_TOKENS, "--max-new-tokens", "-n", min=1, max=4096,
                                       help="How many tokens to generate at most (the answer stops earlier at a "
                                            "new line or the end-of-sequence token)."),
    seed: int = typer.Option(0, "--seed", help="The seed of what is random, so a run can be repeated: here, "
                             "attnviz's own haystack prose."),
    top: int | None = typer.Option(None, "--top", min=1, help="Show only the first N heads of the ranking.",
                                   show_default=False),
    fmt: StdoutFormat = typer.Option(StdoutFormat.table, "--format", help="What is printed on stdout: the tables, or "
                                     "json (the whole result), csv (the heads ranked; parquet: write it with --out)."),
    out: list[Path] = typer.Option([], "--out", "-o", help="Write a file (repeatable), its kind from its extension: "
                                   ".json (the whole result: every run, answer and score; heads --retrieval reads "
                                   "it), .csv or .parquet (the heads ranked), .png, .svg, .pdf (the grid and the "
                                   "heads' scores), .html (the page: click a cell for that run's answer attention).", show_default=False),
    backend: str = RAY[0],
    jobs: int = RAY[1],
    ray_address: str | None = RAY[2],
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print no progress."),
    width: int | None = Width,
) -> None:
    """Hide a sentence (the needle) at several depths of prompts of several lengths, let the model answer the
    question greedily, and score every head by how it retrieved: Wu et al.'s retrieval score (its strongest key
    inside the needle holds the token it generates) and HeadKV's retrieval-reasoning score. Each answer step
    computes only its own row of attention, so prompts of 32,768 tokens fit in memory.

    Example: attnviz needle --model Qwen/Qwen2.5-0.5B-Instruct --lengths 1000,4000,16000 --out run.json --out grid.png
    """
    from ..api import check_backend

    check_backend(backend, ray_address, jobs)
    chosen_lengths = parse_lengths(lengths)
    chosen_depths = parse_depths(depths)
    from ..api import NeedleResult  # its module registers the formats it writes

    outputs = check_outputs(out, suffixes(NeedleResult.KIND))
    text = None
    if haystack is not None:
        from ..api import haystack_chars, read_haystack

        text = read_haystack(haystack, field=field, column=column, input_format=input_format,
                             max_chars=haystack_chars(chosen_lengths))
    elif field is not None or column is not None or input_format is not None:
        raise UsageError("[[field]], [[column]] and [[input_format]] say how to read [[haystack]]; give a haystack file")
    from ..api import needle as run_needle
    from ..render.progress import export_progress

    console = stdout_console(width)
    from rich.console import Console

    progress_console = Console(stderr=True)
    with export_progress(progress_console, enabled=not quiet and fmt is StdoutFormat.table, doing="needle",
                         label="needle: answering", unit="cells") as (start, advance):
        def progress(done: int, total: int, _run: Any) -> None:
            if done == 0:
                start(total, 0)
            else:
                advance()

        result = run_needle(options.model, haystack=text, needle=needle_text, question=question,
                            lengths=chosen_lengths, depths=chosen_depths, max_new_tokens=max_new_tokens, seed=seed,
                            engine=options.engine, revision=options.revision, device=options.device,
                            trust_remote_code=options.trust_remote_code, dtype=options.dtype,
                            haystack_name=None if haystack is None else str(haystack), backend=backend, jobs=jobs,
                            ray_address=ray_address, pictures=any(p.suffix.lower() == ".html" for p in outputs),
                            progress=progress)
    if options.verbose:
        note(f"{result.model_name}: {result.engine} engine, on {options.device}")
    for path in outputs:
        result.save(path)
        announcer(fmt)(path)
    ranked = result.heads()[:top] if top else result.heads()
    if fmt is StdoutFormat.json:
        echo_json(result.to_dict())
        return
    if fmt is StdoutFormat.csv:
        from ..api import needle_head_columns as HEAD_COLUMNS

        typer.echo(csv_text(ranked, HEAD_COLUMNS), nl=False)
        return
    from ..render.needle import heads_table, runs_table, success_table
    from ..render.tables import titled

    counted = len(result.counted)
    console.print(titled(f"{result.model_name}: recall of the needle (%), needle depth × prompt length (tokens)",
                         success_table(result.success(), result.lengths, result.depths)))
    console.print()
    console.print(titled("answers", runs_table(result.run_rows(), width=console.width)))
    console.print()
    console.print(titled(f"heads by retrieval score, over the {counted} of {len(result.runs)} runs that retrieved "
                         "(≥ 0.1: a retrieval head)", heads_table(ranked)))
    if counted == 0:
        note("no run retrieved the needle (ROUGE-1 recall ≥ 0.5), so every head scores 0; try shorter lengths, "
             "an instruction-tuned model or more --max-new-tokens")


MAX_GRID_VALUES = 64  # lengths, and depths, one needle run may sweep (a grid of 64 × 64 cells at most)


def _parts(text: str, what: str) -> list[str]:
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts:
        raise UsageError(f"[[{what}]]: give at least one value")
    if len(parts) > MAX_GRID_VALUES:
        raise UsageError(f"[[{what}]] gives {len(parts):,} values; at most {MAX_GRID_VALUES}")
    return parts


def parse_lengths(text: str) -> list[int] | None:
    """``auto`` (None) or a comma-separated list of token counts; ``k`` counts 1,024 tokens (``4k`` is 4,096, as a
    model's "4k context" is), so ``1.5k`` is 1,536."""
    if text.strip().lower() == "auto":
        return None
    values = []
    for part in _parts(text, "lengths"):
        part = part.lower().replace("_", "")
        scale = 1024 if part.endswith("k") else 1
        try:
            number = float(part[:-1]) * scale if scale > 1 else int(part)
        except ValueError:
            raise UsageError(f"[[lengths]]: {part!r} is not a whole number of tokens; give e.g. 1000,2000,4000 "
                             "(or 1k,2k,4k: k is 1,024 tokens) or auto") from None
        if not math.isfinite(number) or number != int(number):
            raise UsageError(f"[[lengths]]: {part!r} is not a whole number of tokens (k is 1,024 tokens)")
        value = int(number)
        if value < 1:
            raise UsageError(f"[[lengths]]: {value} is not a positive number of tokens")
        values.append(value)
    return values


def parse_depths(text: str) -> list[float]:
    """A comma-separated list of fractions from 0 to 1, or percentages (``50%``), as ``--budget`` takes them."""
    values = []
    for part in _parts(text, "depths"):
        percent = part.endswith("%")
        try:
            value = float(part[:-1] if percent else part) / (100 if percent else 1)
        except ValueError:
            raise UsageError(f"[[depths]]: {part!r} is not a number; give fractions such as 0,0.5,1 (or 0%,50%,100%)"
                             ) from None
        if not math.isfinite(value) or not 0.0 <= value <= 1.0:
            hint = f" ({value / 100:g}, not {value:g})" if 1 < value <= 100 and not percent else ""
            raise UsageError(f"[[depths]]: {part} is not a fraction from 0 to 1 (or 0% to 100%){hint}")
        values.append(value)
    return values
