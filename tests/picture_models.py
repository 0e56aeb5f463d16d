"""The pictures' shared test models and helpers (issue 53), a pytest plugin (conftest's ``pytest_plugins``): the
tiny LLaVA-1.5 fixture every picture test file uses, the word-level tokenizer with an image token, transformers' own
eager attention as the reference, and a ViT whose CLS reads one planted patch."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch


def planted_vit(folder: Path, target: int) -> Path:
    """A one-layer ViT whose layer 0, head 0 makes the CLS token read patch ``target`` (see the test below)."""
    import transformers
    from transformers import ViTConfig, ViTImageProcessor, ViTModel

    transformers.logging.set_verbosity_error()
    torch.manual_seed(1)
    model = ViTModel(ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                               intermediate_size=37))
    with torch.no_grad():
        model.embeddings.patch_embeddings.projection.weight.zero_()
        model.embeddings.patch_embeddings.projection.bias.zero_()
        direction = torch.zeros(32)
        direction[:8] = torch.tensor([1.0, -1.0] * 4) * 3
        position = torch.randn(17, 32) * 0.1
        position[0] = 0
        position[1 + target] = direction
        model.embeddings.position_embeddings.copy_(position[None])
        model.embeddings.cls_token.copy_(direction[None, None])
        attention = model.layers[0].attention  # transformers 5's layout of ViT (q_proj, k_proj)
        for linear in (attention.q_proj, attention.k_proj):
            linear.weight.copy_(torch.eye(32) * 4)
            linear.bias.zero_()
    model.save_pretrained(folder)
    ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(folder)
    return folder


def word_tokenizer(words: list[str], *, image: str | None = None, **special: object) -> object:
    """A word-level fast tokenizer over ``words`` (``<unk>`` for the rest), ``image`` added as a special token."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", **special)
    if image is not None:
        fast.add_special_tokens({"additional_special_tokens": [image]})
    return fast


def transformers_reference(folder: Path, text: str, picture: Path | list[Path]) -> tuple[dict, torch.Tensor]:
    """The processor's inputs and transformers' own eager attention ``[L, H, T, T]`` for ``text`` and ``picture``
    (or several)."""
    import transformers
    from PIL import Image

    processor = transformers.AutoProcessor.from_pretrained(folder)
    pictures = picture if isinstance(picture, list) else [picture]
    inputs = processor(text=text, images=[Image.open(p).convert("RGB") for p in pictures], return_tensors="pt")
    model = transformers.AutoModelForImageTextToText.from_pretrained(folder, attn_implementation="eager").eval()
    with torch.no_grad():
        return inputs, torch.stack([a[0] for a in model(**inputs, output_attentions=True).attentions])


@pytest.fixture(scope="module")
def llava(tmp_path_factory) -> Path:
    """A tiny LLaVA-1.5 (CLIP vision tower of 4 × 4 patches, a grouped-query LLaMA), its processor and a word-level
    tokenizer with the image token, saved offline, as transformers' own tests build theirs."""
    import transformers
    from transformers import (
        CLIPImageProcessor,
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
    )

    transformers.logging.set_verbosity_error()
    words = ["<unk>", "<s>", "</s>", "<image>", "what", "is", "in", "the", "picture", "?", "a", "cat", "dog"]
    fast = word_tokenizer(words, bos_token="<s>", eos_token="</s>", image="<image>")
    config = LlavaConfig(
        vision_config=CLIPVisionConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2,
                                       num_attention_heads=4, intermediate_size=37, projection_dim=32),
        text_config=LlamaConfig(vocab_size=len(words), hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128),
        image_token_id=3, vision_feature_select_strategy="default", vision_feature_layer=-2, image_seq_length=16)
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("llava") / "llava"
    LlavaForConditionalGeneration(config).save_pretrained(folder)
    LlavaProcessor(image_processor=CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}),
                   tokenizer=fast, patch_size=8, vision_feature_select_strategy="default", image_token="<image>",
                   num_additional_image_tokens=1).save_pretrained(folder)
    return folder
