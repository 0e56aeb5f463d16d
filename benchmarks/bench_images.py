"""`attnviz heatmap TEXT --image PICTURE --out heat.png` on a LLaVA-1.5-shaped model against the floor: the same
forward pass from a transformers script with SDPA and no attention output (issue 53).

The model: LLaVA-1.5's vision tower shape at 336 pixels with 14-pixel patches (576 image tokens; a narrow CLIP tower,
4 layers, d=64) and a language model with 7B's attention scaled down to fit this machine (7B's 32 heads of 128 dims
over 32 layers become 8 heads of 64 over 8 layers, d=512), random weights, a word-level tokenizer with the image
token. Each side runs in a fresh process, timed whole (start-up, model load, the picture
processed, the forward; ours also draws a panel per head of the last layer). Medians of ``--runs``. Goal: ≤ 1.5×.

Memory: a LLaVA-NeXT-shaped model (the same tower and language model; pinpoints up to 672 × 672) on a 672 × 672
picture makes 2,928 image tokens (the 576-token base grid, a 48 × 48 canvas and its 48 newlines); the peak resident
memory of `attnviz heatmap TEXT --image PICTURE --out heat.png` (the fused engine, the text's rows) against a
transformers script that asks its eager attention for the weights (``output_attentions=True``), each a fresh
process. Goal: ≤ 0.5×.

Run: python benchmarks/bench_images.py [--runs 3] [--skip-memory]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from _common import offline_env, peak_mib, report, time_command

# A transformers script: the processor, the model on sys.argv[4]'s attention ("sdpa": no weights asked; "eager": the
# weights asked for, as a user of transformers gets them), one forward.
SCRIPT = r"""
import sys, torch, transformers
from PIL import Image
transformers.logging.set_verbosity_error()
folder, picture, text, attention = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
processor = transformers.AutoProcessor.from_pretrained(folder)
model = transformers.AutoModelForImageTextToText.from_pretrained(folder, attn_implementation=attention).eval()
inputs = processor(text="<image> " + text, images=[Image.open(picture).convert("RGB")], return_tensors="pt")
with torch.no_grad():
    out = model(**inputs, output_attentions=attention == "eager")
print(out.logits.shape)
"""


def tokenizer() -> object:
    """A word-level tokenizer of 500 words with LLaVA's image token."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<unk>", "<s>", "</s>", "<image>", *(f"w{i}" for i in range(500))]
    model = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    model.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=model, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    fast.add_special_tokens({"additional_special_tokens": ["<image>"]})
    return fast


def towers() -> tuple[object, object]:
    """LLaVA-1.5's tower shape (336 pixels, 14-pixel patches), narrow, and the scaled-down 7B attention."""
    from transformers import CLIPVisionConfig, LlamaConfig

    return (CLIPVisionConfig(image_size=336, patch_size=14, hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
                             intermediate_size=128, projection_dim=64),
            LlamaConfig(vocab_size=504, hidden_size=512, intermediate_size=1024, num_hidden_layers=8,
                        num_attention_heads=8, num_key_value_heads=8, max_position_embeddings=4096))


def build_next(folder: Path, picture: Path) -> None:
    """The LLaVA-NeXT-shaped model and a 672 × 672 picture (see the module)."""
    import numpy as np
    import torch
    import transformers
    from PIL import Image
    from transformers import (
        LlavaNextConfig,
        LlavaNextForConditionalGeneration,
        LlavaNextImageProcessor,
        LlavaNextProcessor,
    )

    transformers.logging.set_verbosity_error()
    vision, text = towers()
    pinpoints = [[336, 672], [672, 336], [672, 672]]
    config = LlavaNextConfig(vision_config=vision, text_config=text, image_token_index=3,
                             vision_feature_select_strategy="default", vision_feature_layer=-2,
                             image_grid_pinpoints=pinpoints)
    torch.manual_seed(0)
    LlavaNextForConditionalGeneration(config).save_pretrained(folder)
    processor = LlavaNextImageProcessor(size={"shortest_edge": 336}, crop_size={"height": 336, "width": 336},
                                        image_grid_pinpoints=pinpoints)
    LlavaNextProcessor(image_processor=processor, tokenizer=tokenizer(), patch_size=14,
                       vision_feature_select_strategy="default", image_token="<image>",
                       num_additional_image_tokens=1).save_pretrained(folder)
    Image.fromarray((np.random.RandomState(0).rand(672, 672, 3) * 255).astype(np.uint8)).save(picture)


def build(folder: Path, picture: Path) -> None:
    """The LLaVA-1.5-shaped model and a 640 × 480 picture (see the module)."""
    import numpy as np
    import torch
    import transformers
    from PIL import Image
    from transformers import CLIPImageProcessor, LlavaConfig, LlavaForConditionalGeneration, LlavaProcessor

    transformers.logging.set_verbosity_error()
    vision, text = towers()
    config = LlavaConfig(vision_config=vision, text_config=text, image_token_id=3,
                         vision_feature_select_strategy="default", vision_feature_layer=-2, image_seq_length=576)
    torch.manual_seed(0)
    LlavaForConditionalGeneration(config).save_pretrained(folder)
    LlavaProcessor(image_processor=CLIPImageProcessor(size={"shortest_edge": 336},
                                                      crop_size={"height": 336, "width": 336}),
                   tokenizer=tokenizer(), patch_size=14, vision_feature_select_strategy="default",
                   image_token="<image>", num_additional_image_tokens=1).save_pretrained(folder)
    Image.fromarray((np.random.RandomState(0).rand(480, 640, 3) * 255).astype(np.uint8)).save(picture)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--skip-time", action="store_true")
    args = parser.parse_args()
    env = offline_env()
    text = " ".join(f"w{i}" for i in range(32))
    with tempfile.TemporaryDirectory() as tmp:
        folder, picture = Path(tmp) / "llava", Path(tmp) / "picture.png"
        if not args.skip_time:
            build(folder, picture)
            timed(folder, picture, text, Path(tmp), args.runs, env)
        if not args.skip_memory:
            folder, picture = Path(tmp) / "llava_next", Path(tmp) / "big.png"
            build_next(folder, picture)
            base = peak_mib([sys.executable, "-c", SCRIPT, str(folder), str(picture), text, "eager"], env)
            ours = peak_mib([sys.executable, "-m", "attnviz", "heatmap", text, "--image", str(picture), "--model",
                             str(folder), "--layer", "7", "--head", "all", "--out", str(Path(tmp) / "heat-next.png")],
                            env)
            print("== peak memory: a 2,928-token LLaVA-NeXT picture, heat over it (fresh processes)")
            print(f"   attnviz heatmap --image --out heat.png: {ours:,.0f} MiB")
            print(f"   transformers eager, output_attentions=True: {base:,.0f} MiB")
            print(f"   ratio {ours / base:.2f}x (goal ≤ 0.5x): {'met' if ours / base <= 0.5 else 'NOT met'}")


def timed(folder: Path, picture: Path, text: str, tmp: Path, runs: int, env: dict[str, str]) -> None:
    """The time half (see the module)."""
    base = time_command([sys.executable, "-c", SCRIPT, str(folder), str(picture), text, "sdpa"], runs, env)
    ours = time_command([sys.executable, "-m", "attnviz", "heatmap", text, "--image", str(picture), "--model",
                         str(folder), "--layer", "7", "--head", "all", "--out", str(tmp / "heat.png")], runs, env)
    ratio = report("a 576-token picture on a LLaVA-1.5-shaped model, heat over the picture",
                   "attnviz heatmap --image --out heat.png", ours, "transformers forward, SDPA, no attentions", base,
                   goal="≤ 1.5x")
    print(f"   {'met' if ratio <= 1.5 else 'NOT met'}")


if __name__ == "__main__":
    main()
