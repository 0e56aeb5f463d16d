"""Attention over images, first step (issue 53): each encoder family's attention equals transformers' eager
attention on the processor's own pixels, its layout's token count equals the model's sequence, a planted head draws
its heat on the patch it was built to read, and a picture that is not one is one line."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from picture_models import planted_vit, transformers_reference, word_tokenizer

FAMILIES = ("vit", "clip", "siglip", "dinov2")


@pytest.fixture(scope="module")
def encoders(tmp_path_factory) -> dict[str, Path]:
    """Tiny random image encoders with their processors (transformers' test-sized configs), saved offline."""
    import transformers
    from transformers import (
        BitImageProcessor,
        CLIPImageProcessor,
        CLIPVisionConfig,
        CLIPVisionModel,
        Dinov2Config,
        Dinov2Model,
        SiglipImageProcessor,
        SiglipVisionConfig,
        SiglipVisionModel,
        ViTConfig,
        ViTImageProcessor,
        ViTModel,
    )

    transformers.logging.set_verbosity_error()
    root = tmp_path_factory.mktemp("encoders")
    common = {"image_size": 32, "patch_size": 8, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
              "intermediate_size": 37}
    torch.manual_seed(0)
    built = {
        "vit": (ViTModel(ViTConfig(**common)), ViTImageProcessor(size={"height": 32, "width": 32})),
        "clip": (CLIPVisionModel(CLIPVisionConfig(**common)),
                 CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})),
        "siglip": (SiglipVisionModel(SiglipVisionConfig(**common)), SiglipImageProcessor(size={"height": 32, "width": 32})),
        "dinov2": (Dinov2Model(Dinov2Config(**common)),
                   BitImageProcessor(size={"shortest_edge": 40}, crop_size={"height": 32, "width": 32},
                                     do_center_crop=True)),
    }
    folders = {}
    for name, (model, processor) in built.items():
        folders[name] = root / name
        model.save_pretrained(folders[name])
        processor.save_pretrained(folders[name])
    return folders





@pytest.fixture
def picture(tmp_path) -> Path:
    from PIL import Image

    path = tmp_path / "picture.png"
    Image.fromarray((np.random.RandomState(0).rand(48, 64, 3) * 255).astype(np.uint8)).save(path)
    return path


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_equals_transformers_eager_attention_and_its_layout_counts_its_tokens(encoders, picture, family):
    import transformers
    from PIL import Image

    from attnviz.images.encoder import image_attention

    result = image_attention(picture, str(encoders[family]))
    processor = transformers.AutoImageProcessor.from_pretrained(encoders[family])
    auto = {"clip": transformers.CLIPVisionModel, "siglip": transformers.SiglipVisionModel}.get(family,
                                                                                                transformers.AutoModel)
    model = auto.from_pretrained(encoders[family], attn_implementation="eager").eval()
    pixels = processor(images=Image.open(picture).convert("RGB"), return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        reference = torch.stack([a[0] for a in model(pixel_values=pixels, output_attentions=True).attentions])
    torch.testing.assert_close(result.attentions, reference, atol=1e-5, rtol=1e-5)
    meta = result.metadata["images"][0]
    assert len(result.tokens) == meta["specials"] + meta["rows"] * meta["cols"] == reference.shape[-1]
    assert (meta["specials"] == 0) == (family == "siglip")  # SigLIP has no CLS token
    assert result.tokens[meta["specials"]] == "r0c0" and result.tokens[-1] == f"r{meta['rows'] - 1}c{meta['cols'] - 1}"
    assert len(meta["boxes"]) == meta["rows"] * meta["cols"]


def test_the_boxes_invert_the_processors_resize_and_crop(encoders, picture):
    from attnviz.images.encoder import image_attention

    vit = image_attention(picture, str(encoders["vit"])).metadata["images"][0]["boxes"]
    assert vit[0] == [0.0, 0.0, 16.0, 12.0] and vit[-1] == [48.0, 36.0, 64.0, 48.0]  # 64×48 → 32×32: x·2, y·1.5
    clip = image_attention(picture, str(encoders["clip"])).metadata["images"][0]["boxes"]
    # shortest edge 48 → 32 (scale 2/3: 64 → 42.67), a centre crop of 32: 5.33 px cut each side
    assert clip[0] == pytest.approx([8.0, 0.0, 20.0, 12.0]) and clip[-1] == pytest.approx([44.0, 36.0, 56.0, 48.0])


def test_a_planted_head_draws_its_heat_on_the_patch_it_reads(tmp_path, picture):
    """ViT with zero patch projections: each patch token is its position embedding. The CLS token's and patch 5's
    embeddings share one direction, every other patch's is small and random, and layer 0's query and key maps
    are the identity on head 0's dimensions: CLS's weight on patches is largest on patch 5 (row 1, column 1), whose
    box in the 64 × 48 picture is x 16–32, y 12–24."""
    from attnviz.images.encoder import image_attention
    from attnviz.render.overlay import _heat, patch_weights

    target = 5
    folder = planted_vit(tmp_path / "planted", target)
    result = image_attention(picture, str(folder))
    weights = patch_weights(result, 0, 0, 0)
    assert int(weights.argmax()) == target and float(weights.max()) > 0.9 * float(result.attentions[0, 0, 0, 1:].sum())
    from PIL import Image

    heat = _heat(Image.open(picture).convert("RGB"), weights, result.metadata["images"][0]["boxes"], (64, 48), "magma")
    bright = np.asarray(heat, dtype=np.float64).sum(-1)
    inside, outside = bright[12:24, 16:32].mean(), np.delete(bright, np.s_[12:24], axis=0).mean()
    assert inside > 1.5 * outside  # the heat is on the planted patch's box


def test_the_command_draws_the_picture_and_writes_the_numbers(run_cli, encoders, picture, tmp_path):
    from attnviz.result import AttentionResult

    shown = run_cli("heatmap", "--image", str(picture), "--model", str(encoders["clip"]), "--layer", "1",
                    "--head", "mean")
    assert shown.exit_code == 0, shown.stderr
    assert "4 × 4 grid" in shown.stdout and "scale ' '" in shown.stdout and "r3" in shown.stdout  # shades, labelled
    png, npz = tmp_path / "heat.png", tmp_path / "heat.npz"
    written = run_cli("heatmap", "--image", str(picture), "--model", str(encoders["dinov2"]), "--head", "all",
                      "--out", str(png), "--out", str(npz))
    assert written.exit_code == 0, written.stderr
    assert png.read_bytes().startswith(b"\x89PNG")
    loaded = AttentionResult.load(npz)
    assert loaded.metadata["images"][0]["layout"] == "dinov2" and loaded.tokens[0] == "[CLS]"


def test_what_is_not_a_picture_or_not_an_encoder_is_one_line(run_cli, encoders, picture, tmp_path, tiny_hf):
    from PIL import Image

    fake = tmp_path / "fake.png"
    fake.write_text("not a picture", encoding="utf-8")
    truncated = tmp_path / "truncated.png"
    truncated.write_bytes(picture.read_bytes()[:200])
    gif = tmp_path / "x.gif"
    Image.new("RGB", (4, 4)).save(gif)
    cases = [(fake, "not a picture"), (truncated, "truncated"), (gif, "GIF"), (tmp_path / "missing.png", "does not exist")]
    for path, message in cases:
        result = run_cli("heatmap", "--image", str(path), "--model", str(encoders["vit"]))
        assert result.exit_code != 0 and message in result.stderr, (path, result.stderr)
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    refused = run_cli("heatmap", "--image", str(picture), "--model", tiny_hf["bert"])
    assert refused.exit_code != 0 and "knows no patch layout" in refused.stderr
    both = run_cli("heatmap", "a text", "--image", str(picture), "--model", str(encoders["vit"]))
    assert both.exit_code != 0 and "image encoder" in both.stderr and "texts with pictures need a vision-language model" in both.stderr
    wrong = run_cli("heatmap", "--image", str(picture), "--model", str(encoders["vit"]), "--out", str(tmp_path / "x.jpg"))
    assert wrong.exit_code != 0 and ".png" in wrong.stderr and ".svg" in wrong.stderr


def test_a_decompression_bomb_is_refused_by_its_header_before_it_is_decoded(tmp_path):
    from PIL import Image

    from attnviz.errors import ResourceError
    from attnviz.images.files import read_image

    path = tmp_path / "big.png"
    buffer = io.BytesIO()
    Image.new("L", (400, 300)).save(buffer, format="PNG")
    path.write_bytes(buffer.getvalue())
    with pytest.raises(ResourceError, match="400 × 300 pixels"):
        read_image(path, max_pixels=100_000)
    assert read_image(path).size == (400, 300)



def test_llava_attention_over_text_and_picture_equals_transformers_and_its_layout_is_the_processors(llava, picture):
    from attnviz.images.vlm import vlm_attention

    result = vlm_attention("what is in the picture ?", picture, str(llava))
    inputs, reference = transformers_reference(llava, "<image> what is in the picture ?", picture)
    torch.testing.assert_close(result.attentions, reference, atol=1e-5, rtol=1e-5)
    meta = result.metadata["images"][0]
    image_tokens = [i for i, t in enumerate(inputs["input_ids"][0].tolist()) if t == 3]  # the processor's own count
    assert len(image_tokens) == meta["rows"] * meta["cols"] == 16 and meta["first"] == image_tokens[0]
    assert result.tokens[image_tokens[0]] == "<img r0c0>" and result.tokens[-1] == "?"
    assert meta["boxes"][0] == pytest.approx([8.0, 0.0, 20.0, 12.0])  # CLIP's resize and crop, as the encoder's


def test_a_pictures_tokens_are_not_separators_in_the_head_statistics(llava, picture):
    """Image tokens are special tokens, but the ``sep`` statistic (Clark et al.'s weight on [SEP]/EOS) must not read
    attention to the picture as attention to a separator: every key it reads is outside the picture."""
    from attnviz.analysis import heads
    from attnviz.images.vlm import vlm_attention

    result = vlm_attention("what is in the picture ?", picture, str(llava))
    picture_tokens = set(result.pictures[0].image_positions)
    special_in_picture = [i for i in picture_tokens if result.special[i]]
    assert special_in_picture, "the test needs image tokens marked special, as the processor marks them"
    sep = heads.sep_keys(result)
    assert not any(sep[i] for i in picture_tokens)
    keys = [i for i, flag in enumerate(sep) if flag]
    on_sep = result.attentions[..., keys].double().sum(-1).mean(-1)  # [layers, heads]; 0 where no separator is left
    torch.testing.assert_close(heads.head_table([result]).stats["sep"], on_sep)


def test_the_command_shows_what_the_last_word_reads_of_the_picture(run_cli, llava, picture, tmp_path):
    from attnviz.render.overlay import patch_weights

    png = tmp_path / "llava.png"
    drawn = run_cli("heatmap", "what is in the picture ?", "--image", str(picture), "--model", str(llava),
                    "--head", "all", "--out", str(png), "--out", str(tmp_path / "llava.npz"))
    assert drawn.exit_code == 0, drawn.stderr
    assert png.read_bytes().startswith(b"\x89PNG")
    from attnviz.result import AttentionResult

    saved = AttentionResult.load(tmp_path / "llava.npz")
    weights = patch_weights(saved, 1, 0, len(saved.tokens) - 1)
    first = saved.metadata["images"][0]["first"]
    expected = saved.attentions[1, 0, -1, first : first + 16].reshape(4, 4).double().numpy()
    np.testing.assert_allclose(weights, expected)  # the last word's row, on the image tokens, in grid order
    alone = run_cli("heatmap", "--image", str(picture), "--model", str(llava))
    assert alone.exit_code != 0 and "give the text" in alone.stderr


def test_heads_on_a_picture_match_a_direct_reading_of_transformers_attention(run_cli, llava, picture):
    """heads --image: each head's share on the picture, spread over it and sink, against the same sums written out on
    transformers' own attention (the text's queries after the picture)."""
    import json

    import transformers
    from PIL import Image

    result = run_cli("heads", "what is in the picture ?", "--image", str(picture), "--model", str(llava),
                     "--format", "json")
    assert result.exit_code == 0, result.stderr
    rows = {(r["layer"], r["head"]): r for r in json.loads(result.stdout)["heads"]}
    processor = transformers.AutoProcessor.from_pretrained(llava)
    inputs = processor(text="<image> what is in the picture ?", images=[Image.open(picture).convert("RGB")],
                       return_tensors="pt")
    model = transformers.AutoModelForImageTextToText.from_pretrained(llava, attn_implementation="eager").eval()
    with torch.no_grad():
        attentions = model(**inputs, output_attentions=True).attentions
    for (layer, head), row in rows.items():
        a = attentions[layer][0, head].double()
        text_rows = a[16:]  # the 5 words after the 16 image tokens
        share = text_rows[:, :16].sum(-1).mean()
        spread = text_rows[:, :16] / text_rows[:, :16].sum(-1, keepdim=True)
        entropy = (-(spread * spread.log()).sum(-1) / np.log(16)).mean()
        top = int(text_rows[:, :16].mean(0).argmax())
        assert row["image_share"] == pytest.approx(float(share), abs=1e-5)
        assert row["patch_entropy"] == pytest.approx(float(entropy), abs=1e-5)
        assert (row["sink_row"], row["sink_col"]) == (top // 4, top % 4)


def test_the_planted_patch_is_the_encoder_heads_sink(run_cli, tmp_path, picture):
    """The planted ViT of the test above: layer 0 head 0's sink is its patch (row 1, column 1)."""
    import json

    planted_vit(tmp_path / "planted", 5)
    result = run_cli("heads", "--image", str(picture), "--model", str(tmp_path / "planted"), "--format", "json")
    assert result.exit_code == 0, result.stderr
    row = next(r for r in json.loads(result.stdout)["heads"] if (r["layer"], r["head"]) == (0, 0))
    assert row["sink"] == "r1c1"


@pytest.fixture(scope="module")
def paligemma(tmp_path_factory) -> Path:
    """A tiny PaliGemma (SigLIP's 4 × 4 patches, a Gemma with one key/value head) and its processor, offline."""
    import transformers
    from transformers import (
        PaliGemmaConfig,
        PaliGemmaForConditionalGeneration,
        PaliGemmaProcessor,
        SiglipImageProcessor,
    )

    transformers.logging.set_verbosity_error()
    words = ["<pad>", "<eos>", "<bos>", "<unk>", "<image>", "what", "is", "in", "the", "picture", "?"]
    fast = word_tokenizer(words, eos_token="<eos>", bos_token="<bos>", pad_token="<pad>", image="<image>")
    config = PaliGemmaConfig(
        vision_config={"model_type": "siglip_vision_model", "image_size": 32, "patch_size": 8, "hidden_size": 32,
                       "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 37,
                       "projection_dim": 32},
        text_config={"model_type": "gemma", "vocab_size": len(words), "hidden_size": 32, "intermediate_size": 37,
                     "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 8,
                     "max_position_embeddings": 512},
        image_token_index=4, projection_dim=32)
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("paligemma") / "paligemma"
    PaliGemmaForConditionalGeneration(config).save_pretrained(folder)
    PaliGemmaProcessor(image_processor=SiglipImageProcessor(size={"height": 32, "width": 32}, image_seq_length=16),
                       tokenizer=fast).save_pretrained(folder)
    return folder


def test_paligemma_puts_its_patches_before_the_prompt_and_attends_over_a_prefix(paligemma, picture):
    from attnviz.images.vlm import vlm_attention

    result = vlm_attention("what is in the picture ?", picture, str(paligemma))
    _, reference = transformers_reference(paligemma, "what is in the picture ?", picture)
    torch.testing.assert_close(result.attentions, reference, atol=1e-5, rtol=1e-5)
    meta = result.metadata["images"][0]
    assert meta["first"] == 0 and meta["specials"] == 0 and meta["rows"] * meta["cols"] == 16
    assert result.tokens[:2] == ["<img r0c0>", "<img r0c1>"] and result.tokens[-1] == "?"
    assert result.causal is False  # the image and the prompt see each other: a prefix, read off the weights
    assert float(result.attentions[0, 0, 0, 16]) > 0  # the first patch attends to the prompt after it


@pytest.fixture(scope="module")
def llava_next(tmp_path_factory) -> Path:
    """A tiny LLaVA-NeXT: a 32-pixel tower of 8-pixel patches, pinpoints 32×64, 64×32, 64×64, offline."""
    import transformers
    from transformers import (
        CLIPVisionConfig,
        LlamaConfig,
        LlavaNextConfig,
        LlavaNextForConditionalGeneration,
        LlavaNextImageProcessor,
        LlavaNextProcessor,
    )

    transformers.logging.set_verbosity_error()
    words = ["<unk>", "<s>", "</s>", "<image>", "what", "is", "in", "the", "picture", "?"]
    fast = word_tokenizer(words, bos_token="<s>", eos_token="</s>", image="<image>")
    pinpoints = [[32, 64], [64, 32], [64, 64]]
    config = LlavaNextConfig(
        vision_config=CLIPVisionConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2,
                                       num_attention_heads=4, intermediate_size=37, projection_dim=32),
        text_config=LlamaConfig(vocab_size=len(words), hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512),
        image_token_index=3, vision_feature_select_strategy="default", vision_feature_layer=-2,
        image_grid_pinpoints=pinpoints)
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("llava_next") / "llava_next"
    LlavaNextForConditionalGeneration(config).save_pretrained(folder)
    processor = LlavaNextImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32},
                                        image_grid_pinpoints=pinpoints)
    LlavaNextProcessor(image_processor=processor, tokenizer=fast, patch_size=8, vision_feature_select_strategy="default",
                       image_token="<image>", num_additional_image_tokens=1).save_pretrained(folder)
    return folder


@pytest.mark.parametrize("size", [(64, 48), (48, 64), (40, 40)])
def test_llava_next_places_the_base_grid_the_unpadded_canvas_and_its_newlines(llava_next, tmp_path, size):
    """The any-resolution layout's count equals the processor's for wide, tall and square pictures; the tokens are
    the base grid, then each canvas row and its newline; the attention equals transformers' eager attention."""
    from PIL import Image

    from attnviz.images.vlm import vlm_attention

    path = tmp_path / "picture.png"
    Image.fromarray((np.random.RandomState(1).rand(size[1], size[0], 3) * 255).astype(np.uint8)).save(path)
    result = vlm_attention("what is in the picture ?", path, str(llava_next))
    inputs, reference = transformers_reference(llava_next, "<image> what is in the picture ?", path)
    count = inputs["input_ids"][0].tolist().count(3)
    torch.testing.assert_close(result.attentions, reference, atol=1e-5, rtol=1e-5)
    meta = result.metadata["images"][0]
    base, canvas = meta["grids"]
    assert base["rows"] == base["cols"] == 4 and base["positions"] == meta["image_positions"][:16]
    assert len(meta["image_positions"]) == count == 16 + canvas["rows"] * (canvas["cols"] + 1)
    labels = [result.tokens[i] for i in meta["image_positions"]]
    assert labels[:2] == ["<img b r0c0>", "<img b r0c1>"] and labels[16] == "<img r0c0>"
    assert labels[16 + canvas["cols"]] == "<img ⏎0>" and labels[-1] == f"<img ⏎{canvas['rows'] - 1}>"
    # the canvas boxes cover the picture: from its top-left corner to its bottom-right, within a patch's rounding
    x0 = min(b[0] for b in canvas["boxes"])
    y1 = max(b[3] for b in canvas["boxes"])
    assert x0 == pytest.approx(0, abs=size[0] / 8) and y1 == pytest.approx(size[1], abs=size[1] / 8)


def test_a_picture_whose_attention_would_not_fit_is_refused_before_the_model_runs(run_cli, llava, picture,
                                                                                    monkeypatch):
    monkeypatch.setenv("ATTNVIZ_MAX_MEMORY", "10K")  # 22 tokens: 2 × 4 bytes × 2 layers × 4 heads × 22² = 31 KB
    result = run_cli("heatmap", "what is in the picture ?", "--image", str(picture), "--model", str(llava))
    assert result.exit_code != 0 and "16 of them the picture's" in result.stderr and "ATTNVIZ_MAX_MEMORY" in result.stderr


def test_generate_with_a_picture_answers_as_transformers_and_keeps_each_new_tokens_row(run_cli, llava, picture,
                                                                                       tmp_path):
    """The answer is transformers' greedy one; each answer token's row (read off one forward over the whole sequence)
    equals the row transformers computed for it while generating (the step that fed it back)."""
    import transformers
    from PIL import Image

    from attnviz.images.vlm import vlm_attention

    result = vlm_attention("what is in the picture ?", picture, str(llava), max_new_tokens=4)
    processor = transformers.AutoProcessor.from_pretrained(llava)
    inputs = processor(text="<image> what is in the picture ?", images=[Image.open(picture).convert("RGB")],
                       return_tensors="pt")
    model = transformers.AutoModelForImageTextToText.from_pretrained(llava, attn_implementation="eager").eval()
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=4, do_sample=False, output_attentions=True,
                             return_dict_in_generate=True, pad_token_id=0)
    assert result.token_ids == out.sequences[0].tolist()
    start = result.metadata["prompt_length"]
    assert start == inputs["input_ids"].shape[1]
    for step in range(1, len(out.attentions)):  # step k fed the token at start + k - 1
        position = start + step - 1
        expected = torch.stack([layer[0, :, -1] for layer in out.attentions[step]])  # [L, H, T]
        torch.testing.assert_close(result.attentions[:, :, position, : position + 1], expected, atol=1e-5, rtol=1e-5)
    shown = run_cli("generate", "what is in the picture ?", "--image", str(picture), "--model", str(llava), "-n", "3",
                    "--out", str(tmp_path / "answer.png"))
    assert shown.exit_code == 0, shown.stderr
    assert (tmp_path / "answer.png").read_bytes().startswith(b"\x89PNG")
    printed = run_cli("generate", "what is in the picture ?", "--image", str(picture), "--model", str(llava), "-n", "2")
    assert printed.exit_code == 0 and "on the picture, most on r" in printed.stdout


@pytest.fixture(scope="module")
def gemma3(tmp_path_factory) -> Path:
    """A tiny Gemma 3: SigLIP's 8 × 8 patches pooled to 16 tokens, a Gemma 3 text model with sliding windows."""
    import transformers
    from transformers import (
        Gemma3Config,
        Gemma3ForConditionalGeneration,
        Gemma3ImageProcessor,
        Gemma3Processor,
    )

    transformers.logging.set_verbosity_error()
    words = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_image>", "<end_of_image>", "<image_soft_token>", "what",
             "is", "in", "the", "picture", "?"]
    fast = word_tokenizer(words, eos_token="<eos>", bos_token="<bos>", pad_token="<pad>", extra_special_tokens={
        "boi_token": "<start_of_image>", "eoi_token": "<end_of_image>", "image_token": "<image_soft_token>"})
    config = Gemma3Config(
        vision_config={"model_type": "siglip_vision_model", "image_size": 32, "patch_size": 4, "hidden_size": 32,
                       "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 37},
        text_config={"model_type": "gemma3_text", "vocab_size": len(words), "hidden_size": 32,
                     "intermediate_size": 37, "num_hidden_layers": 2, "num_attention_heads": 4,
                     "num_key_value_heads": 1, "head_dim": 8, "max_position_embeddings": 512, "sliding_window": 16},
        mm_tokens_per_image=16, boi_token_index=4, eoi_token_index=5, image_token_index=6)
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("gemma3") / "gemma3"
    Gemma3ForConditionalGeneration(config).save_pretrained(folder)
    Gemma3Processor(image_processor=Gemma3ImageProcessor(size={"height": 32, "width": 32}), tokenizer=fast,
                    image_seq_length=16).save_pretrained(folder)
    return folder


def test_gemma3_pools_its_patches_to_a_square_grid_between_its_image_markers(gemma3, picture):
    from attnviz.images.vlm import vlm_attention

    result = vlm_attention("what is in the picture ?", picture, str(gemma3))
    inputs, reference = transformers_reference(gemma3, "<start_of_image> what is in the picture ?", picture)
    torch.testing.assert_close(result.attentions, reference, atol=1e-5, rtol=1e-5)
    meta = result.metadata["images"][0]
    assert inputs["input_ids"][0].tolist().count(6) == meta["rows"] * meta["cols"] == 16  # the processor's count
    assert result.tokens[0] == "<start_of_image>" and result.tokens[1] == "<img r0c0>"
    assert result.tokens[17] == "<end_of_image>"
    assert meta["boxes"][0] == pytest.approx([0.0, 0.0, 16.0, 12.0])  # 8 px of 32 pooled: a quarter of each side


def test_rollout_over_the_patches_equals_the_chain_written_out(run_cli, encoders, picture, tmp_path):
    """rollout --image: Â_l = (mean of heads + I), rows renormalised, chained; its CLS row over the patches, against
    the same written out on transformers' eager attention."""
    import transformers
    from PIL import Image

    from attnviz.render.overlay import patch_weights
    from attnviz.result import AttentionResult

    saved = tmp_path / "rollout.npz"
    result = run_cli("rollout", "--image", str(picture), "--model", str(encoders["vit"]), "--out", str(saved))
    assert result.exit_code == 0, result.stderr
    rolled = AttentionResult.load(saved)
    processor = transformers.AutoImageProcessor.from_pretrained(encoders["vit"])
    model = transformers.AutoModel.from_pretrained(encoders["vit"], attn_implementation="eager").eval()
    pixels = processor(images=Image.open(picture).convert("RGB"), return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        attentions = model(pixel_values=pixels, output_attentions=True).attentions
    chain = None
    for layer in attentions:
        hat = layer[0].double().mean(0) + torch.eye(layer.shape[-1], dtype=torch.float64)
        hat = hat / hat.sum(-1, keepdim=True)
        chain = hat if chain is None else hat @ chain
    expected = chain[0, 1:].reshape(4, 4).numpy()  # CLS's row over the 16 patches, after the last layer
    np.testing.assert_allclose(patch_weights(rolled, 1, 0, 0), expected, rtol=1e-5, atol=1e-6)
    refused = run_cli("rollout", "a text", "--image", str(picture), "--model", str(encoders["vit"]))
    assert refused.exit_code != 0 and "no text" in refused.stderr


def test_several_pictures_each_get_their_own_tokens_grid_and_heat(llava_next, llava, run_cli, tmp_path):
    """Two pictures of different shapes (LLaVA-NeXT: 70 and 52 tokens) placed where the text names them: each
    picture's tokens are its own layout's, in order, labelled by number; the attention equals transformers'; the
    heads' statistics cover both; the command draws a panel per picture; a count that disagrees is one line."""
    from PIL import Image

    from attnviz.images.statistics import image_head_rows
    from attnviz.images.vlm import vlm_attention

    paths = []
    for n, size in enumerate([(64, 48), (40, 40)]):
        paths.append(tmp_path / f"p{n}.png")
        Image.fromarray((np.random.RandomState(n).rand(size[1], size[0], 3) * 255).astype(np.uint8)).save(paths[-1])
    text = "<image> what is in the picture ? <image> what is in the picture ?"
    result = vlm_attention(text, paths, str(llava_next))
    inputs, reference = transformers_reference(llava_next, text, paths)
    torch.testing.assert_close(result.attentions, reference, atol=1e-5, rtol=1e-5)
    first, second = result.metadata["images"]
    image_tokens = [i for i, t in enumerate(inputs["input_ids"][0].tolist()) if t == 3]
    assert first["image_positions"] + second["image_positions"] == image_tokens
    assert len(first["image_positions"]) == 16 + 6 * 9 and first["path"] == str(paths[0])
    assert max(first["image_positions"]) < image_tokens.index(second["first"]) + second["first"]
    assert result.tokens[first["first"]] == "<img 1 b r0c0>" and result.tokens[second["first"]] == "<img 2 b r0c0>"
    assert result.tokens[image_tokens[-1] + 1] == "what"  # the text between and after is the text's own
    rows = image_head_rows(result)
    after = list(range(image_tokens[-1] + 1, len(result.tokens)))
    expected = reference[1, 2][after][:, image_tokens].sum(-1).double().mean()
    row = next(r for r in rows if r["layer"] == 1 and r["head"] == 2)
    assert row["image_share"] == pytest.approx(float(expected), abs=1e-6)
    assert row["sink_image"] in (1, 2) and row["sink"].startswith(f"{row['sink_image']} r")
    png = tmp_path / "two.png"
    drawn = run_cli("heatmap", "what is in the picture ?", "--image", str(paths[0]), "--image", str(paths[1]),
                    "--model", str(llava), "--layer", "1", "--out", str(png))
    assert drawn.exit_code == 0, drawn.stderr
    from PIL import Image as PILImage

    assert PILImage.open(png).size[0] > 2 * 160  # a panel per picture, side by side
    shown = run_cli("heatmap", "what is in the picture ?", "--image", str(paths[0]), "--image", str(paths[1]),
                    "--model", str(llava), "--layer", "1")
    assert shown.exit_code == 0 and "picture 1" in shown.stdout and "picture 2" in shown.stdout
    named = run_cli("heatmap", "<image> what is in the picture ?", "--image", str(paths[0]), "--image", str(paths[1]),
                    "--model", str(llava))
    assert named.exit_code != 0 and "names 1 pictures" in named.stderr and named.stderr.count("\n") == 1


@pytest.mark.parametrize("family", ["llava", "llava_next", "gemma3", "paligemma"])
def test_the_fused_engine_and_the_texts_rows_equal_transformers_eager_attention(family, request, picture):
    """Each family's language model on attnviz's attention function (switched, not refused) gives transformers'
    eager weights to 1e-5; eager taken a layer at a time (engine hf) too; and the text's rows alone are exactly
    those rows of the whole, their positions in metadata["rows"]."""
    from attnviz.images.vlm import vlm_attention

    folder = request.getfixturevalue(family)
    text = "what is in the picture ?"
    fused = vlm_attention(text, picture, str(folder))
    assert fused.metadata["engine"] == "fused" and "fused_refused" not in fused.metadata
    prompt = text if family == "paligemma" else f"<start_of_image> {text}" if family == "gemma3" else f"<image> {text}"
    _, reference = transformers_reference(folder, prompt, picture)
    torch.testing.assert_close(fused.attentions, reference, atol=1e-5, rtol=1e-5)
    eager = vlm_attention(text, picture, str(folder), engine="hf")
    assert eager.metadata["engine"] == "hf"
    torch.testing.assert_close(eager.attentions, reference, atol=1e-5, rtol=1e-5)
    rows = vlm_attention(text, picture, str(folder), rows="text")
    held = rows.metadata["rows"]
    image = set(rows.metadata["images"][0]["image_positions"])
    assert held == [i for i in range(len(rows.tokens)) if i not in image] and rows.attentions.shape[-2] == len(held)
    torch.testing.assert_close(rows.attentions, reference[:, :, held], atol=1e-5, rtol=1e-5)
    # Gemma 3's image tokens see each other both ways (its text causally), PaliGemma's prompt is a prefix
    assert fused.causal == (family not in ("paligemma", "gemma3")) and rows.causal == (family != "paligemma")


def plant_patch_reader(model: torch.nn.Module, target: int) -> None:
    """Make layer 0, head 0 of a tiny LLaVA's language model read the image token of the vision tower's patch
    ``target`` from every text token (weights by hand):

    - the tower sees positions only (its patch convolution zeroed, its layers' writes zeroed, so the features
      are ``pre_layrnorm`` of the position embeddings); patch ``target``'s position embedding is +a on dims 0-7 and
      −a on dims 8-15 (LayerNorm: ±√2 there), every other one small noise (LayerNorm: N(0, 1) entries);
    - the projector is k·I then GELU then I: the target's dims 0-7 are large and positive, another patch's are
      GELU of unit noise (a third of the target's sum on average);
    - every text token's embedding is 1 on dims 16-31 and 0 on 0-15; the newline token (LLaVA-NeXT) is 0;
    - head 0's query dim 3 sums dims 16-31 (text tokens: 22.6 after RMSNorm), its key dim 3 sums dims 0-7 (the
      target: 16, another patch 0.4 to 8.2, a text token 0); dim 3 pairs with RoPE's slowest frequency and
      ``rope_theta`` is 1e12, so positions barely turn it. Every other query and key dim is 0.
    The scores (÷ √8): the target 128, any other key at most 66: the row's weight on the target's token(s) is ~1
    (docs/learning.md does it by hand)."""
    with torch.no_grad():
        tower = model.model.vision_tower
        tower.embeddings.patch_embedding.weight.zero_()
        tower.embeddings.class_embedding.zero_()
        generator = torch.Generator().manual_seed(3)
        positions = torch.randn(tower.embeddings.position_embedding.weight.shape, generator=generator) * 0.01
        positions[1 + target] = torch.cat([torch.full((8,), 5.0), torch.full((8,), -5.0), torch.zeros(16)])
        tower.embeddings.position_embedding.weight.copy_(positions)
        for layer in tower.encoder.layers:
            for linear in (layer.self_attn.out_proj, layer.mlp.fc2):
                linear.weight.zero_()
                linear.bias.zero_()
        projector = model.model.multi_modal_projector
        projector.linear_1.weight.copy_(torch.eye(32) * 4)
        projector.linear_2.weight.copy_(torch.eye(32))
        projector.linear_1.bias.zero_()
        projector.linear_2.bias.zero_()
        language = model.model.language_model
        language.embed_tokens.weight.zero_()
        language.embed_tokens.weight[:, 16:] = 1.0
        if getattr(model.model, "image_newline", None) is not None:
            model.model.image_newline.zero_()
        attention = language.layers[0].self_attn
        attention.q_proj.weight.zero_()
        attention.k_proj.weight.zero_()
        attention.q_proj.weight[3, 16:] = 1.0
        attention.k_proj.weight[3, :8] = 1.0


@pytest.mark.parametrize("family", ["llava", "llava_next"])
def test_a_planted_patch_reader_draws_its_heat_on_that_patchs_boxes(family, tmp_path):
    """The layout's mapping against a planted model: the text reads the tower's patch (1, 2); LLaVA-1.5's heat is
    on that patch's box of a 64 × 64 picture (resized to 32: 16-pixel boxes), LLaVA-NeXT's on the canvas patches
    (1, 2), (1, 6), (5, 2), (5, 6) of its 2 × 2 tiles (8-pixel boxes), hand computed."""
    import transformers
    from PIL import Image
    from transformers import CLIPVisionConfig, LlamaConfig

    from attnviz.images.vlm import vlm_attention
    from attnviz.render.overlay import patch_weights

    transformers.logging.set_verbosity_error()
    words = ["<unk>", "<s>", "</s>", "<image>", "what", "is", "in", "the", "picture", "?"]
    fast = word_tokenizer(words, bos_token="<s>", eos_token="</s>", image="<image>")
    vision = CLIPVisionConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                              intermediate_size=37, projection_dim=32)
    text = LlamaConfig(vocab_size=len(words), hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                       rope_parameters={"rope_type": "default", "rope_theta": 1e12})
    folder = tmp_path / family
    target = 1 * 4 + 2  # row 1, column 2 of the tower's 4 × 4 grid
    if family == "llava":
        config = transformers.LlavaConfig(vision_config=vision, text_config=text, image_token_id=3,
                                          vision_feature_select_strategy="default", vision_feature_layer=-2,
                                          image_seq_length=16)
        model = transformers.LlavaForConditionalGeneration(config)
        processor = transformers.LlavaProcessor(
            image_processor=transformers.CLIPImageProcessor(size={"shortest_edge": 32},
                                                            crop_size={"height": 32, "width": 32}),
            tokenizer=fast, patch_size=8, vision_feature_select_strategy="default", image_token="<image>",
            num_additional_image_tokens=1)
        expected = {(1, 2): (32.0, 16.0, 48.0, 32.0)}
    else:
        pinpoints = [[32, 64], [64, 32], [64, 64]]
        config = transformers.LlavaNextConfig(vision_config=vision, text_config=text, image_token_index=3,
                                              vision_feature_select_strategy="default", vision_feature_layer=-2,
                                              image_grid_pinpoints=pinpoints)
        model = transformers.LlavaNextForConditionalGeneration(config)
        processor = transformers.LlavaNextProcessor(
            image_processor=transformers.LlavaNextImageProcessor(size={"shortest_edge": 32},
                                                                 crop_size={"height": 32, "width": 32},
                                                                 image_grid_pinpoints=pinpoints),
            tokenizer=fast, patch_size=8, vision_feature_select_strategy="default", image_token="<image>",
            num_additional_image_tokens=1)
        expected = {(r, c): (8.0 * c, 8.0 * r, 8.0 * c + 8, 8.0 * r + 8) for r in (1, 5) for c in (2, 6)}
    plant_patch_reader(model, target)
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    path = tmp_path / "square.png"
    Image.fromarray((np.random.RandomState(2).rand(64, 64, 3) * 255).astype(np.uint8)).save(path)
    result = vlm_attention("what is in the picture ?", path, str(folder))
    meta = result.metadata["images"][0]
    weights = patch_weights(result, 0, 0, len(result.tokens) - 1)  # the last word's row over the (finest) grid
    order = np.argsort(weights.reshape(-1))[::-1][: len(expected)]
    found = {(int(i) // meta["cols"], int(i) % meta["cols"]) for i in order}
    assert found == set(expected)
    assert float(weights.sum()) > 0.5  # most of the row: on the planted patches (LLaVA-NeXT: its base grid's too)
    for (r, c), box in expected.items():
        assert meta["boxes"][r * meta["cols"] + c] == pytest.approx(list(box))


def test_a_patch_as_the_query_of_a_vision_language_model_reads_every_row(run_cli, llava, picture, tmp_path):
    """The text's rows are kept by default; asking for a patch's row (or the patches' mean) reads every row."""
    from attnviz.images.vlm import vlm_attention
    patch = run_cli("heatmap", "what is in the picture ?", "--image", str(picture), "--model", str(llava), "--query",
                    "r1c2", "--layer", "1", "--head", "0", "--cmap", "viridis")
    assert patch.exit_code == 0 and "'<img r1c2>' (token 6)" in patch.stdout, patch.stderr
    drawn = tmp_path / "patch.json"
    assert run_cli("heatmap", "what is in the picture ?", "--image", str(picture), "--model", str(llava), "--query",
                   "r1c2", "--layer", "1", "--head", "0", "--cmap", "magma", "--out", str(drawn)).exit_code == 0
    whole = vlm_attention("what is in the picture ?", picture, str(llava))  # every row
    import json

    query = whole.tokens.index("<img r1c2>")
    placed = whole.pictures[0]
    expected = whole.attentions[1, 0, query, list(placed.positions)].double().reshape(placed.rows, placed.cols)
    found = json.loads(drawn.read_text(encoding="utf-8"))["panels"][0]["weights"]
    np.testing.assert_allclose(np.array(found), expected.numpy(), atol=1e-7)  # that patch's own row
    mean = run_cli("heatmap", "what is in the picture ?", "--image", str(picture), "--model", str(llava), "--query",
                   "mean", "--layer", "1")
    assert mean.exit_code == 0 and "the patches' mean query" in mean.stdout, mean.stderr


def test_rollout_of_a_vision_language_models_picture_points_to_heatmap(run_cli, llava, picture):
    refused = run_cli("rollout", "--image", str(picture), "--model", str(llava))
    assert refused.exit_code != 0 and "heatmap TEXT --image" in refused.stderr and refused.stderr.count("\n") == 1


def test_a_picture_command_reads_its_text_file_and_refuses_what_it_does_not_use(run_cli, llava, picture, tmp_path):
    from attnviz.images.vlm import vlm_attention

    question = tmp_path / "q.txt"
    question.write_text("what is in the picture ?\n")
    npz = tmp_path / "q.npz"
    read = run_cli("heatmap", "--text-file", str(question), "--image", str(picture), "--model", str(llava), "--out",
                   str(npz))
    assert read.exit_code == 0, read.stderr
    from attnviz.result import AttentionResult

    assert AttentionResult.load(npz).tokens == vlm_attention("what is in the picture ?", picture, str(llava)).tokens
    for args, flag in [(("heatmap", "what", "--words"), "--words"), (("heads", "what", "--layer", "1"), "--layer"),
                       (("generate", "what", "--top-attended", "2"), "--top-attended"), (("heatmap", "what", "--rows", "0:2"), "--rows")]:
        refused = run_cli(*args, "--image", str(picture), "--model", str(llava))
        assert refused.exit_code != 0 and f"{flag} does not go with --image" in refused.stderr, refused.stderr


def test_a_result_of_the_texts_rows_is_refused_where_every_row_is_needed(llava, picture, tmp_path):
    from attnviz.errors import UsageError
    from attnviz.images.vlm import vlm_attention
    from attnviz.sources.saved import SavedSource

    rows = vlm_attention("what is in the picture ?", picture, str(llava), rows="text")
    with pytest.raises(UsageError, match="holds 6 of its 22 rows"):
        rows.save(tmp_path / "rows.npz")
    with pytest.raises(UsageError, match="rows='all'"):
        SavedSource(rows, "rows")
    assert not (tmp_path / "rows.npz").exists()


def test_a_model_that_reads_pictures_given_no_picture_is_told_to_give_one(run_cli, llava, encoders):
    for model, name in ((llava, "vlm_attention"), (encoders["vit"], "image_attention")):
        refused = run_cli("heatmap", "what is in the picture ?", "--model", str(model))
        assert refused.exit_code != 0 and "--image" in refused.stderr and name in refused.stderr, refused.stderr
        assert refused.stderr.count("\n") == 1 and "internal error" not in refused.stderr
    toml = run_cli("heatmap", "what", "--image", "x.png", "--model", "sample_configs/tiny.toml")
    assert toml.exit_code != 0 and "not a model that reads pictures" in toml.stderr


def test_the_picture_commands_refuse_the_native_engine_and_name_a_query_they_do_not_know(run_cli, llava, encoders,
                                                                                         picture, tmp_path):
    cases = [(("rollout", "--image", str(picture), "--model", str(encoders["vit"]), "--engine", "native"), "native"),
             (("heatmap", "what is in the picture ?", "--image", str(picture), "--model", str(llava), "--query",
               "zebra"), "a word of the text, a patch (r1c2"),
             (("heads", "what is in the picture ? <image>", "--image", str(picture), "--model", str(llava)),
              "put the question after the pictures")]
    for args, message in cases:
        result = run_cli(*args)
        assert message in result.stderr, (args, result.stderr)
    corpus = tmp_path / "c.jsonl"
    import json

    corpus.write_text(json.dumps({"text": "what is in the picture ?", "image": str(picture)}) + "\n")
    export = run_cli("export", str(corpus), "--model", str(llava), "--out", str(tmp_path / "x"), "--engine", "native")
    assert export.exit_code != 0 and "--engine native" in export.stderr and not (tmp_path / "x").exists()
