"""(issue 17) `attnviz export` of 30 sentences as labelled PNG figures (the default grid per layer, 6 layers of
the default model: 180 figures) against one cold `attnviz heatmap TEXT --head all --out x.png` (every head of
every layer in one figure), both as a user runs them, each in a fresh process, measured in the same run.

The export runs with its defaults (``--formats png``, ``--style figure``, ``--jobs 2``) and ``--quiet``.
The ratio is export / one heatmap, of the medians of ``--runs`` runs (sides interleaved, so a busy moment
of the machine hits both). Goal: ≤ 8×.
Run: python benchmarks/bench_export_figures.py [--runs N] [--n 30] [--jobs J]
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
from pathlib import Path

from _common import PY, report, time_command

WORDS = ["the", "cat", "dog", "sat", "ran", "on", "over", "mat", "log", "quick", "brown", "fox", "jumps", "lazy",
         "attention", "is", "all", "you", "need", "model", "head", "layer", "token", "river", "bank", "money",
         "ocean", "light", "dark"]
SENTENCE = "The cat sat on the mat while the dog slept by the door."


def sentences(n: int) -> list[str]:
    """``n`` sentences of 6 to 24 words, the same every run."""
    rng = random.Random(0)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 24))).capitalize() + "." for _ in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=30, help="sentences")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=None, help="export's --jobs (default: export's own default)")
    parser.add_argument("--before", type=Path, default=None,
                        help="a checkout of attnviz (its root) to time the export from as well, in the same run")
    args = parser.parse_args()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        texts = root / "texts.txt"
        texts.write_text("\n".join(sentences(args.n)) + "\n", encoding="utf-8")
        jobs = [] if args.jobs is None else ["--jobs", str(args.jobs)]
        heatmap, export, before = [], [], []
        for r in range(args.runs):
            heatmap += time_command([PY, "-m", "attnviz", "heatmap", SENTENCE, "--head", "all",
                                     "--out", str(root / f"x{r}.png")], 1, env)
            out = root / f"export{r}"
            export += time_command([PY, "-m", "attnviz", "export", str(texts), "--out", str(out),
                                    "--formats", "png", "--quiet", *jobs], 1, env)
            drawn = len(list(out.glob("*.png")))
            assert drawn == args.n * 6, f"export drew {drawn} figures, expected {args.n * 6}"
            if args.before is not None:
                before += time_command([PY, "-m", "attnviz", "export", str(texts), "--out", str(root / f"before{r}"),
                                        "--formats", "png", "--quiet", *jobs], 1,
                                       {**env, "PYTHONPATH": str(args.before.resolve())})
    report(f"export of {args.n} sentences as labelled PNG figures ({args.n * 6}), against one heatmap",
           f"attnviz export --formats png ({args.n} texts)", export,
           "attnviz heatmap --head all --out x.png", heatmap, goal="<= 8x")
    if before:
        report("the same export, before", f"export from {args.before}", before,
               "attnviz heatmap --head all --out x.png", heatmap, goal="(for comparison)")


if __name__ == "__main__":
    main()
