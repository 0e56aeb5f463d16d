"""``attnviz rollout``: how much of each input token reaches each position (rollout, flow), attention weighted by
gradients, and norm-based mixing (``--method``)."""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path

import typer

from ..api import safe_text
from ..errors import UsageError
from .common import cli_command, given, renamed, show_view
from .options import (
    CMAP_HELP,
    Cmap,
    Fit,
    HideSpecial,
    ImageFiles,
    Kind,
    KindChoice,
    Layer,
    ModelOptions,
    OutFiles,
    Pair,
    Renormalize,
    Target,
    TextFile,
    Truncate,
    Width,
    Words,
    kind_name,
    model_command,
    parse_head,
    parse_layer,
    reading,
    text_from_file,
    text_or_example,
)
from .outputs import check_view_outputs


class Fusion(str, Enum):
    mean = "mean"
    max = "max"
    min = "min"


def _method_help() -> str:
    """--method's help, from the registry of methods (:mod:`attnviz.attribution.methods`)."""
    from ..api import METHODS

    listed = ", ".join(f"{m.name} ({m.summary})" for m in METHODS.values())
    return (f"What to show (rollout, flow and grad-rollout chain the layers through --layer; the others show --layer, "
            f"or a panel per layer): {listed}. docs/commands.md (attnviz rollout) says what each can and cannot tell.")


def _method_names(incomplete: str) -> list[str]:
    from ..api import METHODS

    return [name for name in METHODS if name.startswith(incomplete)]


METHOD_HELP = _method_help()


@cli_command(flags={"vs": "--similar-to"})
@model_command()
def rollout(
    options: ModelOptions,
    text: str | None = typer.Argument(None, metavar="TEXT", help="Input text (leave out for configs with a fixed input; - reads standard input).", show_default=False),
    text_file: Path | None = TextFile,
    method: str = typer.Option("rollout", "--method", help=METHOD_HELP, autocompletion=_method_names),
    fusion: Fusion | None = typer.Option(None, "--fusion", help="rollout, flow: how a layer's heads are combined (default mean).", show_default=False),
    norm: bool = typer.Option(False, "--norm", help="Same as --method norm: norm-based attention ‖α f(x)‖ (Kobayashi et al. 2020)."),
    layer: str = Layer,
    head: str | None = typer.Option("0", "--head", help="norm, attn-grad: a head number, 'all' or 'mean' (the other methods combine every head)."),
    target_token: str | None = typer.Option(None, "--target-token", help="grad-rollout, attn-grad: the token whose logit is y (a decoder's next token, or a [MASK]'s filler; default: the predicted one).", show_default=False),
    vs: str | None = typer.Option(None, "--similar-to", help="grad-rollout, attn-grad on a sentence encoder (the default MiniLM): y is the cosine similarity of TEXT's mean-pooled embedding with this text's.", show_default=False),
    old_vs: str | None = typer.Option(None, "--vs", hidden=True),
    force: bool = typer.Option(False, "--force", help="flow: run even past the cost limit (max-flow grows quickly with the text's length)."),
    kind: KindChoice = Kind,
    target: str | None = Target,
    out: list[Path] = OutFiles,
    image: list[Path] = ImageFiles,
    query: str | None = typer.Option(None, "--query", help="With --image: the token whose rollout is drawn (a patch "
                                     "such as r2c3, or mean; default the CLS token).", show_default=False),
    values: bool = typer.Option(False, "--values", help="Write each value into its cell."),
    fit: Fit = typer.Option(Fit.downsample, "--fit", help="Wider than the terminal: max-pool it, or split it into pages."),
    cmap: Cmap | None = typer.Option(None, "--cmap", help=CMAP_HELP + " Default: coolwarm for attn-grad, else viridis.", show_default=False),
    width: int | None = Width,
    truncate: bool = Truncate,
    pair: str | None = Pair,
    hide_special: bool = HideSpecial,
    renormalize: bool = Renormalize,
    words: bool = Words,
) -> None:
    """Attention rollout (Abnar & Zuidema 2020) and attribution beyond raw attention (--method): attention flow,
    gradient-weighted attention (Chefer et al. 2021), norm-based mixing with the residual and LayerNorm
    (Kobayashi et al. 2020, 2021).

    With --image, an image encoder's rollout over the picture's patches, as heat over the picture.

    Example: attnviz rollout "The cat sat on the mat." --method flow
    """
    vs = renamed(vs, old_vs, "--vs", "--similar-to")  # --vs is compare-heads' second text
    if image:
        if method != "rollout" or norm or text is not None or text_file is not None:
            raise UsageError("with --image, rollout chains an image encoder's attention over the picture's patches: "
                             "--method rollout (the default), no text (a vision-language model's words over the "
                             "picture: heatmap TEXT --image)")
        from .images import image_rollout

        image_rollout(options, image, fusion=None if fusion is None else fusion.value, layer=parse_layer(layer),
                      query=query, out=list(out), cmap="magma" if cmap is None else cmap.value, width=width)
        return
    if query is not None:
        raise UsageError("--query goes with --image here (the token whose rollout over the picture is drawn)")
    from ..api import method_named

    if norm and method not in ("rollout", "norm"):
        raise UsageError(f"--norm is --method norm; it cannot go with --method {method}")
    chosen_method = "norm" if norm else method
    if not given("head") and "head" not in method_named(chosen_method).options:  # the default goes to those it fits
        head = None
    chosen = parse_layer(layer)
    out = check_view_outputs(out)
    view = reading(hide_special, renormalize, words)
    from ..api import check_method_options

    # Before the model loads: an option the method does not use is a mistake worth saying at once.
    check_method_options(chosen_method, fusion=None if fusion is None else fusion.value,
                         head=None if head is None else parse_head(head), target_token=target_token, vs=vs,
                         force=force, kind=kind_name(kind), target=target, reading=view, pair=pair)
    text = text_from_file(text, text_file)  # read before the model loads
    source = options.load()
    text = text_or_example(text, source)
    from ..api import attribution_view

    shown = attribution_view(
        source, text, method=chosen_method, layer=chosen, head=None if head is None else parse_head(head),
        fusion=None if fusion is None else fusion.value, target_token=target_token, vs=vs, force=force,
        truncate=truncate, cmap=None if cmap is None else cmap.value, pair=pair, reading=view, kind=kind_name(kind),
        target=target, notice=lambda line: sys.stderr.write(f"attnviz: {safe_text(line)}\n"),
    )
    show_view(shown, out, values=values, fit=fit.value, width=width)
