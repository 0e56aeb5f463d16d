"""The atlas of a corpus of 10^5 texts from its export (issue 32: "a corpus of 10^5 texts exported on Ray or a
Slurm array works"), and the checkpoint diff of two such exports, each a fresh process, against a fresh
process that only reads both tables with pyarrow and takes one group-by mean (the least any tool must do).

The two exports are made here: a real export of 200 sentences with the default model, its rows repeated
to ``--texts`` texts with seeded noise (each text a new ``text_index`` and hash), and a copy of it with one
head's statistics shifted (a planted change, which must rank first).
Run: python benchmarks/bench_atlas_scale.py [--texts 100000] [--runs 2]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from pathlib import Path

import numpy as np
from _common import PY, offline_env, report, time_command
from bench_corpus import corpus_file, parquet_export

PLANTED = (4, 7)


def tiled(real: Path, out: Path, texts: int, seed: int, planted: bool) -> None:
    """``real``'s tables repeated to ``texts`` texts with noise (and, if ``planted``, one head shifted)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    heads, names = pq.read_table(real / "heads.parquet"), pq.read_table(real / "texts.parquet")
    base = heads.num_rows // names.num_rows  # rows per text
    repeats = -(-texts // names.num_rows)
    rng = np.random.default_rng(seed)
    columns = {}
    for name in heads.column_names:
        column = heads[name]
        if name == "text_index":
            index = np.tile(column.to_numpy(), repeats) + np.repeat(np.arange(repeats) * names.num_rows,
                                                                    heads.num_rows)
            columns[name] = pa.array(index[: texts * base])
        elif pa.types.is_floating(column.type):
            values = np.tile(column.to_numpy(), repeats)[: texts * base]
            values = values + rng.normal(0, 0.01, values.shape)
            if planted and name == "entropy":
                layer, head = np.tile(heads["layer"].to_numpy(), repeats), np.tile(heads["head"].to_numpy(), repeats)
                values[(layer[: texts * base] == PLANTED[0]) & (head[: texts * base] == PLANTED[1])] += 0.5
            columns[name] = pa.array(values.astype(column.type.to_pandas_dtype()))
        else:
            columns[name] = pa.concat_arrays([pc.cast(column, column.type).combine_chunks()] * repeats)[: texts * base]
    out.mkdir(parents=True)
    pq.write_table(pa.table(columns), out / "heads.parquet")
    index = np.arange(texts)
    pq.write_table(pa.table({
        "text_index": pa.array(index), "text_hash": pa.array([f"{i:016x}" for i in index]),
        "text": pa.array([f"text {i}" for i in index]), "n_tokens": pa.array(np.full(texts, 12, dtype=np.int32)),
        "model": pa.array(["tuned" if planted else "base"] * texts)}), out / "texts.parquet")


def peak_mb(args: list[str], env: dict[str, str]) -> tuple[float, str]:
    """Run once more, under a fresh parent of its own, for its output and its peak resident memory (MB)."""
    wrapper = ("import json, resource, subprocess, sys\n"
               "done = subprocess.run(sys.argv[1:], check=True, capture_output=True, text=True)\n"
               "print(json.dumps([resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, done.stdout]))")
    peak, out = json.loads(subprocess.run([PY, "-c", wrapper, *args], check=True, capture_output=True, text=True,
                                          env=env).stdout)
    return peak / 1024, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--texts", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    env = offline_env()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        subprocess.run(parquet_export(corpus_file(root, 200), root / "real"), check=True, env=env)
        tiled(root / "real", root / "base", args.texts, 0, planted=False)
        tiled(root / "real", root / "tuned", args.texts, 1, planted=True)
        read = [PY, "-c", "import sys, pyarrow.parquet as pq\nfor p in sys.argv[1:]:\n    t = pq.read_table(p)\n"
                "    t.group_by(['layer', 'head']).aggregate([('entropy', 'mean')])",
                str(root / "base" / "heads.parquet"), str(root / "tuned" / "heads.parquet")]
        corpus = [PY, "-m", "attnviz", "atlas", str(root / "base"), "--format", "json", "--top", "3"]
        diff = [PY, "-m", "attnviz", "atlas", str(root / "base"), "--vs-model", str(root / "tuned"), "--format", "json",
                "--top", "3"]
        baseline = time_command(read, args.runs, env)
        atlas_times = time_command(corpus, args.runs, env)
        diff_times = time_command(diff, args.runs, env)
        memory, out = peak_mb(diff, env)
        first = json.loads(out)["heads"][0]
    rows = args.texts * 72
    report(f"{args.texts} texts ({rows:,} rows) from an export, default model's shape", "attnviz atlas EXPORT --format json",
           atlas_times, "pyarrow: read both tables, one group-by", baseline, goal="(no goal in the issue; recorded)")
    report(f"the checkpoint diff of two such exports (planted: L{PLANTED[0]} H{PLANTED[1]}; ranked first: "
           f"L{first['layer']} H{first['head']}; peak {memory:.0f} MB)", "attnviz atlas A --vs-model B --format json",
           diff_times, "pyarrow: read both tables, one group-by", baseline, goal="(no goal in the issue; recorded)")


if __name__ == "__main__":
    main()
