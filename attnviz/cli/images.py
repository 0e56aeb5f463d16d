"""``--image``: an image encoder's attention over a picture, in the terminal (half-blocks at the patch grid) or as
heat over the picture (``--out x.png``), and its numbers (``--out x.npz``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import UnknownFormatError, UsageError
from .common import note, stdout_console, wrote

IMAGE_OUTPUTS = (".png", ".npz")


def image_heatmap(options: Any, text: str | None, images: list[Path], *, layer: int | None, head: Any,
                  query: str | None, out: list[Path], cmap: str, width: int | None) -> None:
    """Check, run and show (see the module)."""
    from ..fileio import check_writable
    from .outputs import check_distinct

    if text is not None:
        raise UsageError("TEXT with --image needs a vision-language model; attnviz reads image encoders so far (ViT, "
                         "CLIP, SigLIP, DINOv2): give the picture alone")
    if len(images) > 1:
        raise UsageError(f"{len(images)} pictures: an image encoder reads one at a time; give one --image")
    if options.model is None:
        raise UsageError("--image needs an image encoder as --model: a ViT, CLIP, SigLIP or DINOv2 folder or hub id")
    if options.engine not in ("auto", "hf"):
        raise UsageError(f"--engine {options.engine}: an image encoder runs on transformers' eager attention (hf)")
    for path in out:
        if path.suffix.lower() not in IMAGE_OUTPUTS:
            raise UnknownFormatError(f"cannot write {path}: with --image, --out writes .png (heat over the picture) "
                                     "or .npz (the numbers)")
    checked = [check_writable(path) for path in out]
    check_distinct([("out", path) for path in checked])
    from ..images.encoder import image_attention
    from ..images.files import read_image

    result = image_attention(images[0], options.model, device=options.device, revision=options.revision,
                             trust_remote_code=options.trust_remote_code)
    meta = result.metadata["image"]
    chosen = _query(query, result.tokens, meta["specials"])
    n_layers, n_heads = result.attentions.shape[:2]
    if layer is not None and not 0 <= layer < n_layers:
        raise UsageError(f"--layer {layer} is out of range; {result.model_name} has layers 0 to {n_layers - 1}")
    layers = list(range(n_layers)) if layer is None else [layer]
    heads = list(range(n_heads)) if head == "all" else None if head == "mean" else [int(head)]
    if heads is not None and not all(0 <= h < n_heads for h in heads):
        raise UsageError(f"--head {head} is out of range; {result.model_name} has heads 0 to {n_heads - 1}")
    from ..render.overlay import overlay_png, patch_weights, terminal_grid

    for path in checked:
        if path.suffix.lower() == ".npz":
            result.save(path)
        else:
            overlay_png(result, read_image(images[0]), path, layers=layers, heads=heads, query=chosen, cmap=cmap)
        wrote(path)
    if checked:
        return
    console = stdout_console(width)
    who = "the patches' mean query" if chosen is None else result.tokens[chosen]
    console.print(f"{result.model_name}: {who} over a {meta['rows']} × {meta['cols']} grid of {meta['patch']}-pixel "
                  f"patches ({meta['layout']} layout; each weight scaled to the largest)", markup=False)
    for each in layers:
        for h in heads if heads is not None else [None]:
            console.print(f"layer {each} " + ("mean of heads" if h is None else f"head {h}"), markup=False)
            console.print(terminal_grid(patch_weights(result, each, h, chosen), cmap))
    if meta["specials"] == 0 and query is None:
        note("no CLS token in this layout: the mean over the patches' own queries is shown (--query rNcM for one)")


def _query(query: str | None, tokens: list[str], specials: int) -> int | None:
    """The query token: ``--query`` as an index or a label (``[CLS]``, ``r3c4``), ``mean`` for the patches' mean;
    by default the CLS token, or the mean where the layout has none."""
    if query is None:
        return 0 if specials else None
    if query == "mean":
        return None
    if query.isdigit() and int(query) < len(tokens):
        return int(query)
    if query in tokens:
        return tokens.index(query)
    raise UsageError(f"--query {query!r} is not one of the image tokens ({tokens[0]}, {tokens[-1]}, an index up to "
                     f"{len(tokens) - 1}, or mean)")
