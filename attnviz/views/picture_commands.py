"""What each command computes with ``--image``, for the command line and for Python alike: the attention over the
pictures on the engine asked (:func:`picture_attention`), the query a heatmap draws (:func:`pick_query`), and for
each command what it shows: :func:`picture_heatmap`, :func:`picture_heads`, :func:`picture_generation`,
:func:`picture_rollout`, :func:`picture_model` (atlas and the explorer's vision-language model).

Every check is made here once, before a model loads where it can be: the engine (attnviz's own engine reads no
pictures, :func:`attnviz.images.picture_models.picture_engine`), the layers and heads (:mod:`attnviz.layer_range`), the
query. The command line only parses, calls these and draws what they return."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from ..errors import UsageError
from ..layer_range import check_head, check_heads, check_layer

if TYPE_CHECKING:  # pragma: no cover
    from ..attribution.rollout import HeadFusion
    from ..result import AttentionResult
    from ..sources.sampling import Sampling
    from .picture_heat import PictureHeat

Pictures = list[str | Path] | list[Path]


@dataclass(frozen=True)
class Loading:
    """How a picture model is loaded: the engine asked (``auto``, ``fused``, ``hf``; ``native`` is refused) and the
    options every ``from_pretrained`` takes."""

    engine: str = "auto"
    device: str = "cpu"
    revision: str | None = None
    trust_remote_code: bool = False

    @property
    def options(self) -> dict[str, Any]:
        return {"device": self.device, "revision": self.revision, "trust_remote_code": self.trust_remote_code}

    def language_engine(self) -> str:
        """The vision-language model's engine: fused (the default) or hf."""
        from ..images.picture_models import picture_engine

        return picture_engine(self.engine)


def picture_attention(text: str | None, images: Pictures, model: str, *, loading: Loading = Loading(),
                      rows: str = "all", **extra: Any) -> AttentionResult:
    """An image encoder's attention over the picture (``text`` None: one picture), else the vision-language model's
    over the text and pictures (``rows="text"``: the text's rows only, where nothing else is read; ``extra``:
    ``max_new_tokens``, ``sampling``), on the engine asked: fused (the default) or hf (transformers' eager
    attention); an encoder runs on eager attention."""
    from ..images.encoder import image_attention
    from ..images.picture_models import picture_engine
    from ..images.vlm import vlm_attention

    engine = picture_engine(loading.engine, encoder=text is None)
    check_picture_count(text, images)
    if text is None:
        return image_attention(images[0], model, **loading.options)
    return vlm_attention(text, list(images), model, **loading.options, engine=engine, rows=rows, **extra)


def check_picture_count(text: str | None, images: Pictures) -> None:
    """An image encoder (no ``text``) reads one picture a run; several go with a text, to a vision-language model."""
    if text is None and len(images) > 1:
        raise UsageError(f"{len(images)} pictures without a text: an image encoder reads one picture a run (several "
                         "pictures go with a text, to a vision-language model)")


def pick_query(query: str | None, tokens: list[str], specials: int, *, text_last: bool = False) -> int | None:
    """The query token: ``query`` as an index or a label (``[CLS]``, ``r3c4``, a word), ``mean`` for the patches'
    mean (None); by default the text's last token (``text_last``: a vision-language model, what it reads of the
    picture as it answers), the CLS token, or the mean where the layout has none (no ``specials``)."""
    if query is None:
        return len(tokens) - 1 if text_last else 0 if specials else None
    if query == "mean":
        return None
    if query.isascii() and query.isdigit() and int(query) < len(tokens):  # ASCII digits: "²" is no index
        return int(query)
    for label in (query, f"<img {query}>"):  # a patch of a vision-language model's prompt: <img r1c2>
        if label in tokens:
            return tokens.index(label)
    raise UsageError(f"[[query={query}]] is not a token of this result: a word of the text, a patch (r1c2; with "
                     f"several pictures 2 r1c2), {tokens[0]}, an index up to {len(tokens) - 1}, or mean")


def _who(result: AttentionResult, chosen: int | None) -> str:
    return "the patches' mean query" if chosen is None else f"{result.tokens[chosen]!r} (token {chosen})"


@dataclass
class PictureHeatmap:
    """What ``heatmap --image`` shows: the result read and the view drawn from it (``query``: the query token)."""

    result: AttentionResult
    view: PictureHeat
    query: int | None
    heads: list[int] | None  # None: the mean of heads


def picture_heatmap(text: str | None, images: Pictures, model: str, *, layer: int | None = None,
                    head: int | Literal["all", "mean"] = 0, query: str | None = None, every_row: bool = False,
                    per_panel: bool = False, blocky: bool = False, cmap: str = "magma",
                    loading: Loading = Loading()) -> PictureHeatmap:
    """Each chosen layer × head's attention from the query token over the pictures (every layer where ``layer`` is
    None; ``head`` a number, ``all`` or ``mean``). ``every_row``: keep every query's row (a file that holds them);
    otherwise only the text's rows are kept, and every row read again only where the query is a patch."""
    from .picture_heat import layer_head_panels, picture_heat

    result = picture_attention(text, images, model, loading=loading, rows="all" if every_row else "text")
    metas = result.pictures
    chosen = pick_query(query, result.tokens, metas[0].specials, text_last=text is not None)
    held = result.metadata.get("rows")
    if held is not None and (chosen is None or chosen not in held):  # a patch's row (or their mean): every row
        result = picture_attention(text, images, model, loading=loading, rows="all")
    n_layers, n_heads = result.attentions.shape[:2]
    if layer is not None:
        check_layer(layer, owner=result.model_name, count=n_layers)
    layers = list(range(n_layers)) if layer is None else [layer]
    heads = (list(range(n_heads)) if head == "all" else None if head == "mean"
             else check_heads([int(head)], owner=result.model_name, count=n_heads))
    what = ("every layer" if layer is None else f"layer {layer}") + (", every head" if head == "all" else
                                                                      ", mean of heads" if heads is None else
                                                                      f", head {heads[0]}")
    view = picture_heat(result, layer_head_panels(result, layers=layers, heads=heads, query=chosen),
                        who=_who(result, chosen), what=what, per_panel=per_panel, smooth=not blocky, cmap=cmap,
                        columns=len(heads) * len(metas) if heads is not None and len(heads) > 1 else None)
    return PictureHeatmap(result, view, chosen, heads)


@dataclass
class PictureHeads:
    """What ``heads --image`` shows: each head's share on the pictures, its spread over the patches and its sink
    patch (``rows``, best first), the whole as one JSON ``document``, and a ``note`` where the text cannot attend."""

    result: AttentionResult
    rows: list[dict[str, Any]]
    document: dict[str, Any]
    note: str | None = None
    columns: tuple[str, ...] = field(default=())


def picture_heads(text: str | None, images: Pictures, model: str, *, loading: Loading = Loading()) -> PictureHeads:
    """Each head's statistics over the pictures (:func:`attnviz.images.statistics.image_head_rows`): with a text,
    the text's queries (most on the picture first); an encoder's every query (most focused first)."""
    from ..images.statistics import COLUMNS, image_head_rows

    result = picture_attention(text, images, model, loading=loading, rows="text")
    last = max(p for meta in result.pictures for p in meta.image_positions)
    note = None
    if text is not None and result.causal and last == len(result.tokens) - 1:
        note = ("no word follows the pictures, and the words before them cannot attend to them (a causal model): put "
                "the question after the pictures")
    rows = sorted(image_head_rows(result), key=lambda r: -r["image_share"] if text is not None else r["patch_entropy"])
    document = {"model": result.model_name, "images": [{k: v for k, v in meta.to_dict().items()
                                                        if k not in ("boxes", "grids")} for meta in result.pictures],
                "tokens": result.tokens, "heads": rows}
    return PictureHeads(result, rows, document, note, tuple(COLUMNS))


@dataclass
class Reading:
    """What one new token read of the pictures: its share on them, and the patch it read most in each."""

    position: int
    label: str
    share: float
    places: list[str]


@dataclass
class PictureGeneration:
    """What ``generate --image`` shows: the answer's result, a panel per new token and picture, and each new token's
    reading (``where``: the layer and head read, in words)."""

    result: AttentionResult
    view: PictureHeat
    readings: list[Reading]
    where: str


def picture_generation(prompt: str, images: Pictures, model: str, *, max_new_tokens: int = 20,
                       layer: int | None = None, head: int | None = None, every_row: bool = False,
                       sampling: Sampling | None = None, cmap: str = "magma",
                       loading: Loading = Loading()) -> PictureGeneration:
    """The vision-language model answers (greedily unless ``sampling`` says otherwise); each new token's attention
    over the pictures in ``layer`` (None: their mean) and ``head`` (None: their mean)."""
    from ..render.overlay import row_of, strongest_patches
    from .picture_heat import picture_heat

    extra: dict[str, Any] = {"max_new_tokens": max_new_tokens}
    if sampling is not None:
        extra["sampling"] = sampling
    result = picture_attention(prompt, images, model, loading=loading, rows="all" if every_row else "text", **extra)
    new = list(range(result.metadata["prompt_length"], len(result.tokens)))
    n_layers, n_heads = result.attentions.shape[:2]
    if layer is not None:
        check_layer(layer, owner=result.model_name, count=n_layers)
    if head is not None:
        check_head(head, owner=result.model_name, count=n_heads, option="only_head")
    where = ("every layer" if layer is None else f"layer {layer}") + (", mean of heads" if head is None
                                                                      else f", head {head}")
    metas = result.pictures
    several = len(metas) > 1
    view = picture_heat(result, [((f"picture {n + 1} · " if several else "") + f"{result.tokens[q]!r} (token {q})",
                                  layer, head, q, n) for q in new for n in range(len(metas))],
                        who="each new token", what=where, cmap=cmap, columns=min(6, len(new) * len(metas)) or 1)
    every = [p for meta in metas for p in meta.image_positions]
    attn = result.attentions.double()
    attn = attn.mean(0) if layer is None else attn[layer]
    attn = attn.mean(0) if head is None else attn[head]
    readings = [Reading(q, result.tokens[q], float(attn[row_of(result, [q])[0], every].sum()),
                        [f"{'picture ' + str(n + 1) + ' ' if several else ''}{place}"
                         for n, (_, place) in enumerate(strongest_patches(result, layer, head, q))]) for q in new]
    return PictureGeneration(result, view, readings, where)


@dataclass
class PictureRollout:
    """What ``rollout --image`` shows: the rolled result (one 'head' a layer) and its view."""

    result: AttentionResult
    view: PictureHeat


def picture_rollout(image: str | Path, model: str, *, fusion: str | None = None, layer: int | None = None,
                    query: str | None = None, cmap: str = "magma", loading: Loading = Loading()) -> PictureRollout:
    """Attention rollout over an image encoder's patches (Abnar & Zuidema 2020): how much of each patch reaches the
    CLS token (or ``query``) after each layer (every layer where ``layer`` is None), heads fused by ``fusion``."""
    from ..attribution.rollout import rollout
    from ..images.picture_models import picture_engine, reads_pictures
    from .picture_heat import picture_heat

    picture_engine(loading.engine, encoder=True)
    if reads_pictures(model):
        raise UsageError(f"{model} is a vision-language model: rollout over a picture chains an image encoder's "
                         "attention over its patches; see what its words read of the picture with heatmap TEXT [[image]]")
    result = picture_attention(None, [image], model, loading=loading)
    chained = rollout(result.attentions, head_fusion=cast("HeadFusion", fusion or "mean"))  # [L, T, T]
    n_layers = chained.shape[0]
    if layer is not None:
        check_layer(layer, owner=result.model_name, count=n_layers)
    rolled = replace(result, attentions=chained[:, None].float(),
                     metadata={**result.metadata, "rollout": {"fusion": fusion or "mean"}})
    chosen = pick_query(query, rolled.tokens, rolled.pictures[0].specials)
    layers = list(range(n_layers)) if layer is None else [layer]
    view = picture_heat(rolled, [(f"rollout to layer {each}", each, 0, chosen, 0) for each in layers],
                        who=f"how much of each patch reaches {_who(rolled, chosen)}",
                        what=f"attention rollout, heads fused by {fusion or 'mean'}", cmap=cmap,
                        value_name="rollout weight")
    return PictureRollout(rolled, view)


def picture_model(model: str, *, loading: Loading = Loading()) -> Any:
    """A vision-language model loaded once for many texts (atlas, the explorer), on the engine asked."""
    from ..images.vlm import load_vlm

    return load_vlm(model, **loading.options, engine=loading.language_engine())


def read_pictures(images: Pictures) -> None:
    """Each distinct picture read once before a model loads: a bad one is one line, not a late failure."""
    from ..images.files import read_image

    for picture in dict.fromkeys(images):
        read_image(picture)
