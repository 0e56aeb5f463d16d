"""``attnviz generate``: a causal model continues a prompt; each new token's attention, as it was computed."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import typer

from ..errors import UsageError
from .common import cli_command, renamed, show_view, stdout_console, wrote
from .options import (
    GENERATING_MODEL,
    Cmap,
    CmapOpt,
    GenerateModel,
    ImageFiles,
    ModelOptions,
    TextFile,
    Width,
    model_command,
    parse_index_or_word,
    parse_layer,
    text_from_file,
)
from .outputs import check_view_outputs


@cli_command(flags={"head": "--only-head"})
@model_command(without=('device_map', 'causal'), model=GenerateModel)
def generate(
    options: ModelOptions,
    prompt: str | None = typer.Argument(None, metavar="PROMPT", help="The text to continue (- reads standard input).", show_default=False),
    text_file: Path | None = TextFile,
    max_new_tokens: int = typer.Option(20, "--max-new-tokens", "-n", min=1, help="How many tokens to generate at most."),
    sample: bool = typer.Option(False, "--sample", help="Sample the next token instead of taking the likeliest."),
    temperature: float = typer.Option(1.0, "--temperature", help="With --sample: flatten (>1) or sharpen (<1)."),
    top_k: int | None = typer.Option(None, "--top-k", min=1, help="With --sample: only the k likeliest tokens.", show_default=False),
    top_p: float | None = typer.Option(None, "--top-p", help="With --sample: the smallest set of tokens holding this much probability.", show_default=False),
    seed: int | None = typer.Option(None, "--seed", help="With --sample: the seed of the sampling "
                                    "(the same seed gives the same tokens; default 0, as atlas's: a run repeats).",
                                    show_default=False),
    stop_at_eos: bool = typer.Option(True, "--stop-at-eos/--no-stop-at-eos", help="Stop at the model's end-of-sequence token."),
    layer: str = typer.Option("all", "--layer", "-l", help="A layer number (from 0), or 'all': every layer (their mean)."),
    only_head: int | None = typer.Option(None, "--only-head", help="Show only this head's attention (a number from 0); "
                                         "without it, the mean of every head.", show_default=False),
    old_head: str | None = typer.Option(None, "--head", hidden=True),  # --head: the head a command draws, default 0
    top_attended: int = typer.Option(3, "--top-attended", min=1, help="How many attended tokens to list per generated "
                                     "token (the most attended first)."),
    old_top: int | None = typer.Option(None, "--top", min=1, hidden=True),  # --top: the first N rows (heads, atlas)
    out: list[Path] = typer.Option([], "--out", "-o", help="Write the result (repeatable), its kind from its extension: .npz (every row), or the generated rows as .png, .svg, .pdf, or the page as .html.", show_default=False),
    image: list[Path] = ImageFiles,
    cmap: Cmap = CmapOpt,
    width: int | None = Width,
) -> None:
    """Generate from PROMPT and show, for each new token, the tokens it attended to most, then a heatmap
    of the generated rows against every token. Greedy unless --sample. Runs on attnviz's own attention with a
    key/value cache where it can (GPT-2, LLaMA family, causal config models), else on transformers.
    An encoder-decoder model (T5, BART) reads PROMPT as its source: each new token is shown with what it
    attended to in the source and in the target, and the heatmap is its cross-attention over the source.

    With --image, a vision-language model (one of the families --image lists) answers about the picture (greedy
    unless --sample, as without it), and each new token's attention over it is shown (--out x.png: a panel per new
    token).

    Example: attnviz generate "The cat sat on the" --model gpt2 --max-new-tokens 10
    """
    top = renamed(top_attended, old_top, "--top", "--top-attended", parameter="top_attended")
    chosen_layer = parse_layer(layer)
    chosen_head = renamed(only_head, None if old_head is None else parse_index_or_word(old_head, "--head", "head",
                                                                                        ("mean",)), "--head", "--only-head")
    chosen_head = None if chosen_head == "mean" else chosen_head
    from ..render.registry import FORMATS, figure_suffixes, or_list, page_format

    # --out: the result (.npz), or a view format of the registry: a figure of the generated rows, or the page
    pages = [f.suffix for f in FORMATS.values() if f.kind == "view" and f.per_text]
    accepted = list(dict.fromkeys([FORMATS["npz"].suffix, *figure_suffixes(), *pages]))
    for path in out if not image else []:  # with pictures, the picture commands' own kinds (checked there)
        if path.suffix.lower() not in accepted:
            raise UsageError(f"--out {path}: use {or_list(accepted)}")
    out = check_view_outputs(out) if not image else out
    prompt = text_from_file(prompt, text_file)
    if prompt is None:
        raise UsageError("give PROMPT, the text to continue (or --text-file PATH, or - for standard input)")
    seed = 0 if seed is None and sample else seed  # a sampled run repeats unless --seed says otherwise
    if image:
        from ..api import Sampling
        from .images import image_generate, refuse_unused

        refuse_unused("stop_at_eos", "top_attended",
                      why="the model answers until its end token, and each new token's attention over the picture is "
                          "shown")
        sampling = Sampling(sample, temperature, top_k, top_p, seed)
        sampling.check()  # before the model loads
        image_generate(options, prompt, image, max_new_tokens=max_new_tokens, layer=chosen_layer, head=chosen_head,
                       out=list(out), cmap=cmap.value, width=width, sampling=sampling)
        return
    if options.model is None:
        options = replace(options, model=GENERATING_MODEL)
        import sys

        sys.stderr.write(f"attnviz: no --model given; generating with {GENERATING_MODEL} (random weights: its words "
                         "mean nothing; give --model gpt2 for real text)\n")
    from ..api import generate as run
    from ..api import generation_summary, generation_view

    result = run(prompt, options.model, max_new_tokens=max_new_tokens, sample=sample, temperature=temperature,
                 top_k=top_k, top_p=top_p, seed=seed, stop_at_eos=stop_at_eos, engine=options.engine,
                 revision=options.revision, device=options.device, trust_remote_code=options.trust_remote_code,
                 dtype=options.dtype)
    console = stdout_console(width)
    if options.verbose:
        import sys

        how = {"native": "attnviz's attention, key/value cache", "config": "config model, key/value cache",
               "hf": "transformers generate, eager attention",
               "fused": "transformers generate, attnviz's attention function"}.get(result.metadata.get("engine", ""), "?")
        sys.stderr.write(f"attnviz: engine {result.metadata.get('engine')} ({how}) on {options.device}, "
                         f"model {result.model_name}\n")
    summary = generation_summary(result, layer=chosen_layer, head=chosen_head, top=top)
    _print_summary(summary, console)
    figures = []
    for path in out:
        page = page_format(path)
        if path.suffix.lower() == FORMATS["npz"].suffix:
            wrote(result.save(path))
        elif page is not None:  # the whole result's page, opened on the generated rows (an encoder-decoder's cross)
            from ..api import page_of_result

            whole = page_of_result(result, title=f"generated from {prompt[:40]!r}", view="query",
                                   kind="cross" if summary.seq2seq else "self")
            wrote(page.render(whole, path, cmap=cmap.value))
        else:
            figures.append(path)
    if figures or not out:
        view = generation_view(result, layer=chosen_layer, head=chosen_head, cmap=cmap.value)
        show_view(view, figures or None, values=False, fit="downsample", width=width)


def _print_summary(summary: Any, console: Any) -> None:
    from ..api import printable

    def listed(attended: list[tuple[int, str, float]]) -> str:
        return " · ".join(f"{printable(t)} ({k}) {w:.2f}" for k, t, w in attended)

    console.print(summary.heading())
    for step in summary.steps:
        if step.source is None:
            console.print(f"{step.position:>5} {printable(step.label):<14} ← {listed(step.attended)}")
        else:
            console.print(f"{step.position:>5} {printable(step.label):<14} source ← {listed(step.source)}")
            console.print(f"{'':>5} {'':<14} target ← {listed(step.attended)}")
    if summary.stopped_at_eos:
        console.print("stopped at the end-of-sequence token", style="dim")
