"""``attnviz rollout``: how much of each input token reaches each position, or norm-based attention."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer

from ..errors import UsageError
from .common import cli_command, show_view
from .options import (
    Causal,
    Cmap,
    CmapOpt,
    Device,
    DeviceMap,
    DeviceOpt,
    EngineChoice,
    EngineOpt,
    Fit,
    HideSpecial,
    Kind,
    KindChoice,
    Layer,
    Model,
    Out,
    Pair,
    Renormalize,
    Revision,
    Target,
    Truncate,
    TrustRemoteCode,
    Verbose,
    Width,
    Words,
    kind_name,
    open_source,
    parse_head,
    parse_index_or_word,
    reading,
)


class Fusion(str, Enum):
    mean = "mean"
    max = "max"
    min = "min"


@cli_command
def rollout(
    text: str | None = typer.Argument(None, metavar="[TEXT]", help="Input text (leave out for configs with a fixed input).", show_default=False),
    model: str | None = Model,
    fusion: Fusion | None = typer.Option(None, "--fusion", help="How a layer's heads are combined before rolling out (default mean).", show_default=False),
    norm: bool = typer.Option(False, "--norm", help="Show norm-based attention ‖α f(x)‖ (Kobayashi et al. 2020) instead."),
    layer: str = Layer,
    head: str | None = typer.Option(None, "--head", help="With --norm: a head number, 'all' or 'mean' (default).", show_default=False),
    kind: KindChoice = Kind,
    target: str | None = Target,
    out: Path | None = Out,
    values: bool = typer.Option(False, "--values", help="Write each value into its cell."),
    fit: Fit = typer.Option(Fit.downsample, "--fit", help="Wider than the terminal: max-pool it, or split it into pages."),
    cmap: Cmap = CmapOpt,
    width: int | None = Width,
    truncate: bool = Truncate,
    engine: EngineChoice = EngineOpt,
    revision: str | None = Revision,
    device: Device = DeviceOpt,
    device_map: str | None = DeviceMap,
    pair: str | None = Pair,
    causal: bool | None = Causal,
    hide_special: bool = HideSpecial,
    renormalize: bool = Renormalize,
    words: bool = Words,
    trust_remote_code: bool = TrustRemoteCode,
    verbose: bool = Verbose,
) -> None:
    """Attention rollout (Abnar & Zuidema 2020): attention chained through the layers with the residual stream
    (through --layer; all: every layer). --norm: norm-based attention in --layer, or in every layer.

    Example: attnviz rollout "The cat sat on the mat." --fusion max
    """
    if head is not None and not norm:
        raise UsageError("--head applies to --norm; rollout fuses every head of a layer (choose how with --fusion)")
    head_choice = parse_head(head or "mean")
    if norm and fusion is not None:
        raise UsageError("--fusion belongs to rollout; --norm shows one layer's heads (choose them with --head)")
    fusion = fusion or Fusion.mean
    chosen = parse_index_or_word(layer, "--layer", "layer", ("all",))
    last = None if chosen == "all" else int(chosen)
    if norm and (target is not None or kind is not KindChoice.encoder):
        raise UsageError("--norm reads the value vectors of the native engine, which runs no encoder-decoder model; "
                         "--kind and --target go with rollout")
    if out is not None:
        from ..fileio import check_output_path

        check_output_path(out)
    view = reading(hide_special, renormalize, words)
    source = open_source(model, engine=engine, causal=causal, revision=revision, device=device, device_map=device_map,
                         trust_remote_code=trust_remote_code, verbose=verbose)
    from ..api import norm_view, rollout_view

    if norm:
        shown = norm_view(source, text, layer=chosen, head=head_choice, truncate=truncate, cmap=cmap.value, pair=pair,
                          reading=view)
    else:
        # Layers are fused as they are computed, up to the one shown: one layer's matrices at a time.
        shown = rollout_view(source, text, layer=last, fusion=fusion.value, truncate=truncate, cmap=cmap.value,
                             pair=pair, reading=view, kind=kind_name(kind), target=target)
    show_view(shown, out, values=values, fit=fit.value, width=width)
