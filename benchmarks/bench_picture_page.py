"""``attnviz view TEXT --image P --page x.html`` of a ≈10,000-token prompt (issue 59, item 5): peak memory and time,
held to the long-text page's budgets (≤ 4 GiB, ≤ 60 s), and the tui's picture loading (``tui --image``: what its
worker holds after reading the text beside the picture).

The model: LLaVA-NeXT-shaped (transformers' own ``LlavaNextForConditionalGeneration``, random weights saved
locally): LLaVA-1.5's vision tower shape (336 pixels, 14-pixel patches; narrow: 4 layers, d=64) and the long-text
page's language model (``bench_view_long.py``: a LLaMA of ``--layers`` layers, 8 query heads over 2 key/value heads,
d=256), any-resolution pinpoints up to 1,344 × 1,344. A 1,344 × 1,344 picture makes 9,888 image tokens (the 576-token
base grid, a 96 × 96 canvas and its 96 newlines); beside 129 words, the prompt is 10,017 tokens. A word-level
tokenizer with the image token.

Each command runs as a user runs it, in a fresh process under an address-space limit (``RLIMIT_AS``; 4 GiB for
attnviz, 24 GiB for ``--before``), its wall time, CPU time (user + system) and peak RSS read from the kernel
(``getrusage`` of the child), and the machine's load average as it ends (on 2 shared cores, a load over 2 stretches
the wall time, not the CPU time); ``--runs`` runs each, medians and the spread printed. ``--before CHECKOUT``: the same commands from another checkout
of attnviz (``git worktree add /tmp/before COMMIT``), with the same Python.

Run: python benchmarks/bench_picture_page.py [--runs 3] [--layers 4] [--words 129] [--before /tmp/before]
     [--skip-expand] [--skip-tui]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import NEUTRAL, offline_env

# Runs argv[2:] under RLIMIT_AS argv[1] bytes; prints its wall seconds, CPU seconds (user + system), exit code, peak
# RSS, the load average over the run's last minute and its last stderr line, as JSON.
LIMITED = r"""
import json, os, resource, subprocess, sys, time
limit = int(sys.argv[1])
def cap():
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
start = time.perf_counter()
done = subprocess.run(sys.argv[2:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=cap)
used = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"seconds": time.perf_counter() - start, "cpu": used.ru_utime + used.ru_stime, "rc": done.returncode,
                  "peak_mib": used.ru_maxrss / 1024, "load": os.getloadavg()[0],
                  "error": done.stderr.strip().splitlines()[-1][:300] if done.stderr.strip() else ""}))
"""

# The tui's picture loading as ``attnviz tui TEXT --image P --model M`` does it (cli/images.py's picture_explorer),
# on its worker, then the picture view drawn once: what the app holds for the text.
TUI = r"""
import sys
from types import SimpleNamespace
from attnviz.cli.images import picture_explorer
folder, picture, text = sys.argv[1], sys.argv[2], sys.argv[3]
options = SimpleNamespace(model=folder, device="cpu", revision=None, trust_remote_code=False, engine="fused")
explorer = picture_explorer(options, text, [__import__("pathlib").Path(picture)], reading=None).load()
explorer.compute(text)
explorer.draw(100, False)  # view 1, the matrix the app opens on
explorer.view = "picture"
explorer.draw(100, False)
print(tuple(explorer.full.attentions.shape), tuple(explorer.result.attentions.shape))
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


def build(folder: Path, picture: Path, layers: int) -> None:
    """The LLaVA-NeXT-shaped model and a 1,344 × 1,344 picture (see the module)."""
    import numpy as np
    import torch
    import transformers
    from PIL import Image
    from transformers import (
        CLIPVisionConfig,
        LlamaConfig,
        LlavaNextConfig,
        LlavaNextForConditionalGeneration,
        LlavaNextImageProcessor,
        LlavaNextProcessor,
    )

    transformers.logging.set_verbosity_error()
    vision = CLIPVisionConfig(image_size=336, patch_size=14, hidden_size=64, num_hidden_layers=4,
                              num_attention_heads=4, intermediate_size=128, projection_dim=64)
    text = LlamaConfig(vocab_size=504, hidden_size=256, intermediate_size=512, num_hidden_layers=layers,
                       num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=16384)
    pinpoints = [[336, 672], [672, 336], [672, 672], [1344, 1344]]
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
    Image.fromarray((np.random.RandomState(0).rand(1344, 1344, 3) * 255).astype(np.uint8)).save(picture)


def run(args: list[str], limit_gib: float, env: dict[str, str]) -> dict[str, object]:
    """One fresh process under ``RLIMIT_AS``: its seconds, exit code, peak RSS (MiB) and last line of stderr."""
    out = subprocess.run([sys.executable, "-c", LIMITED, str(int(limit_gib * 2**30)), *args], capture_output=True,
                         text=True, env=env, cwd=NEUTRAL)
    return json.loads(out.stdout.strip().splitlines()[-1])


def series(name: str, args: list[str], runs: int, limit_gib: float, env: dict[str, str]) -> None:
    """``runs`` runs of a command; medians and spread printed (or the failure)."""
    got = [run(args, limit_gib, env) for _ in range(runs)]
    failed = [g for g in got if g["rc"]]
    if failed:
        print(f"   {name:<40} FAILED in {len(failed)} of {runs} runs: {failed[0]['error']} "
              f"(peak {failed[0]['peak_mib']:.0f} MiB, {failed[0]['seconds']:.1f} s)")
        return
    seconds = [float(g["seconds"]) for g in got]
    cpu = [float(g["cpu"]) for g in got]
    peaks = [float(g["peak_mib"]) for g in got]
    load = [float(g["load"]) for g in got]
    met = max(peaks) <= limit_gib * 1024 and statistics.median(seconds) <= 60
    print(f"   {name:<40} {statistics.median(seconds):6.1f} s ({min(seconds):.1f}–{max(seconds):.1f}), CPU "
          f"{statistics.median(cpu):.1f} s ({min(cpu):.1f}–{max(cpu):.1f})   peak {statistics.median(peaks):6.0f} MiB "
          f"({min(peaks):.0f}–{max(peaks):.0f})   load {min(load):.1f}–{max(load):.1f}   within {limit_gib:g} GiB and "
          f"60 s: {'met' if met else 'NOT met'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--layers", type=int, default=4, help="the language model's layers (default 4)")
    parser.add_argument("--words", type=int, default=129, help="words beside the picture (default 129: 10,017 tokens)")
    parser.add_argument("--limit-gib", type=float, default=4.0, help="attnviz's address-space ceiling (default 4)")
    parser.add_argument("--before", type=Path, default=None, help="another checkout of attnviz, run the same way")
    parser.add_argument("--before-limit-gib", type=float, default=24.0)
    parser.add_argument("--skip-expand", action="store_true")
    parser.add_argument("--skip-tui", action="store_true")
    parser.add_argument("--skip-now", action="store_true", help="run only --before")
    args = parser.parse_args()
    env = {**offline_env(), "PYTHONWARNINGS": "ignore"}
    text = " ".join(f"w{i % 500}" for i in range(args.words))
    with tempfile.TemporaryDirectory() as tmp:
        folder, picture = Path(tmp) / "llava_next", Path(tmp) / "picture.png"
        build(folder, picture, args.layers)
        tokens = 9_888 + args.words
        print(f"== a {tokens:,}-token prompt (9,888 image tokens), LLaVA-NeXT-shaped, {args.layers} layers × 8 heads; "
              f"medians of {args.runs} fresh processes (min–max)")
        sides = [] if args.skip_now else [("now", {}, args.limit_gib)]
        if args.before is not None:
            sides.append((f"before ({args.before})", {"PYTHONPATH": str(args.before.resolve())},
                          args.before_limit_gib))
        for side, extra, limit in sides:
            print(f"-- {side}")
            view = [sys.executable, "-m", "attnviz", "view", text, "--image", str(picture), "--model", str(folder),
                    "--page", str(Path(tmp) / "page.html")]
            series("view --image", view, args.runs, limit, {**env, **extra})
            page = Path(tmp) / "page.html"
            if page.exists():
                print(f"   {'':<40} page {page.stat().st_size / 1e6:.1f} MB")
            if not args.skip_expand:
                series("view --image --expand-images", [*view, "--expand-images"], args.runs, limit, {**env, **extra})
            if not args.skip_tui:
                series("tui --image (the text read, view 8 drawn)",
                       [sys.executable, "-c", TUI, str(folder), str(picture), text], args.runs, limit,
                       {**env, **extra})


if __name__ == "__main__":
    main()
