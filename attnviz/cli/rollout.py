"""``attnviz rollout``: how much of each input token reaches each position, or norm-based attention."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer

from ..errors import UsageError
from .common import cli_command, show_view
from .options import (
    Cmap,
    Device,
    DeviceOpt,
    EngineChoice,
    EngineOpt,
    Fit,
    Model,
    Out,
    Revision,
    Truncate,
    TrustRemoteCode,
    Verbose,
    Width,
    open_source,
    parse_head,
)


class Fusion(str, Enum):
    mean = "mean"
    max = "max"
    min = "min"


@cli_command
def rollout(
    text: str = typer.Argument(..., metavar="TEXT", help="Input text."),
    model: str | None = Model,
    fusion: Fusion | None = typer.Option(None, "--fusion", help="How a layer's heads are combined before rolling out (default mean).", show_default=False),
    norm: bool = typer.Option(False, "--norm", help="Show norm-based attention ‖α f(x)‖ (Kobayashi et al. 2020) instead."),
    layer: int | None = typer.Option(None, "--layer", "-l", help="Roll out up to this layer (default: the last).", show_default=False),
    head: str = typer.Option("mean", "--head", help="With --norm: a head number, 'all' or 'mean'."),
    out: Path | None = Out,
    values: bool = typer.Option(False, "--values", help="Write each value into its cell."),
    fit: Fit = typer.Option(Fit.downsample, "--fit", help="Wider than the terminal: max-pool it, or split it into pages."),
    cmap: Cmap = typer.Option(Cmap.viridis, "--cmap", help="Colormap."),
    width: int | None = Width,
    truncate: bool = Truncate,
    engine: EngineChoice = EngineOpt,
    revision: str | None = Revision,
    device: Device = DeviceOpt,
    trust_remote_code: bool = TrustRemoteCode,
    verbose: bool = Verbose,
) -> None:
    """Attention rollout (Abnar & Zuidema 2020): attention chained through the layers with the residual stream.

    Example: attnviz rollout "The cat sat on the mat." --fusion max
    """
    head_choice = parse_head(head)
    if norm and fusion is not None:
        raise UsageError("--fusion belongs to rollout; --norm shows one layer's heads (choose them with --head)")
    fusion = fusion or Fusion.mean
    if layer is not None and layer < 0:
        raise UsageError(f"--layer {layer} is out of range; layers are numbered from 0")
    if out is not None:
        from ..fileio import check_output_path

        check_output_path(out)
    source = open_source(model, engine=engine, causal=None, revision=revision, device=device, device_map=None,
                         trust_remote_code=trust_remote_code, verbose=verbose)
    last = source.n_layers - 1 if layer is None else layer
    from ..render.view import matrix_view, select_panels

    if norm:
        # Only the layer shown is built.
        result = source.extract(text, truncate=truncate, layers=[last])
        if result.value_norms is None:
            raise UsageError(f"--norm needs each head's value vectors; the {source.engine} engine does not give them. "
                             "Use --engine native (BERT, GPT-2, LLaMA families) or a .toml config model")
        from ..metrics import norm_attention

        tensor = norm_attention(result.attentions, result.value_norms)
        panels, titles, what = select_panels(tensor, 0, head_choice, result.model_name)
        title = f"{result.model_name} · norm-based attention ‖α f(x)‖ · layer {last} · {what}"
    else:
        from ..api import rollout_of_text

        # Layers are fused as they are computed, up to the one shown: one layer's matrices at a time.
        rolled, result = rollout_of_text(source, text, layer=last, head_fusion=fusion.value, truncate=truncate)
        panels, titles = rolled[None].numpy(), [f"rollout to layer {last}"]
        title = f"{result.model_name} · attention rollout ({fusion.value} of heads) through layers 0–{last}"
    view = matrix_view(
        panels, result.tokens, result.tokens, title=title, panel_titles=titles, cmap=cmap.value,
        row_axis="positions (after the layers)" if not norm else "queries (who attends)",
        col_axis="input tokens" if not norm else "keys (attended to)",
        value_name="‖α f(x)‖" if norm else "share of the input token",
    )
    show_view(view, out, values=values, fit=fit.value, width=width)
