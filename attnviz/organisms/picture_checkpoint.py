"""A picture organism's checkpoint on disk: the model as transformers saves it (its hub layout, so transformers'
own ``ViTModel``, ``LlavaForConditionalGeneration`` and their Auto classes load it by path), its processor beside
it (ViT's image processor; CLIP's with LLaVA's processor and the embedded MiniLM's WordPiece tokenizer plus an
``<image>`` token), and attnviz's marks: the fingerprint of its description in the weights, the config and the mark
file, written last (:mod:`.checkpoint` checks a folder against them before it is used)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .checkpoint import MARK, WEIGHTS, tokenizer_folder, write_safetensors
from .picture_spec import VERSION, PictureSpec

IMAGE_TOKEN = "<image>"
BASE = 450 << 20  # bytes of a build's process besides its weights: Python, torch, transformers (measured: ~400 MiB)


def build_bytes(spec: PictureSpec) -> int:
    """About the peak memory of building ``spec``: the process, and its weights held three times (the model, their
    zeros written by hand, the file's copy)."""
    from .picture_weights import residual

    marks = residual(spec)
    d, layers = marks.d_model, spec.layers
    weights = layers * (4 * d * d + 6 * d) + (2 * spec.grid ** 2 + 1) * d
    if spec.language:
        weights += 30_523 * d + 2 * d * d + 4 * spec.grid ** 4
    return 3 * 4 * weights + BASE


def write_picture_checkpoint(spec: PictureSpec, folder: Path) -> Path:
    """Write ``spec``'s checkpoint with its processor into the empty folder ``folder`` (the caller makes it, places
    it and removes it if this fails); the mark last."""
    import transformers

    from .picture_weights import llava_model, vit_model

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    own = spec.fingerprint()
    if spec.language:
        processor = _llava_processor(spec)
        tokenizer = processor.tokenizer
        ids = {"image": tokenizer.convert_tokens_to_ids(IMAGE_TOKEN), "bos": tokenizer.cls_token_id,
               "eos": tokenizer.sep_token_id, "pad": tokenizer.pad_token_id}
        model = llava_model(spec, len(tokenizer), ids)
    else:
        from transformers import ViTImageProcessor

        processor = ViTImageProcessor(size={"height": spec.image_size, "width": spec.image_size})
        model = vit_model(spec)
    model.save_pretrained(folder)
    del model
    _mark_weights(folder / WEIGHTS, own)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config["attnviz_organism"] = {"name": spec.name, "family": spec.family, "fingerprint": own, "version": VERSION,
                                  "planted": [vars(h) for h in spec.planted]}
    (folder / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    processor.save_pretrained(folder)
    sizes = {path.name: path.stat().st_size for path in folder.iterdir() if path.name != MARK}
    (folder / MARK).write_text(json.dumps({"fingerprint": own, "version": VERSION, "files": sizes}), encoding="utf-8")
    return folder


def _mark_weights(path: Path, own: str) -> None:
    """The weights transformers saved, written again with the fingerprint in their header (into a new file that
    then takes the name: the tensors read are mapped from the old one)."""
    import os

    from safetensors import safe_open

    marked = path.with_name(path.name + ".marked")
    with safe_open(str(path), "pt") as handle:
        state = {name: handle.get_tensor(name) for name in handle.keys()}  # noqa: SIM118 - not a dict
        write_safetensors(marked, state, {"format": "pt", "attnviz_organism": own})
    del state
    os.replace(marked, path)


def _llava_processor(spec: PictureSpec) -> Any:
    """LLaVA-1.5's processor: CLIP's image processor (the shorter side resized to ``image_size``, the centre cropped
    square) and the embedded MiniLM's WordPiece tokenizer, ``[CLS]`` first (its BOS), ``<image>`` added."""
    from tokenizers import AddedToken, Tokenizer, processors
    from transformers import CLIPImageProcessor, LlavaProcessor, PreTrainedTokenizerFast

    tokenizer = Tokenizer.from_file(str(tokenizer_folder() / "tokenizer.json"))
    cls = tokenizer.token_to_id("[CLS]")
    tokenizer.post_processor = processors.TemplateProcessing(single="[CLS] $A", pair="[CLS] $A $B",
                                                             special_tokens=[("[CLS]", cls)])
    tokenizer.no_truncation()
    tokenizer.no_padding()
    tokenizer.add_special_tokens([AddedToken(IMAGE_TOKEN, special=True, normalized=False)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="[CLS]", eos_token="[SEP]",
                                   unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
                                   mask_token="[MASK]", model_max_length=spec.positions)
    fast.add_special_tokens({"additional_special_tokens": [IMAGE_TOKEN]})
    image = CLIPImageProcessor(size={"shortest_edge": spec.image_size},
                               crop_size={"height": spec.image_size, "width": spec.image_size})
    return LlavaProcessor(image_processor=image, tokenizer=fast, patch_size=spec.patch_size,
                          vision_feature_select_strategy="default", image_token=IMAGE_TOKEN,
                          num_additional_image_tokens=1)
