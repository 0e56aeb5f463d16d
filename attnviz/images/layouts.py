"""Patch layouts as records: for every image token of a model's sequence, which row and column of the patch grid it
is and which box of the original picture it covers, derived from the model's config and the processor's outputs,
never hard-coded. A family without a layout is refused by name; a plugin adds one with :func:`register`.

A layout's ``grid(config, height, width)`` says, for a picture processed to ``height × width`` pixels, the tokens
before the patches (a CLS token, DINOv2's registers) and the grid of patches after them (row-major).
:func:`boxes` maps each patch back through the processor's resize and centre crop to the original picture.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..records import Registry, resolve


@dataclass(frozen=True)
class Grid:
    """The image tokens of one picture: ``specials`` (labels of the tokens before the patches), then ``rows × cols``
    patches of ``patch`` processed pixels, row-major."""

    specials: tuple[str, ...]
    rows: int
    cols: int
    patch: int

    @property
    def n_tokens(self) -> int:
        return len(self.specials) + self.rows * self.cols

    def labels(self) -> list[str]:
        return [*self.specials, *(f"r{r}c{c}" for r in range(self.rows) for c in range(self.cols))]


@dataclass(frozen=True)
class PatchLayout:
    """One family's layout (see the module)."""

    name: str
    model_types: tuple[str, ...]
    summary: str
    grid: str | Callable[[dict[str, Any], int, int], Grid]
    language: bool = False  # a vision-language model: the grid stands in its text's image tokens
    inserts: bool = False  # its processor puts the image tokens in the prompt itself (else the text names the image)
    # "module:function" placing one picture's tokens where a picture is several grids (tiles), else ``grid``:
    # ``place(config, processor, inputs, positions, index)`` -> {labels, grids, specials, patch} for picture
    # ``index``, whose tokens are the first of ``positions`` (the prompt's image tokens not yet placed); a function
    # with a ``picture`` keyword is also handed the picture (a PIL image: its size, for boxes the inputs do not give)
    place: str | None = None
    # the config's token ids an image marker comes between when attnviz puts it in the prompt (Qwen's vision start
    # and end), else the marker alone
    around: tuple[str, str] | None = None
    # transformers' class that loads the model's vision part alone, where the checkpoint is a whole model (CLIP's
    # CLIPVisionModel), else AutoModel
    tower: str | None = None
    family: str = ""  # its name as people say it (LLaVA-1.5, CLIP), in help texts and errors; default: the name

    @property
    def shown(self) -> str:
        return self.family or self.name

    def grid_of(self, config: dict[str, Any], height: int, width: int) -> Grid:
        return resolve(self.grid, f"patch layout {self.name}")(config, height, width)


def _check(registered: Registry[PatchLayout], layout: PatchLayout) -> None:
    """A layout names model types no other layout has: one that would shadow another's would never be used."""
    if not isinstance(layout, PatchLayout):
        raise TypeError(f"a patch layout is an attnviz.images.layouts.PatchLayout, not {type(layout).__name__}")
    if not layout.model_types or not all(isinstance(t, str) and t for t in layout.model_types):
        raise ValueError(f"patch layout {layout.name}: name the config model_type(s) it reads")
    for other in registered.values():
        taken = sorted(set(other.model_types) & set(layout.model_types))
        if taken:
            raise ValueError(f"patch layout {layout.name}: model type {taken[0]!r} is the {other.name} layout's "
                             "already (a layout for a type another has would never be used); name another type, or "
                             "unregister that layout first")


LAYOUTS: Registry[PatchLayout] = Registry("patch layout", _check)
register, unregister, registered = LAYOUTS.register, LAYOUTS.unregister, LAYOUTS.registered


def vision_config(config: dict[str, Any]) -> dict[str, Any]:
    """The vision tower's part of a config (``vision_config`` of a CLIP or SigLIP model, else the config)."""
    inner = config.get("vision_config")
    return inner if isinstance(inner, dict) else config


def _patches(config: dict[str, Any], height: int, width: int) -> tuple[int, int, int]:
    patch = int(vision_config(config).get("patch_size") or 16)
    return height // patch, width // patch, patch


def cls_grid(config: dict[str, Any], height: int, width: int) -> Grid:
    """A CLS token, then the patches (ViT, CLIP's vision tower)."""
    rows, cols, patch = _patches(config, height, width)
    return Grid(("[CLS]",), rows, cols, patch)


def plain_grid(config: dict[str, Any], height: int, width: int) -> Grid:
    """The patches alone (SigLIP's vision tower: no CLS token; its pooled output comes from an attention head)."""
    rows, cols, patch = _patches(config, height, width)
    return Grid((), rows, cols, patch)


def dinov2_grid(config: dict[str, Any], height: int, width: int) -> Grid:
    """A CLS token, DINOv2's register tokens where it has them, then the patches."""
    rows, cols, patch = _patches(config, height, width)
    registers = int(vision_config(config).get("num_register_tokens") or 0)
    return Grid(("[CLS]", *(f"[reg{i}]" for i in range(registers))), rows, cols, patch)


register(PatchLayout("vit", ("vit",), "ViT: a CLS token, then the patches row by row", "attnviz.images.layouts:cls_grid",
                     family="ViT"))
register(PatchLayout("clip", ("clip", "clip_vision_model"), "CLIP's vision tower: a CLS token, then the patches",
                     "attnviz.images.layouts:cls_grid", family="CLIP", tower="CLIPVisionModel"))
register(PatchLayout("siglip", ("siglip", "siglip_vision_model"), "SigLIP's vision tower: the patches, no CLS",
                     "attnviz.images.layouts:plain_grid", family="SigLIP", tower="SiglipVisionModel"))
register(PatchLayout("dinov2", ("dinov2", "dinov2_with_registers"), "DINOv2: a CLS token, its registers, the patches",
                     "attnviz.images.layouts:dinov2_grid", family="DINOv2"))
def llava_grid(config: dict[str, Any], height: int, width: int) -> Grid:
    """LLaVA-1.5: the vision tower's patches, row-major, in place of the prompt's image token; its CLS dropped under
    ``vision_feature_select_strategy = "default"`` (kept first under ``"full"``)."""
    rows, cols, patch = _patches(config, height, width)
    kept = ("[vCLS]",) if config.get("vision_feature_select_strategy") == "full" else ()
    return Grid(kept, rows, cols, patch)


register(PatchLayout("llava", ("llava",), "LLaVA-1.5: the image token expanded to the vision tower's patches, row-major "
                     "(its CLS dropped by the default feature strategy)", "attnviz.images.layouts:llava_grid",
                     language=True, family="LLaVA-1.5"))
register(PatchLayout("llava_next", ("llava_next",), "LLaVA-NeXT: the base grid, then the any-resolution canvas "
                     "unpadded to the picture, a newline token after each row", "attnviz.images.layouts:llava_grid",
                     language=True, place="attnviz.images.anyres:llava_next_place", family="LLaVA-NeXT"))
def gemma3_grid(config: dict[str, Any], height: int, width: int) -> Grid:
    """Gemma 3: SigLIP's patches average-pooled to ``mm_tokens_per_image`` tokens, a square grid, row-major."""
    import math

    tokens = int(config.get("mm_tokens_per_image") or 256)
    side = math.isqrt(tokens)
    return Grid((), side, side, height // side)


register(PatchLayout("gemma3", ("gemma3",), "Gemma 3: SigLIP's patches pooled to a square grid (16 × 16 at 896 "
                     "pixels) between its start- and end-of-image tokens; with pan-and-scan, the same grid of each "
                     "crop after the whole picture's", "attnviz.images.layouts:gemma3_grid", language=True,
                     place="attnviz.images.panscan:gemma3_place", family="Gemma 3"))
register(PatchLayout("qwen2_vl", ("qwen2_vl",), "Qwen2-VL: the picture resized to a multiple of the merged patch, "
                     "each 2 × 2 block of patches one token, row-major, between <|vision_start|> and <|vision_end|>",
                     "attnviz.images.layouts:plain_grid", language=True, place="attnviz.images.qwen:qwen2_vl_place",
                     around=("vision_start_token_id", "vision_end_token_id"), family="Qwen2-VL"))
register(PatchLayout("qwen2_5_vl", ("qwen2_5_vl",), "Qwen2.5-VL: as Qwen2-VL (merged patches of the resized "
                     "picture, row-major)", "attnviz.images.layouts:plain_grid", language=True,
                     place="attnviz.images.qwen:qwen2_vl_place", around=("vision_start_token_id", "vision_end_token_id"), family="Qwen2.5-VL"))
register(PatchLayout("idefics3", ("idefics3",), "Idefics3: the picture cut into tiles, each tile's pixel-shuffled "
                     "grid after its <row_i_col_j> marker, then the whole picture's after <global-img>; the overlay "
                     "on the tiles stitched together", "attnviz.images.layouts:plain_grid", language=True,
                     place="attnviz.images.idefics:idefics3_place", family="Idefics3"))
register(PatchLayout("smolvlm", ("smolvlm",), "SmolVLM: as Idefics3 (tiles, then the whole picture, each "
                     "pixel-shuffled)", "attnviz.images.layouts:plain_grid", language=True,
                     place="attnviz.images.idefics:idefics3_place", family="SmolVLM"))
register(PatchLayout("paligemma", ("paligemma",), "PaliGemma: SigLIP's patches, row-major, before the prompt (its "
                     "processor puts them there; image and prompt attend to each other, a prefix)",
                     "attnviz.images.layouts:plain_grid", language=True, inserts=True, family="PaliGemma"))
BUILT_IN = LAYOUTS.seal()


def layout_for(model_type: str | None, name: str) -> PatchLayout:
    """The layout of a family, or one line naming it and the families there are."""
    from ..errors import ModelNotFoundError

    found = next((layout for layout in LAYOUTS.values() if model_type in layout.model_types), None)
    if found is None:
        known = ", ".join(t for layout in LAYOUTS.values() for t in layout.model_types)
        raise ModelNotFoundError(f"{name} is a {model_type} model, for which attnviz knows no patch layout (it knows "
                                 f"{known}); a plugin can register one (attnviz.images.layouts.register)")
    return found


def boxes(grid: Grid, processor: Any, original: tuple[int, int]) -> list[tuple[float, float, float, float]]:
    """Each patch's box ``(x0, y0, x1, y1)`` in the original picture's pixels (``original`` is its ``(width,
    height)``), inverting the processor's resize (to a size, or its shortest edge) and centre crop."""
    width, height = original
    size = sizes_of(getattr(processor, "size", None))
    if getattr(processor, "do_resize", True) and size:
        if "shortest_edge" in size:
            scale = size["shortest_edge"] / min(width, height)
            resized = (width * scale, height * scale)
        else:
            resized = (float(size.get("width", width)), float(size.get("height", height)))
    else:
        resized = (float(width), float(height))
    left = top = 0.0
    crop = sizes_of(getattr(processor, "crop_size", None)) if getattr(processor, "do_center_crop", False) else {}
    if crop:
        left, top = (resized[0] - crop["width"]) / 2, (resized[1] - crop["height"]) / 2
    sx, sy = width / resized[0], height / resized[1]
    out = []
    for r in range(grid.rows):
        for c in range(grid.cols):
            x0, y0 = left + c * grid.patch, top + r * grid.patch
            out.append((x0 * sx, y0 * sy, (x0 + grid.patch) * sx, (y0 + grid.patch) * sy))
    return out


def sizes_of(value: Any) -> dict[str, int]:
    """A processor's ``size``/``crop_size`` (a dict, transformers' ``SizeDict``, or one number) as a dict."""
    if value is None:
        return {}
    if isinstance(value, int):
        return {"height": value, "width": value}
    found = {}
    for key in ("height", "width", "shortest_edge"):
        item = value.get(key) if isinstance(value, dict) else getattr(value, key, None)
        if item is not None:
            found[key] = int(item)
    return found


def token_blocks(positions: list[int], lengths: list[int], layout: str, index: int, *,
                 closed: bool = True) -> list[list[int]]:
    """One picture's image tokens as the processor put them: the first ``len(lengths)`` runs of consecutive
    ``positions`` (text tokens between them: tile markers, start- and end-of-image tokens), each checked to be
    ``lengths[i]`` long (``closed``: and to end there), the processor's count against the layout's."""
    from ..errors import ModelNotFoundError

    out: list[list[int]] = []
    at = 0
    for number, length in enumerate(lengths, start=1):
        end = min(at + 1, len(positions))
        while end < len(positions) and positions[end] == positions[end - 1] + 1 and (closed or end < at + length):
            end += 1
        if end - at != length:
            raise ModelNotFoundError(f"the {layout} layout gives {length} image tokens in block {number} of picture "
                                     f"{index + 1}, the processor put {end - at} there (its config and processor "
                                     "disagree)")
        out.append(positions[at:end])
        at = end
    return out


def families(*, language: bool) -> list[str]:
    """The families attnviz reads pictures with, as people name them, from the layout records (a plugin's too):
    the vision-language models (``language``) or the image encoders."""
    return list(dict.fromkeys(layout.shown for layout in LAYOUTS.values() if layout.language == language))


def needs_picture_model() -> str:
    """What to give as the model of a command with pictures: the families, from the records, and the offline ones."""
    return (f"[[image]] needs a model that reads pictures as [[model]]: an image encoder ({', '.join(families(language=False))}) "
            f"or a vision-language model ({', '.join(families(language=True))}), a folder or hub id; offline: "
            "[[model=sample_configs/organism_llava.toml]] (a vision-language organism, heads planted by hand) or "
            "sample_configs/organism_vit.toml (an image encoder organism)")
