"""The fused engine (issue 30): ``attnviz heads --file`` on a family the native engine does not run, against
the floor (a bare process that loads the model with transformers' SDPA attention and runs one forward pass)
and against eager attention with ``output_attentions=True`` (what a user writes by hand, and what the ``hf``
engine ran before).

The model is the issue's Qwen3 shape: 4 layers, 8 query heads over 2 key/value heads, hidden size 256
(head_dim 32), q/k norms, RoPE, random weights saved locally; a word-level tokenizer (one word, one token).
Every side is a fresh process as a user runs it (imports, loading, tokenizing, the forward, output), its
peak RSS read from the kernel; each is run ``--repeat`` times, interleaved, and the medians are compared.

With ``--long N`` it also runs ``heads --file`` on N tokens (default 32,768) of a Gemma-3-shaped model (4
layers, 8 query heads over 2 key/value heads, head_dim 32, q/k norms, sliding windows of 512 on three
layers, the fourth global) under a 4 GiB address-space limit, where eager attention cannot hold one layer.

Goals (issue 30): time ≤ 1.5× the SDPA floor; peak memory ≤ 0.25× the eager forward's; 32,768 tokens on
the Gemma-3 shape within 4 GiB.

Run: python benchmarks/bench_fused.py [--length 4096] [--repeat 3] [--long 32768]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from _common import offline_env
from bench_long import WORDS
from bench_long_context import measure

# The floor and the hand-written eager script: load, tokenize, one forward pass, nothing kept.
FORWARD = r"""
import sys, torch
from transformers import AutoModel, AutoTokenizer
folder, text, how = sys.argv[1], sys.argv[2], sys.argv[3]
tokenizer = AutoTokenizer.from_pretrained(folder)
model = AutoModel.from_pretrained(folder, attn_implementation="sdpa" if how == "sdpa" else "eager",
                                  dtype=torch.float32).eval()
ids = tokenizer(open(text, encoding="utf-8").read(), return_tensors="pt")
with torch.no_grad():
    out = model(**ids, output_attentions=how == "eager")
print(out.last_hidden_state.shape, len(out.attentions or ()) if how == "eager" else 0)
"""


def build(folder: Path, kind: str, length: int) -> None:
    import torch
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    torch.manual_seed(0)
    common = {"vocab_size": WORDS + 2, "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4,
              "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 32,
              "max_position_embeddings": length, "bos_token_id": WORDS, "eos_token_id": WORDS + 1}
    if kind == "qwen3":
        config = transformers.Qwen3Config(**common)
        model = transformers.Qwen3Model(config)
    else:
        config = transformers.Gemma3TextConfig(**common, sliding_window=512, pad_token_id=WORDS + 1,
                                               layer_types=["sliding_attention"] * 3 + ["full_attention"])
        model = transformers.Gemma3TextModel(config)
    model.save_pretrained(folder, safe_serialization=True)
    vocab = {f"w{i}": i for i in range(WORDS)} | {"<s>": WORDS, "</s>": WORDS + 1}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="</s>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>").save_pretrained(folder)


def heads(folder: Path, text: Path, engine: str) -> list[str]:
    return [sys.executable, "-m", "attnviz", "heads", "--file", str(text), "--model", str(folder), "--engine", engine,
            "--format", "json"]


def report(runs: dict[str, list[dict]], rows: int) -> None:
    median = {name: (statistics.median(r["seconds"] for r in rs), statistics.median(r["peak_mib"] for r in rs))
              for name, rs in runs.items()}
    for name, (seconds, peak) in median.items():
        print(f"   {name:32s} {seconds:7.2f} s   peak {peak:7.0f} MiB")
    ours, floor, eager = median["attnviz heads (auto: fused)"], median["bare SDPA forward (floor)"], \
        median["bare eager, output_attentions"]
    before = median["attnviz heads --engine hf"]
    print(f"   fused/floor time {ours[0] / floor[0]:.2f}× (goal ≤ 1.5×); fused/eager-forward peak "
          f"{ours[1] / eager[1]:.2f}× (goal ≤ 0.25×); fused/hf engine {ours[0] / before[0]:.2f}× time, "
          f"{ours[1] / before[1]:.2f}× peak; {rows} head rows")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--length", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--long", type=int, nargs="?", const=32768, default=None,
                        help="also the Gemma-3 shape at this many tokens (default 32,768) within 4 GiB")
    parser.add_argument("--skip-short", action="store_true", help="only the --long run")
    args = parser.parse_args()
    env = offline_env()
    unlimited = 64 * 2**30
    with tempfile.TemporaryDirectory() as tmp:
        folder, text, out = Path(tmp) / "qwen3-small", Path(tmp) / "text.txt", Path(tmp) / "heads.json"
        build(folder, "qwen3", args.length)
        text.write_text(" ".join(f"w{i % WORDS}" for i in range(args.length)) + "\n", encoding="utf-8")
        sides = {
            "attnviz heads (auto: fused)": heads(folder, text, "auto"),
            "attnviz heads --engine hf": heads(folder, text, "hf"),
            "bare SDPA forward (floor)": [sys.executable, "-c", FORWARD, str(folder), str(text), "sdpa"],
            "bare eager, output_attentions": [sys.executable, "-c", FORWARD, str(folder), str(text), "eager"],
        }
        runs: dict[str, list[dict]] = {name: [] for name in sides}
        for _ in range(0 if args.skip_short else args.repeat):
            for name, command in sides.items():
                result = measure(unlimited, command, env, str(out) if name.startswith("attnviz heads (") else os.devnull)
                if result["rc"] != 0:
                    sys.exit(f"{name} failed: {result['error']}")
                runs[name].append(result)
        rows = len(json.loads(out.read_text())["heads"]) if out.exists() else 0
        if not args.skip_short:
            print(f"== heads --file, one text of {args.length:,} tokens, Qwen3 shape (4 layers, 8 heads over 2 KV heads, "
              f"hidden 256, head_dim 32); medians of {args.repeat} fresh processes each")
            report(runs, rows)
        if args.long:
            long_folder, long_text = Path(tmp) / "gemma3-small", Path(tmp) / "long.txt"
            build(long_folder, "gemma3", args.long)
            long_text.write_text(" ".join(f"w{i % WORDS}" for i in range(args.long)) + "\n", encoding="utf-8")
            result = measure(4 * 2**30, heads(long_folder, long_text, "auto"), env, str(out))
            state = "ok" if result["rc"] == 0 else f"FAILED ({result['error']})"
            within = "within" if result["rc"] == 0 and result["peak_mib"] <= 4096 else "NOT within"
            print(f"== heads --file, {args.long:,} tokens, Gemma-3 shape (sliding windows of 512 on 3 layers, "
                  f"the 4th global; q/k norms), 4 GiB address-space limit")
            print(f"   attnviz heads (auto: fused)      {result['seconds']:7.1f} s   peak {result['peak_mib']:7.0f} MiB"
                  f"   {state}; {within} 4 GiB")


if __name__ == "__main__":
    main()
