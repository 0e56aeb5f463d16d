"""Patch layouts of three more vision-language families on tiny random models built offline: Qwen2-VL and Qwen2.5-VL
(merged patches of the resized picture), Idefics3 and SmolVLM (tiles and the whole picture, pixel-shuffled), Gemma 3
with pan-and-scan (the whole picture, then its crops). For each: the attention equals transformers' eager attention
on the same processor's inputs, the layout's count is the processor's, labels and boxes are the ones worked out by
hand below, and two pictures of different sizes are each placed in order."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from picture_models import word_tokenizer

WORDS = ["what", "is", "in", "the", "picture", "?"]
TEXT = "what is in the picture ?"


def save_picture(folder: Path, name: str, size: tuple[int, int], seed: int = 0) -> Path:
    """A random RGB picture of ``size`` ``(width, height)``."""
    from PIL import Image

    path = folder / name
    pixels = np.random.RandomState(seed).rand(size[1], size[0], 3) * 255
    Image.fromarray(pixels.astype(np.uint8)).save(path)
    return path


def reference(folder: Path, text: str, pictures: list[Path], **call: object) -> tuple[dict, torch.Tensor]:
    """The processor's inputs (the processor attnviz loads: transformers' own pieces, without a video processor where
    that needs torchvision) and transformers' eager attention ``[L, H, T, T]`` on them."""
    import transformers
    from PIL import Image

    from attnviz.images.processors import load_processor

    processor = load_processor(str(folder), {})
    inputs = processor(text=text, images=[Image.open(p).convert("RGB") for p in pictures], return_tensors="pt",
                       **call)
    model = transformers.AutoModelForImageTextToText.from_pretrained(folder, attn_implementation="eager").eval()
    with torch.no_grad():
        return inputs, torch.stack([a[0] for a in model(**inputs, output_attentions=True).attentions])


def image_positions(inputs: dict, token_id: int) -> list[int]:
    return [i for i, t in enumerate(inputs["input_ids"][0].tolist()) if t == token_id]


@pytest.fixture(scope="module")
def pictures(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("pictures")
    sizes = {"wide": (64, 48), "odd": (50, 30), "tall": (20, 60), "square": (40, 40), "pan": (64, 40),
             "pan_tall": (40, 64)}
    return {name: save_picture(folder, f"{name}.png", size, seed) for seed, (name, size) in enumerate(sizes.items())}


# Qwen2-VL and Qwen2.5-VL ---------------------------------------------------------------------------------------------

QWEN_WORDS = ["<unk>", "<|endoftext|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>", *WORDS]


def qwen_folder(root: Path, family: str) -> Path:
    """A tiny Qwen2-VL or Qwen2.5-VL: 8-pixel patches merged 2 × 2, pictures resized to 256–4,096 pixels; its
    processor named in processor_config.json (built by attnviz without the video processor, which needs
    torchvision)."""
    import transformers
    from transformers import Qwen2_5_VLConfig, Qwen2VLConfig
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    transformers.logging.set_verbosity_error()
    fast = word_tokenizer(QWEN_WORDS, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    fast.add_special_tokens({"additional_special_tokens": QWEN_WORDS[2:6]})
    text = dict(vocab_size=len(QWEN_WORDS), hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                rope_parameters={"rope_type": "default", "mrope_section": [1, 1, 2], "rope_theta": 10000.0})
    ids = dict(image_token_id=4, video_token_id=5, vision_start_token_id=2, vision_end_token_id=3)
    if family == "qwen2_vl":
        config = Qwen2VLConfig(text_config=text, vision_config=dict(
            depth=2, embed_dim=32, hidden_size=32, mlp_ratio=4, num_heads=4, patch_size=8, spatial_merge_size=2,
            temporal_patch_size=2, in_channels=3), **ids)
        name = "Qwen2VLProcessor"
    else:
        config = Qwen2_5_VLConfig(text_config=text, vision_config=dict(
            depth=2, hidden_size=32, intermediate_size=37, num_heads=4, patch_size=8, spatial_merge_size=2,
            temporal_patch_size=2, in_channels=3, window_size=32, fullatt_block_indexes=[1], out_hidden_size=32), **ids)
        name = "Qwen2_5_VLProcessor"
    torch.manual_seed(0)
    folder = root / family
    transformers.AutoModelForImageTextToText.from_config(config).save_pretrained(folder)
    Qwen2VLImageProcessorPil(min_pixels=16 * 16, max_pixels=64 * 64, patch_size=8, merge_size=2,
                             temporal_patch_size=2).save_pretrained(folder)
    fast.save_pretrained(folder)
    (folder / "processor_config.json").write_text(json.dumps({"processor_class": name}), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def qwen(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("qwen")
    return {family: qwen_folder(root, family) for family in ("qwen2_vl", "qwen2_5_vl")}


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl"])
def test_qwen_places_the_merged_patches_of_the_resized_picture(qwen, pictures, family):
    """A 50 × 30 picture: smart_resize to 48 × 32 (multiples of 16, within 256–4,096 pixels), 6 × 4 patches, merged
    2 × 2 into 2 rows × 3 columns of tokens, each 16 × 16 resized pixels: 16 × 50/48 = 16.667 by 16 × 30/32 = 15
    original pixels."""
    from attnviz.images.vlm import vlm_attention

    result = vlm_attention(TEXT, pictures["odd"], str(qwen[family]))
    assert result.metadata["engine"] == "fused" and "fused_refused" not in result.metadata  # the default engine
    prompt = f"<|vision_start|><|image_pad|><|vision_end|> {TEXT}"
    inputs, expected = reference(qwen[family], prompt, [pictures["odd"]])
    torch.testing.assert_close(result.attentions, expected, atol=1e-5, rtol=1e-5)
    assert result.token_ids == inputs["input_ids"][0].tolist()  # the prompt, wrapped as Qwen's template wraps it
    meta = result.metadata["images"][0]
    tokens = image_positions(inputs, 4)
    assert inputs["image_grid_thw"][0].tolist() == [1, 4, 6]
    assert meta["layout"] == family and (meta["rows"], meta["cols"]) == (2, 3)
    assert meta["image_positions"] == meta["positions"] == tokens and len(tokens) == 6
    assert result.tokens[tokens[0] - 1] == "<|vision_start|>" and result.tokens[tokens[-1] + 1] == "<|vision_end|>"
    assert [result.tokens[i] for i in tokens] == [f"<img r{r}c{c}>" for r in range(2) for c in range(3)]
    assert meta["boxes"][0] == pytest.approx([0.0, 0.0, 16.667, 15.0])
    assert meta["boxes"][-1] == pytest.approx([33.333, 15.0, 50.0, 30.0])
    assert meta["patch"] == 16


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl"])
def test_qwen_places_two_pictures_of_different_sizes_in_order(qwen, pictures, family):
    """64 × 48 (kept: 6 × 8 patches, 3 rows × 4 columns of tokens) then 50 × 30 (2 × 3), each its own grid."""
    from attnviz.images.vlm import vlm_attention

    paths = [pictures["wide"], pictures["odd"]]
    result = vlm_attention(TEXT, paths, str(qwen[family]))
    wrapped = "<|vision_start|><|image_pad|><|vision_end|>"
    inputs, expected = reference(qwen[family], f"{wrapped} {wrapped} {TEXT}", paths)
    torch.testing.assert_close(result.attentions, expected, atol=1e-5, rtol=1e-5)
    first, second = result.metadata["images"]
    assert first["image_positions"] + second["image_positions"] == image_positions(inputs, 4)
    assert (first["rows"], first["cols"], second["rows"], second["cols"]) == (3, 4, 2, 3)
    assert first["boxes"][-1] == pytest.approx([48.0, 32.0, 64.0, 48.0])  # no resize: 16-pixel tokens
    assert result.tokens[first["first"]] == "<img 1 r0c0>" and result.tokens[second["first"]] == "<img 2 r0c0>"
    assert result.tokens[second["image_positions"][-1]] == "<img 2 r1c2>"


def test_qwen_answers_as_transformers_generates_and_the_command_draws_its_grid(qwen, pictures, run_cli, tmp_path):
    """generate with a picture: the answer is transformers' greedy one (the answer's tokens text in the M-RoPE
    types), and heatmap --image draws the 3 × 4 grid of 16-pixel tokens."""
    import transformers

    from attnviz.images.vlm import vlm_attention

    result = vlm_attention(TEXT, pictures["wide"], str(qwen["qwen2_vl"]), max_new_tokens=3)
    inputs, _ = reference(qwen["qwen2_vl"], f"<|vision_start|><|image_pad|><|vision_end|> {TEXT}", [pictures["wide"]])
    model = transformers.AutoModelForImageTextToText.from_pretrained(qwen["qwen2_vl"], attn_implementation="eager")
    with torch.no_grad():
        answer = model.eval().generate(**inputs, max_new_tokens=3, do_sample=False, pad_token_id=1)[0].tolist()
    assert result.token_ids == answer and result.metadata["prompt_length"] == inputs["input_ids"].shape[1] < len(answer)
    shown = run_cli("heatmap", TEXT, "--image", str(pictures["wide"]), "--model", str(qwen["qwen2_vl"]),
                    "--layer", "1", "--head", "0")
    assert shown.exit_code == 0, shown.stderr
    assert "3 × 4 grid of 16-pixel patches" in shown.stdout


# Idefics3 and SmolVLM ------------------------------------------------------------------------------------------------

TILE_WORDS = ["<unk>", "<s>", "</s>", "<image>", "<fake_token_around_image>", "<global-img>", "<end_of_utterance>",
              "<video>", *(f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)), *WORDS]


def tiled_folder(root: Path, family: str) -> Path:
    """A tiny Idefics3 or SmolVLM: 48-pixel tiles of 8-pixel patches (6 × 6) pixel-shuffled by 2 into 3 × 3 tokens,
    pictures resized to a longest edge of 64 (then to multiples of 48)."""
    import transformers
    from transformers import Idefics3Config, SmolVLMConfig
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil
    from transformers.models.smolvlm.image_processing_pil_smolvlm import SmolVLMImageProcessorPil

    transformers.logging.set_verbosity_error()
    fast = word_tokenizer(TILE_WORDS, bos_token="<s>", eos_token="</s>")
    fast.add_special_tokens({"additional_special_tokens": [w for w in TILE_WORDS[3:] if w.startswith("<")]})
    kind, image_processor, name = {
        "idefics3": (Idefics3Config, Idefics3ImageProcessorPil, "Idefics3Processor"),
        "smolvlm": (SmolVLMConfig, SmolVLMImageProcessorPil, "SmolVLMProcessor"),
    }[family]
    config = kind(vision_config=dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
                                     image_size=48, patch_size=8),
                  text_config=dict(model_type="llama", vocab_size=len(TILE_WORDS), hidden_size=32, intermediate_size=37,
                                   num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                   max_position_embeddings=512),
                  scale_factor=2, image_token_id=3)
    torch.manual_seed(0)
    folder = root / family
    transformers.AutoModelForImageTextToText.from_config(config).save_pretrained(folder)
    image_processor(size={"longest_edge": 64}, max_image_size={"longest_edge": 48}).save_pretrained(folder)
    fast.save_pretrained(folder)
    (folder / "processor_config.json").write_text(json.dumps({"processor_class": name, "image_seq_len": 9}),
                                                  encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def tiled(tmp_path_factory):
    """Both families' folders; SmolVLM's processor asks for num2words (for its videos' words) where it is missing:
    a stand-in for these tests, which read pictures only."""
    from transformers.models.smolvlm import processing_smolvlm

    patch = pytest.MonkeyPatch()
    if processing_smolvlm.num2words is None:
        patch.setattr(processing_smolvlm, "num2words", str)
    root = tmp_path_factory.mktemp("tiled")
    yield {family: tiled_folder(root, family) for family in ("idefics3", "smolvlm")}
    patch.undo()


@pytest.mark.parametrize("family", ["idefics3", "smolvlm"])
def test_tiles_and_the_whole_picture_are_placed_and_the_overlay_stitches_the_tiles(tiled, pictures, family):
    """64 × 48: longest edge 64 (64 × 48), then multiples of 48 (96 × 96): 2 × 2 tiles of 3 × 3 tokens, then the
    whole picture's 3 × 3: 45 image tokens. The canvas is 6 × 6 tokens over the picture, each 64/6 × 48/6 pixels;
    the whole picture's tokens each 64/3 × 48/3."""
    from attnviz.images.vlm import vlm_attention

    result = vlm_attention(TEXT, pictures["wide"], str(tiled[family]))
    assert result.metadata["engine"] == "fused" and "fused_refused" not in result.metadata  # the default engine
    inputs, expected = reference(tiled[family], f"<image> {TEXT}", [pictures["wide"]])
    torch.testing.assert_close(result.attentions, expected, atol=1e-5, rtol=1e-5)
    meta = result.metadata["images"][0]
    tokens = image_positions(inputs, 3)
    assert meta["image_positions"] == tokens and len(tokens) == 45 == (2 * 2 + 1) * 9
    names = [grid["name"] for grid in meta["grids"]]
    assert names == ["tile r0c0", "tile r0c1", "tile r1c0", "tile r1c1", "global", "canvas"]
    assert (meta["rows"], meta["cols"], meta["patch"]) == (6, 6, 16)
    labels = [result.tokens[i] for i in tokens]
    assert labels[:4] == ["<img r0c0>", "<img r0c1>", "<img r0c2>", "<img r1c0>"]
    assert labels[9] == "<img r0c3>" and labels[18] == "<img r3c0>" and labels[35] == "<img r5c5>"
    assert labels[36] == "<img g r0c0>" and labels[-1] == "<img g r2c2>"
    assert result.tokens[tokens[0] - 1] == "<row_1_col_1>" and result.tokens[tokens[9] - 1] == "<row_1_col_2>"
    assert result.tokens[tokens[36] - 1] == "<global-img>"
    # the canvas row-major: its first row is tile r0c0's first row, then tile r0c1's
    assert meta["positions"][:6] == tokens[0:3] + tokens[9:12] and meta["positions"][-1] == tokens[35]
    assert meta["boxes"][0] == pytest.approx([0.0, 0.0, 10.667, 8.0])
    assert meta["boxes"][-1] == pytest.approx([53.333, 40.0, 64.0, 48.0])
    tile = meta["grids"][1]  # tile r0c1: the right half of the top half
    assert tile["boxes"][0] == pytest.approx([32.0, 0.0, 42.667, 8.0])
    whole = meta["grids"][4]
    assert whole["boxes"][0] == pytest.approx([0.0, 0.0, 21.333, 16.0]) and whole["positions"] == tokens[36:]


@pytest.mark.parametrize("family", ["idefics3", "smolvlm"])
def test_two_tiled_pictures_of_different_sizes_are_placed_in_order(tiled, pictures, family):
    """64 × 48 (2 × 2 tiles) then 20 × 60 (longest edge 64: 22 × 64, then 48 × 96: 2 rows × 1 column): 45 and 27
    image tokens, the second canvas 6 × 3."""
    from attnviz.images.vlm import vlm_attention

    paths = [pictures["wide"], pictures["tall"]]
    text = f"<image> {TEXT} <image> {TEXT}"
    result = vlm_attention(text, paths, str(tiled[family]))
    inputs, expected = reference(tiled[family], text, paths)
    torch.testing.assert_close(result.attentions, expected, atol=1e-5, rtol=1e-5)
    first, second = result.metadata["images"]
    assert first["image_positions"] + second["image_positions"] == image_positions(inputs, 3)
    assert (len(first["image_positions"]), len(second["image_positions"])) == (45, 27)
    assert (second["rows"], second["cols"]) == (6, 3)
    assert [g["name"] for g in second["grids"]] == ["tile r0c0", "tile r1c0", "global", "canvas"]
    assert second["boxes"][-1] == pytest.approx([13.333, 50.0, 20.0, 60.0])  # 20 × 2/3
    assert result.tokens[second["first"]] == "<img 2 r0c0>" and result.tokens[second["image_positions"][-1]] == \
        "<img 2 g r2c2>"


def test_a_processor_whose_package_is_missing_is_one_line(tiled, pictures, run_cli, monkeypatch):
    """SmolVLM's processor wants num2words (for its videos' words): where it is missing, one line naming it."""
    from transformers.models.smolvlm import processing_smolvlm

    monkeypatch.setattr(processing_smolvlm, "num2words", None)
    shown = run_cli("heatmap", TEXT, "--image", str(pictures["wide"]), "--model", str(tiled["smolvlm"]))
    assert shown.exit_code != 0 and "num2words" in shown.stderr and "not installed" in shown.stderr
    assert shown.stderr.count("\n") == 1 and "Traceback" not in shown.stderr


def test_the_command_draws_the_stitched_tiles_over_the_picture(tiled, pictures, run_cli, tmp_path):
    """heatmap --image on Idefics3: the terminal's grid is the 6 × 6 canvas, the PNG a panel over the picture, and
    the saved weights of the last word on the canvas are its row at the canvas's tokens, in canvas order."""
    from attnviz.render.overlay import patch_weights
    from attnviz.result import AttentionResult

    png, npz = tmp_path / "tiles.png", tmp_path / "tiles.npz"
    shown = run_cli("heatmap", TEXT, "--image", str(pictures["wide"]), "--model", str(tiled["idefics3"]),
                    "--layer", "1", "--head", "2")
    assert shown.exit_code == 0, shown.stderr
    assert "6 × 6 grid of 16-pixel patches" in shown.stdout
    written = run_cli("heatmap", TEXT, "--image", str(pictures["wide"]), "--model", str(tiled["idefics3"]),
                      "--out", str(png), "--out", str(npz))
    assert written.exit_code == 0, written.stderr
    assert png.read_bytes().startswith(b"\x89PNG")
    saved = AttentionResult.load(npz)
    meta = saved.metadata["images"][0]
    last = len(saved.tokens) - 1
    expected = saved.attentions[1, 2, last, meta["positions"]].reshape(6, 6).double().numpy()
    np.testing.assert_allclose(patch_weights(saved, 1, 2, last), expected)


def test_a_picture_the_processor_does_not_split_is_the_whole_picture_alone(tiled, pictures, tmp_path):
    """Splitting off: the whole picture squeezed to one tile, 3 × 3 tokens labelled as the grid they are."""
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

    from attnviz.images.vlm import vlm_attention

    folder = tmp_path / "whole"
    shutil.copytree(tiled["idefics3"], folder)
    Idefics3ImageProcessorPil(size={"longest_edge": 64}, max_image_size={"longest_edge": 48},
                              do_image_splitting=False).save_pretrained(folder)
    result = vlm_attention(TEXT, pictures["wide"], str(folder))
    inputs, expected = reference(folder, f"<image> {TEXT}", [pictures["wide"]])
    torch.testing.assert_close(result.attentions, expected, atol=1e-5, rtol=1e-5)
    meta = result.metadata["images"][0]
    tokens = image_positions(inputs, 3)
    assert meta["image_positions"] == meta["positions"] == tokens and len(tokens) == 9
    assert [g["name"] for g in meta["grids"]] == ["global"] and (meta["rows"], meta["cols"]) == (3, 3)
    assert result.tokens[tokens[0]] == "<img r0c0>" and result.tokens[tokens[0] - 1] == "<global-img>"
    assert meta["boxes"][-1] == pytest.approx([42.667, 32.0, 64.0, 48.0])  # 64 × 2/3


def test_a_processor_whose_count_disagrees_with_the_config_is_one_line(tiled, pictures, tmp_path, run_cli):
    """A processor putting 4 tokens a tile where the config's pixel shuffle gives 9: refused by the layout."""
    from attnviz.errors import ModelNotFoundError
    from attnviz.images.vlm import vlm_attention

    folder = tmp_path / "wrong"
    shutil.copytree(tiled["idefics3"], folder)
    (folder / "processor_config.json").write_text(json.dumps({"processor_class": "Idefics3Processor",
                                                              "image_seq_len": 4}), encoding="utf-8")
    with pytest.raises(ModelNotFoundError, match="idefics3 layout gives 9 image tokens in block 1 of picture 1, the "
                                                 "processor put 4"):
        vlm_attention(TEXT, pictures["wide"], str(folder))
    shown = run_cli("heatmap", TEXT, "--image", str(pictures["wide"]), "--model", str(folder))
    assert shown.exit_code != 0 and "layout gives 9" in shown.stderr and shown.stderr.count("\n") == 1


# Gemma 3 with pan-and-scan -------------------------------------------------------------------------------------------

GEMMA_WORDS = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_image>", "<end_of_image>", "<image_soft_token>", *WORDS,
               "Here", "original", "image", "and", "here", "are", "some", "crops", "to", "help", "you", "see", "better"]


@pytest.fixture(scope="module")
def gemma3_pan(tmp_path_factory) -> Path:
    """A tiny Gemma 3 (SigLIP's 8 × 8 patches of 4 pixels pooled to 4 × 4) whose image processor was saved with
    pan-and-scan on: crops of at least 16 pixels, at most 4, past an aspect ratio of 1.2."""
    import transformers
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration, Gemma3ImageProcessor, Gemma3Processor

    transformers.logging.set_verbosity_error()
    fast = word_tokenizer(GEMMA_WORDS, eos_token="<eos>", bos_token="<bos>", pad_token="<pad>", extra_special_tokens={
        "boi_token": "<start_of_image>", "eoi_token": "<end_of_image>", "image_token": "<image_soft_token>"})
    config = Gemma3Config(
        vision_config={"model_type": "siglip_vision_model", "image_size": 32, "patch_size": 4, "hidden_size": 32,
                       "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 37},
        text_config={"model_type": "gemma3_text", "vocab_size": len(GEMMA_WORDS), "hidden_size": 32,
                     "intermediate_size": 37, "num_hidden_layers": 2, "num_attention_heads": 4,
                     "num_key_value_heads": 1, "head_dim": 8, "max_position_embeddings": 512, "sliding_window": 16},
        mm_tokens_per_image=16, boi_token_index=4, eoi_token_index=5, image_token_index=6)
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("gemma3_pan") / "gemma3"
    Gemma3ForConditionalGeneration(config).save_pretrained(folder)
    image_processor = Gemma3ImageProcessor(size={"height": 32, "width": 32}, do_pan_and_scan=True,
                                           pan_and_scan_min_crop_size=16, pan_and_scan_max_num_crops=4,
                                           pan_and_scan_min_ratio_to_activate=1.2)
    Gemma3Processor(image_processor=image_processor, tokenizer=fast, image_seq_length=16).save_pretrained(folder)
    return folder


PAN = {"do_pan_and_scan": True}  # transformers' own call: its processor turns pan-and-scan off unless asked


def test_gemma3_places_the_whole_picture_then_each_crop(gemma3_pan, pictures):
    """64 × 40: ratio 1.6, two crops of 32 × 40 (x 0–32, 32–64); three blocks of 4 × 4 pooled tokens (48). The
    overlay is the crops side by side, 4 × 8 tokens of 8 × 10 pixels; the whole picture's tokens 16 × 10."""
    from attnviz.images.vlm import vlm_attention

    result = vlm_attention(TEXT, pictures["pan"], str(gemma3_pan))
    assert result.metadata["engine"] == "fused" and "fused_refused" not in result.metadata  # the default engine
    inputs, expected = reference(gemma3_pan, f"<start_of_image> {TEXT}", [pictures["pan"]], **PAN)
    torch.testing.assert_close(result.attentions, expected, atol=1e-5, rtol=1e-5)
    assert result.token_ids == inputs["input_ids"][0].tolist()
    meta = result.metadata["images"][0]
    tokens = image_positions(inputs, 6)
    assert meta["image_positions"] == tokens and len(tokens) == 48
    assert [g["name"] for g in meta["grids"]] == ["original", "crop 1", "crop 2", "crops"]
    assert (meta["rows"], meta["cols"]) == (4, 8)
    labels = [result.tokens[i] for i in tokens]
    assert labels[0] == "<img o r0c0>" and labels[15] == "<img o r3c3>"
    assert labels[16] == "<img r0c0>" and labels[32] == "<img r0c4>" and labels[-1] == "<img r3c7>"
    assert result.tokens[tokens[16] - 1] == "<start_of_image>" and result.tokens[tokens[15] + 1] == "<end_of_image>"
    assert meta["positions"][:8] == tokens[16:20] + tokens[32:36]  # the crops' first rows side by side
    assert meta["boxes"][0] == pytest.approx([0.0, 0.0, 8.0, 10.0])
    assert meta["boxes"][4] == pytest.approx([32.0, 0.0, 40.0, 10.0])
    assert meta["boxes"][-1] == pytest.approx([56.0, 30.0, 64.0, 40.0])
    assert meta["grids"][0]["boxes"][0] == pytest.approx([0.0, 0.0, 16.0, 10.0])
    assert meta["grids"][2]["boxes"][0] == pytest.approx([32.0, 0.0, 40.0, 10.0])


def test_gemma3_without_crops_keeps_the_one_pooled_grid(gemma3_pan, pictures):
    """A square picture is not cut (ratio 1 < 1.2): one 4 × 4 grid labelled r0c0..., as without pan-and-scan."""
    from attnviz.images.vlm import vlm_attention

    result = vlm_attention(TEXT, pictures["square"], str(gemma3_pan))
    inputs, expected = reference(gemma3_pan, f"<start_of_image> {TEXT}", [pictures["square"]], **PAN)
    torch.testing.assert_close(result.attentions, expected, atol=1e-5, rtol=1e-5)
    meta = result.metadata["images"][0]
    assert [g["name"] for g in meta["grids"]] == ["patches"] and (meta["rows"], meta["cols"]) == (4, 4)
    assert meta["positions"] == image_positions(inputs, 6) and result.tokens[meta["first"]] == "<img r0c0>"
    assert meta["boxes"][-1] == pytest.approx([30.0, 30.0, 40.0, 40.0])


def test_gemma3_places_two_pictures_with_their_crops_in_order(gemma3_pan, pictures):
    """64 × 40 (two crops side by side) then 40 × 64 (two crops one above the other: the canvas 8 × 4)."""
    from attnviz.images.vlm import vlm_attention

    paths = [pictures["pan"], pictures["pan_tall"]]
    text = f"<start_of_image> {TEXT} <start_of_image> {TEXT}"
    result = vlm_attention(text, paths, str(gemma3_pan))
    inputs, expected = reference(gemma3_pan, text, paths, **PAN)
    torch.testing.assert_close(result.attentions, expected, atol=1e-5, rtol=1e-5)
    first, second = result.metadata["images"]
    assert first["image_positions"] + second["image_positions"] == image_positions(inputs, 6)
    assert len(first["image_positions"]) == len(second["image_positions"]) == 48
    assert (first["rows"], first["cols"], second["rows"], second["cols"]) == (4, 8, 8, 4)
    assert second["boxes"][-1] == pytest.approx([30.0, 56.0, 40.0, 64.0])  # the lower crop's last token
    assert result.tokens[second["first"]] == "<img 2 o r0c0>"
    assert result.tokens[second["image_positions"][32]] == "<img 2 r4c0>"  # the lower crop starts row 4
