"""``attnviz explain``: one attention computation, step by step, in English or Chinese."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer

from .common import cli_command, echo_json, renamed, stdout_console
from .options import Causal, TextFile, Width, text_from_file


class ExplainFormat(str, Enum):
    table = "table"
    json = "json"


class Lang(str, Enum):
    en = "en"
    zh = "zh"


@cli_command(flags={"layer": "--walk-layer", "head": "--only-head"})
def explain(
    text: str | None = typer.Argument(
        None, metavar="TEXT", show_default=False,
        help="Input text for a real model (default: MiniLM) or a transformer config. Leave out for the seed "
             "tutorial's worked example, or for a matrices config's own X (- reads standard input).",
    ),
    text_file: Path | None = TextFile,
    model: str | None = typer.Option(
        None, "--model", "-m", show_default=False,
        help="A .toml config (a 'matrices' config with its own X, or a transformer config such as "
             "sample_configs/tiny.toml), or a model folder/hub id the native engine runs (BERT, GPT-2, LLaMA, "
             "Mistral, Qwen2). Default: the seed example without TEXT, MiniLM with TEXT.",
    ),
    walk_layer: int = typer.Option(0, "--walk-layer", help="The one layer whose attention is walked through, step by "
                                   "step."),
    only_head: int | None = typer.Option(None, "--only-head", help="Show only this head (every head is still computed); "
                                         "without it, every head.", show_default=False),
    old_layer: int | None = typer.Option(None, "--layer", "-l", hidden=True),  # --layer: a layer or all, default all
    old_head: int | None = typer.Option(None, "--head", hidden=True),  # --head: the head drawn, default 0
    scale: str = typer.Option(
        "sqrt-dk", "--scale",
        help="What to scale the scores by: sqrt-dk (1/√d_k, the rule), sqrt-len (1/√ number of keys, as seed 002 "
             "does), none, or a number to divide by (64, as seed 000 suggests). Anything but sqrt-dk turns the "
             "tutorial comparison off.",
    ),
    causal: bool | None = Causal,
    lang: Lang = typer.Option(Lang.en, "--lang", help="Language of the explanations: en or zh (中文)."),
    errata: bool = typer.Option(False, "--errata", help="List the tutorials' errors, each shown with computed numbers."),
    fmt: ExplainFormat = typer.Option(ExplainFormat.table, "--format", help="table (the steps, explained), or json (every "
                                      "number, full matrices)."),
    old_json: bool = typer.Option(False, "--json", hidden=True),
    width: int | None = Width,
) -> None:
    """Walk through one attention computation: X, W_Q/W_K/W_V, Q/K/V, heads, QKᵀ, scaling, mask, softmax, ·V, concat, W_O.

    Examples: attnviz explain · attnviz explain --lang zh · attnviz explain --model sample_configs/cross_attention.toml
    · attnviz explain "The cat sat" --walk-layer 2 --only-head 5
    """
    text = text_from_file(text, text_file)
    layer = renamed(walk_layer, old_layer, "--layer", "--walk-layer", parameter="walk_layer")
    head = renamed(only_head, old_head, "--head", "--only-head")
    as_json = renamed(fmt is ExplainFormat.json, old_json, "--json", "--format json")
    if errata:
        from ..api import errata as tutorial_errata
        from ..errors import UsageError

        if text is not None or model is not None:
            raise UsageError("[[errata]] lists the tutorials' errors on its own; leave out TEXT and [[model]]")

        items = tutorial_errata()
        if as_json:
            from dataclasses import asdict

            echo_json([asdict(item) for item in items])
        else:
            from ..api import render_errata

            render_errata(items, stdout_console(width), lang.value)
        return
    from ..api import explain as explain_steps

    walk = explain_steps(text, model, layer=layer, head=head, causal=causal, scale=scale)
    if as_json:
        echo_json(walk.to_dict())
    else:
        from ..api import render_walkthrough

        render_walkthrough(walk, stdout_console(width), lang.value)
