"""An image encoder's attention over its patches (ViT, CLIP's and SigLIP's vision towers, DINOv2), run by transformers
with eager attention, as an :class:`~attnviz.result.AttentionResult` whose tokens are the layout's (``[CLS]``,
registers, ``r{row}c{col}``) and whose ``metadata["images"]`` (one picture) says where each patch sits in it."""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError, ModelNotFoundError, UsageError
from ..result import AttentionResult
from ..result.placement import PatchGrid, Placement
from .layouts import boxes


def image_attention(picture: str | Path, model: str, *, device: str = "cpu", revision: str | None = None,
                    trust_remote_code: bool = False) -> AttentionResult:
    """Every layer's and head's attention of ``model`` (a folder or hub id of an image encoder) over ``picture``."""
    import torch
    import transformers

    from .files import picture_header, read_image
    from .picture_models import locate

    found = locate(model, language=False, device=device, revision=revision, trust_remote_code=trust_remote_code)
    place, config, layout, options = found.place, found.config, found.layout, found.options
    header = picture_header(picture)
    try:
        processor = transformers.AutoImageProcessor.from_pretrained(place.ref, **options)
        auto = getattr(transformers, layout.tower or "AutoModel")  # a whole model's vision part alone (its record's)
        network = auto.from_pretrained(place.ref, attn_implementation="eager", dtype=torch.float32, **options)
    except (OSError, ValueError, KeyError) as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise ModelNotFoundError(f"{place.name}: cannot load its image processor and encoder ({first})") from None
    from ..limits import check_memory
    from .files import check_picture_memory
    from .sizes import check_processed, pictures_memory

    processed = check_processed([header], processor, place.name)  # before the processor resizes it
    check_picture_memory(pictures_memory([header], processed),
                         f"{picture} ({header.pixels:,} pixels), decoded and processed")
    image = read_image(picture)
    network = network.to(device).eval()
    try:
        pixels = processor(images=image, return_tensors="pt")["pixel_values"].to(device)
    except ValueError as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise InputError(f"{place.name}: its image processor cannot read {picture} ({first})") from None
    grid = layout.grid_of(config, int(pixels.shape[-2]), int(pixels.shape[-1]))
    tower = config.get("vision_config") or config
    layers, heads = int(tower.get("num_hidden_layers") or 12), int(tower.get("num_attention_heads") or 12)
    check_memory(2 * 4 * layers * heads * grid.n_tokens ** 2,
                 f"the attention of {grid.n_tokens:,} image tokens in {layers} layers × {heads} heads")
    with torch.no_grad():
        out = network(pixel_values=pixels, output_attentions=True)
    if not out.attentions:
        raise UsageError(f"{place.name} returned no attention weights")
    attentions = torch.stack([layer[0] for layer in out.attentions]).float().cpu()  # [L, H, T, T]
    if grid.n_tokens != attentions.shape[-1]:
        raise ModelNotFoundError(f"{place.name}: the {layout.name} layout gives {grid.n_tokens} image tokens for a "
                                 f"{pixels.shape[-1]}×{pixels.shape[-2]} input, the model made {attentions.shape[-1]}")
    return AttentionResult(
        tokens=grid.labels(), attentions=attentions, causal=False, model_name=place.name,
        special=[label.startswith("[") for label in grid.labels()],
        metadata={"engine": "hf", "images": [Placement(
            layout.name, (int(image.size[0]), int(image.size[1])), 0, len(grid.specials), grid.patch,
            tuple(range(grid.n_tokens)),
            (PatchGrid("patches", grid.rows, grid.cols, tuple(range(len(grid.specials), grid.n_tokens)),
                       tuple((round(a, 3), round(b, 3), round(c, 3), round(d, 3))
                             for a, b, c, d in boxes(grid, processor, image.size))),),
            tuple(grid.labels()), str(picture), grids_saved=False).to_dict()]},
    )
