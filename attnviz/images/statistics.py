"""Each head's attention on a picture (issue 53): how much of it goes to the image tokens (visual heads), how spread
it is over the patches, and the patch it favours whatever the query (a visual sink, Kang et al. 2025, arXiv
2503.03321), with its place in the grid.

The queries are the text tokens after the picture for a vision-language model (what it reads of the picture as it
reads the text; the text before it where nothing follows), every token for an image encoder. Per head, over those queries:

- ``image_share``: the mean attention mass on the picture's tokens (a vision-language model's every image token:
  LLaVA-NeXT's base grid and newlines too; an encoder's patches, its CLS and registers not counted);
- ``patch_entropy``: the mean entropy of each query's distribution over the (finest) grid's patches (its weights on
  them renormalised), divided by ln(patches): 0 one patch, 1 even;
- ``sink``, ``sink_share``: the patch with the largest mean weight, and its share of the mass on patches.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..result.placement import image_token_positions

COLUMNS = ("layer", "head", "image_share", "patch_entropy", "sink", "sink_image", "sink_row", "sink_col",
           "sink_share")


def image_head_rows(result: Any) -> list[dict[str, Any]]:
    """One row per layer × head (see the module), for a result with pictures (``result.pictures``); with several
    the share is on all of them, the entropy over all their patches, the sink in whichever it is
    (``sink_image``, from 1)."""
    pictures = result.pictures
    at = [p for picture in pictures for p in picture.positions]  # every picture's (finest) grid
    where = [(number, r, c) for number, picture in enumerate(pictures, start=1)
             for r in range(picture.rows) for c in range(picture.cols)]
    every = image_token_positions(pictures)
    total = result.attentions.shape[-1]
    encoder = not result.causal and len(every) == total  # an image encoder: every token is the picture's
    queries = list(range(total)) if encoder else list(range(max(every) + 1, total))  # the text after the pictures
    if not queries:  # the pictures at the end of the prompt: the text before them, else their own tokens
        image = set(every)
        queries = [q for q in range(total) if q not in image] or list(at)
    n = len(at)
    from ..render.overlay import row_of

    chosen = result.attentions.double()[:, :, row_of(result, queries), :]  # [L, H, q, T]
    patches = chosen[..., at]
    share = chosen[..., every].sum(-1)  # [L, H, q]: on every image token (a base grid, newlines included)
    on_grid = patches.sum(-1)
    spread = patches / on_grid.clamp_min(1e-300)[..., None]
    entropy = -(spread * torch.log(spread.clamp_min(1e-300))).sum(-1) / math.log(n) if n > 1 else share * 0
    mean_patch = patches.mean(-2)  # [L, H, n]
    top = mean_patch.argmax(-1)
    several = len(pictures) > 1
    out = []
    for layer in range(chosen.shape[0]):
        for head in range(chosen.shape[1]):
            index = int(top[layer, head])
            number, row, col = where[index]
            on_patches = float(mean_patch[layer, head].sum())
            out.append({"layer": layer, "head": head, "image_share": round(float(share[layer, head].mean()), 6),
                        "patch_entropy": round(float(entropy[layer, head].mean()), 6),
                        "sink": f"{number} r{row}c{col}" if several else f"r{row}c{col}", "sink_image": number,
                        "sink_row": row, "sink_col": col,
                        "sink_share": round(float(mean_patch[layer, head, index]) / on_patches, 6)
                        if on_patches > 0 else 0.0})
    return out
