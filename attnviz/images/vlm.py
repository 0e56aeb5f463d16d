"""A vision-language model's attention over a text and a picture: the processor puts the picture's tokens in the
prompt (its image token expanded), the language model attends over all of them, and the family's patch layout
(:mod:`.layouts`) says which row and column, and which box of the picture, each image token is. The token count
is the processor's own, checked against the layout's."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from ..errors import ModelNotFoundError
from ..result import AttentionResult
from .layouts import boxes


def vlm_attention(text: str, picture: str | Path, model: str, *, device: str = "cpu", revision: str | None = None,
                  trust_remote_code: bool = False, max_new_tokens: int = 0) -> AttentionResult:
    """Every layer's and head's attention of a vision-language ``model`` over ``text`` and ``picture`` (the image
    where the text puts the processor's image token, else before the text). ``max_new_tokens``: first let the model
    answer greedily (up to that many tokens, stopping at its end token); the result then holds every row of the
    prompt and the answer, each answer token's row the attention with which it was read (one forward over the whole
    sequence, the picture included: the rows a step-by-step decoding computes), ``metadata["prompt_length"]``
    where the answer starts."""
    import torch
    import transformers

    from ..sources.tokens import label_from_piece
    from .files import read_image
    from .found import find

    found = find(model, language=True, device=device, revision=revision, trust_remote_code=trust_remote_code)
    place, config, layout, options = found.place, found.config, found.layout, found.options
    image = read_image(picture)
    try:
        processor = transformers.AutoProcessor.from_pretrained(place.ref, **options)
        auto: Any = transformers.AutoModelForImageTextToText
        network = auto.from_pretrained(place.ref, attn_implementation="eager", dtype=torch.float32, **options)
    except (OSError, ValueError, KeyError) as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise ModelNotFoundError(f"{place.name}: cannot load its processor and model ({first})") from None
    network = network.to(device).eval()
    marker = getattr(processor, "image_token", "<image>")
    # The picture where the text names it, else first: PaliGemma's processor expands its marker in place (before
    # its BOS), LLaVA's wants it as a word of the prompt.
    prompt = text if marker in text else f"{marker}{text}" if layout.inserts else f"{marker} {text}"
    with warnings.catch_warnings():  # a processor's own deprecation notes (numpy's copy keyword) are not the user's
        warnings.filterwarnings("ignore", category=DeprecationWarning, module="transformers")
        inputs = processor(text=prompt, images=[image], return_tensors="pt").to(device)
    inputs.pop("labels", None)  # PaliGemma's processor adds a suffix's labels: no loss is wanted
    ids = [int(i) for i in inputs["input_ids"][0]]
    token_id = config.get("image_token_id", config.get("image_token_index"))
    where = [i for i, t in enumerate(ids) if t == token_id]
    if not where:
        raise ModelNotFoundError(f"{place.name}: the processor put no image token (id {token_id}) in the prompt")
    if layout.place is not None:  # several grids (any-resolution tiles), placed by the family's own function
        import importlib

        module, function = layout.place.split(":")
        placed = getattr(importlib.import_module(module), function)(config, processor, inputs, where)
        names, grids, specials, patch = placed["labels"], placed["grids"], placed["specials"], placed["patch"]
    else:
        pixels = inputs["pixel_values"]
        grid = layout.grid_of(config, int(pixels.shape[-2]), int(pixels.shape[-1]))
        if len(where) != grid.n_tokens or where != list(range(where[0], where[0] + len(where))):
            raise ModelNotFoundError(f"{place.name}: the processor put {len(where)} image tokens in the prompt; the "
                                     f"{layout.name} layout gives {grid.n_tokens} for a {pixels.shape[-1]}×"
                                     f"{pixels.shape[-2]} input")
        names, specials, patch = grid.labels(), len(grid.specials), grid.patch
        grids = [{"name": "patches", "rows": grid.rows, "cols": grid.cols,
                  "positions": where[specials:], "boxes": boxes(grid, processor.image_processor, image.size)}]
    text_config = config.get("text_config") or {}
    layers = int(text_config.get("num_hidden_layers") or 32)
    heads = int(text_config.get("num_attention_heads") or 32)
    from ..limits import check_memory

    # Eager attention returns every layer's [H, T, T] at once, and builds each once more as it runs.
    check_memory(2 * 4 * layers * heads * len(ids) ** 2,
                 f"the attention of {len(ids):,} tokens ({len(where):,} of them the picture's) in {layers} layers × "
                 f"{heads} heads")
    prompt_length = len(ids)
    if max_new_tokens:
        eos = getattr(network.generation_config, "eos_token_id", None)
        pad = processor.tokenizer.pad_token_id if processor.tokenizer.pad_token_id is not None else \
            (eos[0] if isinstance(eos, list) else eos)
        with torch.no_grad():
            sequence = network.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False, num_beams=1,
                                        pad_token_id=pad)[0]
        ids = [int(i) for i in sequence]
        added = len(ids) - prompt_length
        inputs["input_ids"] = sequence[None]
        inputs["attention_mask"] = torch.ones_like(sequence)[None]
        if "token_type_ids" in inputs:  # PaliGemma: the answer is the suffix
            inputs["token_type_ids"] = torch.cat([inputs["token_type_ids"],
                                                  torch.ones(1, added, dtype=inputs["token_type_ids"].dtype)], dim=1)
        check_memory(2 * 4 * layers * heads * len(ids) ** 2, f"the attention of {len(ids):,} tokens with the answer")
    with torch.no_grad():
        out = network(**inputs, output_attentions=True)
    attentions = torch.stack([layer[0] for layer in out.attentions]).float().cpu()  # [L, H, T, T]
    pieces = processor.tokenizer.convert_ids_to_tokens(ids)
    at = {position: n for n, position in enumerate(where)}
    labels = [f"<img {names[at[i]]}>" if i in at else label_from_piece(piece or f"<{t}>")
              for i, (t, piece) in enumerate(zip(ids, pieces, strict=True))]
    special = set(getattr(processor.tokenizer, "all_special_ids", []) or [])
    main = grids[-1]  # the finest grid: what the overlay draws and the statistics read
    return AttentionResult(
        # causal as the weights are: PaliGemma's image and prompt attend to each other (a prefix), LLaVA's do not
        tokens=labels, attentions=attentions, token_ids=ids, special=[t in special for t in ids],
        causal=bool((attentions.triu(1) == 0).all()),
        model_name=place.name,
        metadata={"engine": "hf", "image": {
            "path": str(picture), "size": list(image.size), "layout": layout.name, "first": where[0],
            "specials": specials, "rows": main["rows"], "cols": main["cols"], "patch": patch,
            "image_positions": where, "positions": main["positions"],
            "boxes": [[round(v, 3) for v in box] for box in main["boxes"]],
            "grids": [{**g, "boxes": [[round(v, 3) for v in box] for box in g["boxes"]]} for g in grids]},
            **({"generation": True, "prompt_length": prompt_length} if max_new_tokens else {})},
    )
