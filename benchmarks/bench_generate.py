"""`attnviz generate` on a GPT-2-sized model: the native engine's own key/value cache against the same
command on transformers (`--engine hf`), and against the floor, a hand-written transformers script
that only calls ``generate(output_attentions=True, return_dict_in_generate=True)``.

The model is GPT-2 small's shape (12 layers × 12 heads, d=768, the 50,257-token vocabulary, random
weights saved locally; the head is tied to the embedding), a 64-token prompt, 64 new tokens,
greedy, ``--no-stop-at-eos``. Each side runs in a fresh process, timed whole (start-up, model
load, generation, the terminal output), with its peak RSS.

Run: python benchmarks/bench_generate.py [--runs 3] [--prompt 64] [--new 64]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from _common import offline_env
from bench_long import WORDS, build, measure

BASELINE = r"""
import sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
folder, prompt, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
tokenizer = AutoTokenizer.from_pretrained(folder)
model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
ids = tokenizer(prompt, return_tensors="pt")
with torch.no_grad():
    out = model.generate(**ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, output_attentions=True,
                         return_dict_in_generate=True, pad_token_id=50256)
print(out.sequences.shape, len(out.attentions))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--prompt", type=int, default=64, help="prompt length in tokens")
    parser.add_argument("--new", type=int, default=64, help="tokens to generate")
    args = parser.parse_args()
    env = offline_env()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "gpt2-sized"
        build(folder, 1024)
        prompt = " ".join(f"w{(7 * i) % WORDS}" for i in range(args.prompt))
        command = [sys.executable, "-m", "attnviz", "generate", prompt, "--model", str(folder), "-n", str(args.new),
                   "--no-stop-at-eos", "--width", "120"]
        sides = {
            "transformers generate (script)": [sys.executable, "-c", BASELINE, str(folder), prompt, str(args.new)],
            "attnviz generate --engine hf": [*command, "--engine", "hf"],
            "attnviz generate (native, KV cache)": [*command, "--engine", "native"],
        }
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
        for _ in range(args.runs):
            for name, cmd in sides.items():
                runs[name].append(measure(cmd, env, Path(tmp)))
    med = {name: (statistics.median(r["seconds"] for r in rs), statistics.median(r["peak_mib"] for r in rs))
           for name, rs in runs.items()}
    base_s, base_m = med["transformers generate (script)"]
    print(f"== generate: GPT-2 sized (12x12, d=768, vocab 50257), {args.prompt}-token prompt + {args.new} new tokens, "
          f"greedy, medians of {args.runs} runs")
    for name, (s, m) in med.items():
        print(f"   {name:<40} {s:7.2f} s   peak {m:7.0f} MiB   time {s / base_s:.2f}x   peak RSS {m / base_m:.2f}x")


if __name__ == "__main__":
    main()
