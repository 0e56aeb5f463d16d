"""attnviz kv and attnviz patterns against one `attnviz heads` run on the same long prompt (issue 44).

The model is bench_needle's small LLaMA (4 layers, 8 query heads over 2 key/value heads, d=256, RoPE, random
weights saved locally) with a word-level tokenizer; the prompt is random words in sentences. Every side is the
command a user runs, in a fresh process, model loading included; medians of ``--runs``.

1. A sweep of 5 policies × 6 budgets at 8,192 tokens (``attnviz kv --question …``, end to end: every cut applied
   to a real cache) against ``attnviz heads`` on the same text. Goal: ≤ 1.5× (issue 51).
2. ``attnviz patterns`` at 8,192 tokens against the same ``heads`` run. Goal: ≤ 1.2×.
3. Peak memory: ``attnviz kv`` (one policy, one budget, end to end) against ``attnviz heads`` on a SmolLM-135M-shaped
   LLaMA (30 layers, 9 query heads over 3 key/value heads, d=576; random weights, a word-level vocabulary, ~106 M
   parameters, 425 MB) and 1,024 tokens. Goal: ≤ 1.25× (one model held, not two).
4. One policy at one budget at 32,768 tokens under an address-space limit (``RLIMIT_AS``, default 4 GiB).

The peak memory of each side is the median of ``--memory-runs`` fresh processes taking turns (``heads``' own peak
moves by ±60 MiB from run to run); ``--skip-timing`` leaves out parts 1 and 2.

Run: python benchmarks/bench_kv.py [--runs 3] [--length 8192] [--long 32768] [--skip-long] [--skip-memory]
     [--skip-timing] [--memory-runs 3]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
from pathlib import Path

from _common import offline_env, peak_mib, report, report_limited, time_command
from bench_needle import WORDS, build

POLICIES = "streaming,h2o,snapkv,tova,pyramidkv"
BUDGETS = "64,128,256,512,1024,2048"
QUESTION = "Question: w7 w8 w9 ?"


def text(path: Path, tokens: int) -> None:
    rng = random.Random(0)
    words: list[str] = []
    while len(words) < tokens - 8:
        words += [f"w{rng.randrange(20, 1000)}" for _ in range(rng.randrange(6, 14))] + ["."]
    path.write_text(" ".join(words[: tokens - 8]), encoding="utf-8")


def build_smol(folder: Path, tokenizer_from: Path) -> None:
    """SmolLM-135M's attention and widths (30 layers, 9 heads over 3, d=576, MLP 1,536), random weights, with
    bench_needle's word-level tokenizer."""
    import shutil

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=WORDS + 4, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                         num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=2048,
                         bos_token_id=WORDS, eos_token_id=WORDS + 1, tie_word_embeddings=True)
    LlamaForCausalLM(config).save_pretrained(folder, safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (tokenizer_from / name).exists():
            shutil.copy(tokenizer_from / name, folder / name)


def timings(attnviz: list[str], model: list[str], prompt: Path, runs: int, length: int, env: dict[str, str]) -> None:
    """Parts 1 and 2: the sweep and patterns against one heads run."""
    heads = time_command([*attnviz, "heads", "--text-file", str(prompt), *model, "--format", "json"], runs, env)
    sweep = time_command([*attnviz, "kv", "--text-file", str(prompt), *model, "--question", QUESTION, "--policy",
                          POLICIES, "--budget", BUDGETS, "-n", "8", "--format", "json"], runs, env)
    ratio = report(f"kv: 5 policies × 6 budgets at {length:,} tokens, end to end", "attnviz kv (the sweep)",
                   sweep, "attnviz heads (one run)", heads, goal="≤ 1.5x")
    print(f"   {'met' if ratio <= 1.5 else 'NOT met'}")
    found = time_command([*attnviz, "patterns", "--text-file", str(prompt), *model, "--budget", "0.1",
                          "--format", "json"], runs, env)
    ratio = report(f"patterns at {length:,} tokens", "attnviz patterns", found, "attnviz heads (one run)",
                   heads, goal="≤ 1.2x")
    print(f"   {'met' if ratio <= 1.2 else 'NOT met'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--length", type=int, default=8192)
    parser.add_argument("--long", type=int, default=32768)
    parser.add_argument("--limit-gib", type=float, default=4.0)
    parser.add_argument("--skip-long", action="store_true")
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--skip-timing", action="store_true", help="leave out the sweep's and patterns' times")
    parser.add_argument("--memory-runs", type=int, default=3, help="fresh processes per side for the peak memory")
    args = parser.parse_args()
    env = offline_env()
    attnviz = [sys.executable, "-m", "attnviz"]
    with tempfile.TemporaryDirectory() as tmp:
        folder, prompt, long = Path(tmp) / "llama", Path(tmp) / "prompt.txt", Path(tmp) / "long.txt"
        build(folder, args.long + 64)
        text(prompt, args.length)
        model = ["--model", str(folder)]
        if not args.skip_timing:
            timings(attnviz, model, prompt, args.runs, args.length, env)
        if not args.skip_memory:
            smol, short = Path(tmp) / "smol", Path(tmp) / "short.txt"
            build_smol(smol, folder)
            text(short, 1024)
            on = ["--text-file", str(short), "--model", str(smol)]
            bases, ours = [], []
            for _ in range(args.memory_runs):  # the two sides take turns
                bases.append(peak_mib([*attnviz, "heads", *on, "--format", "json"], env))
                ours.append(peak_mib([*attnviz, "kv", *on, "--question", QUESTION, "--policy", "snapkv", "--budget",
                                      "256", "-n", "4", "--format", "json"], env))
            base, mine = statistics.median(bases), statistics.median(ours)
            print(f"== peak memory on a SmolLM-135M-shaped LLaMA, 1,024 tokens, medians of {args.memory_runs} runs")
            print(f"   attnviz kv (end to end)   {mine:8.0f} MiB   ({', '.join(f'{m:.0f}' for m in ours)})")
            print(f"   attnviz heads             {base:8.0f} MiB   ({', '.join(f'{m:.0f}' for m in bases)})")
            print(f"   ratio (ours / baseline): {mine / base:.2f}x   goal: ≤ 1.25x\n   "
                  f"{'met' if mine / base <= 1.25 else 'NOT met'}")
        if not args.skip_long:
            text(long, args.long)
            report_limited(f"kv, one policy at one budget, {args.long:,} tokens",
                           [*attnviz, "kv", "--text-file", str(long), *model, "--question", QUESTION, "--policy",
                            "snapkv", "--budget", "2048", "-n", "8", "--format", "json"], args.limit_gib, env)


if __name__ == "__main__":
    main()
