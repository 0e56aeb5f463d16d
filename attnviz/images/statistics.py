"""Each head's attention on a picture (issue 53): how much of it goes to the image tokens (visual heads), how spread
it is over the patches, and the patch it favours whatever the query (a visual sink, Kang et al. 2025, arXiv
2503.03321), with its place in the grid.

The queries are the text tokens after the picture for a vision-language model (what it reads of the picture as it
reads the text), every token for an image encoder. Per head, over those queries:

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

COLUMNS = ("layer", "head", "image_share", "patch_entropy", "sink", "sink_row", "sink_col", "sink_share")


def image_head_rows(result: Any) -> list[dict[str, Any]]:
    """One row per layer × head (see the module), for a result with ``metadata["image"]``."""
    meta = result.metadata["image"]
    first = meta.get("first", 0) + meta["specials"]
    rows, cols = meta["rows"], meta["cols"]
    n = rows * cols
    at = meta.get("positions") or list(range(first, first + n))  # the (finest) grid's tokens
    every = meta.get("image_positions") or list(range(meta.get("first", 0), first + n))
    total = result.attentions.shape[-1]
    queries = list(range(max(every) + 1, total)) if "first" in meta else list(range(total))  # the text after it
    if not queries:  # a picture at the end of the prompt: its own tokens read it
        queries = list(at)
    chosen = result.attentions.double()[:, :, queries, :]  # [L, H, q, T]
    patches = chosen[..., at]
    share = chosen[..., every].sum(-1)  # [L, H, q]: on every image token (a base grid, newlines included)
    on_grid = patches.sum(-1)
    spread = patches / on_grid.clamp_min(1e-300)[..., None]
    entropy = -(spread * torch.log(spread.clamp_min(1e-300))).sum(-1) / math.log(n) if n > 1 else share * 0
    mean_patch = patches.mean(-2)  # [L, H, n]
    top = mean_patch.argmax(-1)
    out = []
    for layer in range(chosen.shape[0]):
        for head in range(chosen.shape[1]):
            index = int(top[layer, head])
            on_patches = float(mean_patch[layer, head].sum())
            out.append({"layer": layer, "head": head, "image_share": round(float(share[layer, head].mean()), 6),
                        "patch_entropy": round(float(entropy[layer, head].mean()), 6),
                        "sink": f"r{index // cols}c{index % cols}", "sink_row": index // cols,
                        "sink_col": index % cols,
                        "sink_share": round(float(mean_patch[layer, head, index]) / on_patches, 6)
                        if on_patches > 0 else 0.0})
    return out
