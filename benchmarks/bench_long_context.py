"""Head statistics of one very long input on a small LLaMA-family model, within a memory ceiling.

Issue 17's goal: ``attnviz heads --file long.txt`` on a 32,768-token text completes within 4 GiB on
this machine (2 cores, 24 GiB), where transformers cannot even hold one layer's attention
(``[1, heads, T, T]`` float32 is 16 GiB for 4 heads at T = 32,768, and eager attention builds it twice).

The model is a LLaMA config (4 layers, 4 query heads over 2 key/value heads, d=256, RoPE, random
weights saved locally with ``save_pretrained``) and a word-level tokenizer (one word, one token).
Each side runs in a fresh process under an address-space limit (``RLIMIT_AS``, default 4 GiB for
attnviz); peak RSS is read from the kernel. The baseline is what a user writes by hand: transformers
``output_attentions=True``, under a 20 GiB limit so that its failure is a clean error, not the
machine's out-of-memory killer.

Run: python benchmarks/bench_long_context.py [--length 32768] [--limit-gib 4] [--skip-baseline]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import offline_env
from bench_long import BASELINE, WORDS  # the same hand-written transformers script, the same words

# Runs one command in a child process under an address-space limit; reports wall time, peak RSS, exit status.
WRAPPER = r"""
import json, resource, subprocess, sys, time
limit, sink = int(sys.argv[1]), sys.argv[2]
def cap():
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
start = time.perf_counter()
with open(sink, "w") as stdout:
    done = subprocess.run(sys.argv[3:], stdout=stdout, stderr=subprocess.PIPE, text=True, preexec_fn=cap)
elapsed = time.perf_counter() - start
print(json.dumps({"seconds": elapsed, "peak_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
                  "rc": done.returncode, "error": done.stderr.strip().splitlines()[-1][:300] if done.stderr.strip() else ""}))
"""



def build(folder: Path, length: int, heads: int = 4) -> None:
    """A small LLaMA (GQA: ``heads`` query heads over 2 key/value heads, RoPE) with random weights, and a
    word-level tokenizer."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaModel, PreTrainedTokenizerFast

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=WORDS + 2, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                         num_attention_heads=heads, num_key_value_heads=2, max_position_embeddings=length,
                         bos_token_id=WORDS, eos_token_id=WORDS + 1)
    LlamaModel(config).save_pretrained(folder, safe_serialization=True)
    vocab = {f"w{i}": i for i in range(WORDS)} | {"<s>": WORDS, "</s>": WORDS + 1}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="</s>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>").save_pretrained(folder)


def measure(limit: int, args: list[str], env: dict[str, str], stdout: str = os.devnull) -> dict:
    out = subprocess.run([sys.executable, "-c", WRAPPER, str(limit), stdout, *args], capture_output=True, text=True,
                         env=env)
    if out.returncode != 0:
        sys.exit(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--length", type=int, default=32768)
    parser.add_argument("--limit-gib", type=float, default=4.0, help="attnviz's address-space ceiling (default 4)")
    parser.add_argument("--skip-baseline", action="store_true", help="do not try transformers")
    parser.add_argument("--skip-attnviz", action="store_true", help="only try transformers")
    args = parser.parse_args()
    env = offline_env()
    with tempfile.TemporaryDirectory() as tmp:
        folder, text = Path(tmp) / "llama-small", Path(tmp) / "long.txt"
        build(folder, args.length)
        text.write_text(" ".join(f"w{i % WORDS}" for i in range(args.length)) + "\n", encoding="utf-8")
        out = Path(tmp) / "heads.json"
        ours = None if args.skip_attnviz else measure(
            int(args.limit_gib * 2**30), [sys.executable, "-m", "attnviz", "heads", "--file", str(text), "--model",
                                          str(folder), "--format", "json"], env, str(out))
        rows = len(json.loads(out.read_text())["heads"]) if ours is not None and ours["rc"] == 0 else 0
        base = None if args.skip_baseline else measure(
            20 * 2**30, [sys.executable, "-c", BASELINE, str(folder), str(text)], env)
    layer_gib = 4 * args.length**2 * 4 / 2**30
    print(f"== one text of {args.length:,} tokens, LLaMA config (4 layers, 4 heads over 2 KV heads, d=256); "
          f"one layer's attention is {layer_gib:.1f} GiB of float32")
    if ours is not None:
        state = "ok" if ours["rc"] == 0 else f"FAILED ({ours['error']})"
        within = "within" if ours["rc"] == 0 and ours["peak_mib"] <= args.limit_gib * 1024 else "NOT within"
        print(f"   attnviz heads --file      {ours['seconds']:8.1f} s   peak {ours['peak_mib']:7.0f} MiB   {state}, "
              f"{rows} head rows; {within} the {args.limit_gib:g} GiB goal")
    if base is not None:
        state = "ok" if base["rc"] == 0 else f"fails: {base['error']}"
        print(f"   transformers (20 GiB cap) {base['seconds']:8.1f} s   peak {base['peak_mib']:7.0f} MiB   {state}")


if __name__ == "__main__":
    main()
