"""Head importance over a corpus (issue 32): ``attnviz heads --file TEXTS --importance`` on 1,000 sentences
with the default model, against ``attnviz export`` of the same texts as Parquet statistics.

The default model (all-MiniLM-L6-v2) is a sentence encoder without a language-model head, so its loss is
``1 − cos`` of each text's mean-pooled embedding with that of a second text (``--vs``). Importance runs a
forward and a backward pass per batch of 8 texts, the export a forward pass with every layer's statistics.
Both sides run as a user runs them, in a fresh process each time, alternating.

Goal (issue 32): importance ≤ 3× the time of the export of the same texts.
Run: python benchmarks/bench_importance.py [--texts 1000] [--runs 3]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from _common import PY, offline_env, report, time_command
from bench_corpus import corpus_file, parquet_export


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--texts", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    env = offline_env()
    with tempfile.TemporaryDirectory() as tmp:
        corpus, out = corpus_file(Path(tmp), args.texts), Path(tmp) / "out"
        ours, export = [], []
        for _ in range(args.runs):
            ours += time_command([PY, "-m", "attnviz", "heads", "--file", str(corpus), "--importance", "--vs",
                                  "A sentence about the city and its river.", "--format", "json"], 1, env)
            shutil.rmtree(out, ignore_errors=True)  # a rerun would skip every finished text
            export += time_command(parquet_export(corpus, out), 1, env)
    report(f"{args.texts} sentences, default model", "attnviz heads --importance (and the statistics)", ours,
           "attnviz export --formats parquet", export, goal="<= 3x the export's time")


if __name__ == "__main__":
    main()
