"""attnviz needle against the floor it cannot beat: the same greedy answers from transformers with SDPA and no
attention output (issue 43).

1. A grid of 3 lengths × 5 depths up to 4,096 tokens on a small LLaMA-shaped model (4 layers, 8 query heads over
   2 key/value heads, d=256, RoPE, random weights saved locally): the user's command, ``attnviz needle … --format
   json``, against a script that builds the same 15 prompts (attnviz's prompt builder, a few milliseconds) and
   runs ``model.generate`` on each, greedy, ``attn_implementation="sdpa"``, no attentions. Both in fresh
   processes, model loading included; medians of ``--runs``. Goal: ≤ 2×.
2. One run at 32,768 tokens under an address-space limit (``RLIMIT_AS``, default 4 GiB): it must finish; peak RSS
   is read from the kernel.

Run: python benchmarks/bench_needle.py [--runs 3] [--long 32768] [--limit-gib 4] [--skip-long]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from _common import offline_env, report, report_limited, time_command

WORDS = 1000
LENGTHS = "1024,2048,4096"
DEPTHS = "0,0.25,0.5,0.75,1"
NEEDLE = "w7 w8 w9 w10 w11 w12 w13 w14 w15 w16 ."
QUESTION = "Question: w7 w8 ?"
NEW = 20

BASELINE = r"""
import sys, torch
from transformers import AutoModelForCausalLM
from attnviz.generation.stepping import load_stepper
from attnviz.needle.haystack import PromptBuilder
folder, haystack, needle, question, lengths, depths, new = sys.argv[1:8]
_, codec = load_stepper(folder, engine="hf")  # the tokenizer only: the model below is transformers' own
builder = PromptBuilder(codec, haystack=open(haystack).read(), needle=needle, question=question)
model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="sdpa").eval()
with torch.no_grad():
    for length in map(int, lengths.split(",")):
        for depth in map(float, depths.split(",")):
            ids = torch.tensor([builder.build(length, depth).ids])
            model.generate(ids, max_new_tokens=int(new), do_sample=False, pad_token_id=0)
"""


def build(folder: Path, positions: int) -> None:
    """A small LLaMA language model (8 query heads over 2 key/value heads) and a word-level tokenizer."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=WORDS + 4, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                         num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=positions,
                         bos_token_id=WORDS, eos_token_id=WORDS + 1)
    LlamaForCausalLM(config).save_pretrained(folder, safe_serialization=True)
    vocab = {f"w{i}": i for i in range(WORDS)} | {"<s>": WORDS, "</s>": WORDS + 1, ".": WORDS + 2, "?": WORDS + 3}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="</s>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>").save_pretrained(folder)


def haystack(path: Path, sentences: int = 400) -> None:
    import random

    rng = random.Random(0)
    path.write_text(" ".join(" ".join(f"w{rng.randrange(20, WORDS)}" for _ in range(rng.randrange(6, 14))) + " ."
                             for _ in range(sentences)), encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--long", type=int, default=32768, help="the one long run's length (default 32768)")
    parser.add_argument("--limit-gib", type=float, default=4.0)
    parser.add_argument("--skip-long", action="store_true")
    parser.add_argument("--skip-grid", action="store_true")
    args = parser.parse_args()
    env = offline_env()
    attnviz = [sys.executable, "-m", "attnviz"]
    with tempfile.TemporaryDirectory() as tmp:
        folder, hay = Path(tmp) / "llama", Path(tmp) / "haystack.txt"
        build(folder, args.long + 64)
        haystack(hay)
        common = ["--haystack", str(hay), "--needle", NEEDLE, "--question", QUESTION, "-n", str(NEW), "-q"]
        if not args.skip_grid:
            ours = time_command([*attnviz, "needle", "--model", str(folder), "--lengths", LENGTHS, "--depths", DEPTHS,
                                 *common, "--format", "json"], args.runs, env)
            base = time_command([sys.executable, "-c", BASELINE, str(folder), str(hay), NEEDLE, QUESTION, LENGTHS,
                                 DEPTHS, str(NEW)], args.runs, env)
            ratio = report(f"needle grid: lengths {LENGTHS} × depths {DEPTHS}, {NEW} new tokens, 4-layer LLaMA "
                           "(8 heads over 2 KV heads)", "attnviz needle (every head scored)", ours,
                           "transformers generate, SDPA, no attentions", base, goal="≤ 2x")
            print(f"   {'met' if ratio <= 2.0 else 'NOT met'}")
        if not args.skip_long:
            report_limited(f"one needle run at {args.long:,} tokens",
                           [*attnviz, "needle", "--model", str(folder), "--lengths", str(args.long), "--depths", "0.5",
                            *common, "--format", "json"], args.limit_gib, {**env, "OMP_NUM_THREADS": "2"})


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
