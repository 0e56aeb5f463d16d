"""What ``attnviz generate`` shows of a generated text, as data: for each generated token what it
attended to most (:func:`generation_summary`), and the heatmap of the generated tokens' rows
(:func:`generation_view`). A decoder-only model's rows are its self-attention over every token; an
encoder-decoder's (T5, BART) are its decoder's, listed over the target and over the source, and the
heatmap is the cross-attention over the source."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..layer_range import check_layer

if TYPE_CHECKING:  # pragma: no cover
    from ..render.view import HeatmapView
    from ..result import AttentionResult

Attended = list[tuple[int, str, float]]  # (position, token, weight), the largest first


@dataclass(frozen=True)
class GeneratedStep:
    """One generated token: its position, its label, what it attended to among the tokens before
    it (``attended``) and, for an encoder-decoder, in the source (``source``)."""

    position: int
    label: str
    attended: Attended
    source: Attended | None = None


@dataclass(frozen=True)
class GenerationSummary:
    """Every generated token's :class:`GeneratedStep`, read in one layer (or their mean) and one head (or their mean)."""

    model_name: str
    where: str  # "layer 3 · head 1", "every layer · mean of heads"
    seq2seq: bool
    context: int  # the prompt's tokens (decoder-only), or the source's (encoder-decoder)
    steps: list[GeneratedStep]
    stopped_at_eos: bool

    def heading(self) -> str:
        made = f"{len(self.steps)} tokens generated"
        after = f"from a {self.context}-token source" if self.seq2seq else f"after a {self.context}-token prompt"
        return f"{self.model_name} · {made} {after} · {self.where}"


def _where(layer: int | None, head: int | None, seq2seq: bool) -> str:
    layers = ("every decoder layer" if seq2seq else "every layer") if layer is None else \
        (f"decoder layer {layer}" if seq2seq else f"layer {layer}")
    return f"{layers} · " + ("mean of heads" if head is None else f"head {head}")


def _seq2seq(result: AttentionResult) -> bool:
    return bool(result.metadata.get("encoder_decoder"))


def generation_summary(result: AttentionResult, *, layer: int | None = None, head: int | None = None,
                       top: int = 3) -> GenerationSummary:
    """What ``attnviz generate`` lists: each generated token and the ``top`` tokens it attended to most,
    in ``layer`` (None: the mean of the layers) and ``head`` (None: the mean of the heads)."""
    from ..generation import generated_summary

    seq2seq = _seq2seq(result)
    own = generated_summary(result, layer=layer, head=head, top=top, kind="self")
    cross = generated_summary(result, layer=layer, head=head, top=top, kind="cross") if seq2seq else None
    steps = [GeneratedStep(position, label, attended, None if cross is None else cross[i][2])
             for i, (position, label, attended) in enumerate(own)]
    context = len(result.tokens) if seq2seq else int(result.metadata["prompt_length"])
    return GenerationSummary(result.model_name, _where(layer, head, seq2seq), seq2seq, context, steps,
                             bool(result.metadata.get("stopped_at_eos")))


def generation_view(result: AttentionResult, *, layer: int | None = None, head: int | None = None,
                    cmap: str = "viridis") -> HeatmapView:
    """What ``attnviz generate`` draws: the generated tokens' rows, each at the step that computed it,
    in ``layer`` (None: the mean of the layers) and ``head`` (None: the mean of the heads): over
    every token (decoder-only), or over the source (an encoder-decoder's cross-attention)."""
    from ..render.view import matrix_view

    seq2seq = _seq2seq(result)
    from ..attention import built

    tensor = result.cross_attentions if seq2seq else result.attentions  # [layers, heads, rows, keys]
    attn = built(tensor, "cross attentions").double()  # an encoder-decoder result's (_seq2seq says it has them)
    if layer is not None:
        check_layer(layer, owner=result.model_name, count=attn.shape[0])
        attn = attn[layer : layer + 1]
    attn = attn.mean(0)
    if head is not None:
        from ..layer_range import check_head

        check_head(head, owner=result.model_name, count=attn.shape[0])
    attn = attn.mean(0) if head is None else attn[head]
    where = _where(layer, head, seq2seq)
    if seq2seq:
        start = int(result.metadata["target_start"])
        rows, cols = (result.target_tokens or [])[start:], result.tokens
        return matrix_view(attn[start:][None].numpy(), rows, cols, cmap=cmap,
                           title=f"{result.model_name} · generated tokens' cross-attention · {where}",
                           panel_titles=["cross-attention"], row_axis="generated tokens (at their step)",
                           col_axis="source tokens")
    start = int(result.metadata["prompt_length"])
    return matrix_view(attn[start:][None].numpy(), result.tokens[start:], result.tokens, cmap=cmap,
                       title=f"{result.model_name} · generated tokens' attention · {where}",
                       panel_titles=["generated"], row_axis="generated tokens (at their step)", col_axis="every token")
