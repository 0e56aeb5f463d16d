"""``attnviz explain``: one attention computation, step by step."""

from __future__ import annotations

import typer

from .common import cli_command, stdout_console
from .options import Causal, Width

DEFAULT_MODEL = "sample_configs/seed_example.toml"


@cli_command
def explain(
    text: str | None = typer.Argument(
        None, metavar="[TEXT]", help="Input text (leave out for the seed example's fixed input).", show_default=False
    ),
    model: str = typer.Option(DEFAULT_MODEL, "--model", "-m", help="A .toml config: a 'matrices' config with its own X, or a transformer config such as sample_configs/tiny.toml."),
    layer: int = typer.Option(0, "--layer", "-l", help="Which layer's attention to walk through (transformer configs)."),
    causal: bool | None = Causal,
    as_json: bool = typer.Option(False, "--json", help="Print the steps as JSON instead of tables."),
    width: int | None = Width,
) -> None:
    """Walk through one attention computation: X, W_Q/W_K/W_V, Q/K/V, heads, QKᵀ, 1/√d_k, mask, softmax, ·V, concat, W_O.

    Example: attnviz explain --model sample_configs/seed_example.toml
    """
    from ..api import explain as explain_steps

    walk = explain_steps(text, model, layer=layer, causal=causal)
    if as_json:
        import json

        typer.echo(json.dumps(walk.to_dict(), ensure_ascii=False, indent=1))
    else:
        from ..render.explain import render_walkthrough

        render_walkthrough(walk, stdout_console(width))
