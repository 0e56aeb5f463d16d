"""The atlas page of a corpus (issue 32): ``attnviz atlas EXPORT --out atlas.html`` from an export's Parquet
tables of 1,000 sentences, against that export itself (the work that made the tables), each a fresh process.

Goals (issue 32): an atlas of 1,000 sentences from their Parquet ≤ 10 s and ≤ 15 MB.
Run: python benchmarks/bench_atlas.py [--texts 1000] [--runs 3]
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
        corpus, out, page = corpus_file(Path(tmp), args.texts), Path(tmp) / "out", Path(tmp) / "atlas.html"
        export, atlas = [], []
        for _ in range(args.runs):
            shutil.rmtree(out, ignore_errors=True)
            export += time_command(parquet_export(corpus, out), 1, env)
            atlas += time_command([PY, "-m", "attnviz", "atlas", str(out), "--out", str(page)], 1, env)
        size = page.stat().st_size / 1e6
    report(f"{args.texts} sentences, default model; the page is {size:.2f} MB (goal <= 15 MB)",
           "attnviz atlas EXPORT --out atlas.html", atlas, "attnviz export --formats parquet", export,
           goal="<= 10 s (absolute)")


if __name__ == "__main__":
    main()
