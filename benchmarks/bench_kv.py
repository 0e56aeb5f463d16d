"""attnviz kv and attnviz patterns against one `attnviz heads` run on the same long prompt (issue 44).

The model is bench_needle's small LLaMA (4 layers, 8 query heads over 2 key/value heads, d=256, RoPE, random
weights saved locally) with a word-level tokenizer; the prompt is random words in sentences. Every side is the
command a user runs, in a fresh process, model loading included; medians of ``--runs``.

1. A sweep of 5 policies × 6 budgets at 8,192 tokens (``attnviz kv --question …``, end to end: every cut applied
   to a real cache) against ``attnviz heads`` on the same text. Goal: ≤ 2×.
2. ``attnviz patterns`` at 8,192 tokens against the same ``heads`` run. Goal: ≤ 1.5×.
3. One policy at one budget at 32,768 tokens under an address-space limit (``RLIMIT_AS``, default 4 GiB).

Run: python benchmarks/bench_kv.py [--runs 3] [--length 8192] [--long 32768] [--skip-long]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path

from _common import offline_env, report, report_limited, time_command
from bench_needle import build

POLICIES = "streaming,h2o,snapkv,tova,pyramidkv"
BUDGETS = "64,128,256,512,1024,2048"
QUESTION = "Question: w7 w8 w9 ?"


def text(path: Path, tokens: int) -> None:
    rng = random.Random(0)
    words: list[str] = []
    while len(words) < tokens - 8:
        words += [f"w{rng.randrange(20, 1000)}" for _ in range(rng.randrange(6, 14))] + ["."]
    path.write_text(" ".join(words[: tokens - 8]), encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--length", type=int, default=8192)
    parser.add_argument("--long", type=int, default=32768)
    parser.add_argument("--limit-gib", type=float, default=4.0)
    parser.add_argument("--skip-long", action="store_true")
    args = parser.parse_args()
    env = offline_env()
    attnviz = [sys.executable, "-m", "attnviz"]
    with tempfile.TemporaryDirectory() as tmp:
        folder, prompt, long = Path(tmp) / "llama", Path(tmp) / "prompt.txt", Path(tmp) / "long.txt"
        build(folder, args.long + 64)
        text(prompt, args.length)
        model = ["--model", str(folder)]
        heads = time_command([*attnviz, "heads", "--text-file", str(prompt), *model, "--format", "json"], args.runs, env)
        sweep = time_command([*attnviz, "kv", "--text-file", str(prompt), *model, "--question", QUESTION, "--policy",
                              POLICIES, "--budget", BUDGETS, "-n", "8", "--format", "json"], args.runs, env)
        ratio = report(f"kv: 5 policies × 6 budgets at {args.length:,} tokens, end to end", "attnviz kv (the sweep)",
                       sweep, "attnviz heads (one run)", heads, goal="≤ 2x")
        print(f"   {'met' if ratio <= 2.0 else 'NOT met'}")
        found = time_command([*attnviz, "patterns", "--text-file", str(prompt), *model, "--budget", "0.1",
                              "--format", "json"], args.runs, env)
        ratio = report(f"patterns at {args.length:,} tokens", "attnviz patterns", found, "attnviz heads (one run)",
                       heads, goal="≤ 1.5x")
        print(f"   {'met' if ratio <= 1.5 else 'NOT met'}")
        if not args.skip_long:
            text(long, args.long)
            report_limited(f"kv, one policy at one budget, {args.long:,} tokens",
                           [*attnviz, "kv", "--text-file", str(long), *model, "--question", QUESTION, "--policy",
                            "snapkv", "--budget", "2048", "-n", "8", "--format", "json"], args.limit_gib, env)


if __name__ == "__main__":
    main()
