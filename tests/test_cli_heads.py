"""heads, compare-heads and rollout through the CLI, against the library's own numbers."""

from __future__ import annotations

import csv
import io
import json
import re

import numpy as np
import pytest
import torch

import attnviz
from attnviz.analysis import metrics
from attnviz.analysis.heads import head_table
from attnviz.analysis.statistics import STATISTICS
from attnviz.attribution.rollout import rollout

TEXT = "The cat sat on the mat."


def test_heads_json_lists_every_head(run_cli):
    r = run_cli("heads", TEXT, "--format", "json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    result = attnviz.extract(TEXT)
    assert doc["model"] == "all-MiniLM-L6-v2" and doc["text"] == TEXT and doc["n_texts"] == 1
    assert doc["tokens"] == result.tokens
    rows = doc["heads"]
    assert len(rows) == 6 * 12
    assert [(row["layer"], row["head"]) for row in rows] == [(la, h) for la in range(6) for h in range(12)]
    assert set(rows[0]) == {"layer", "head", *STATISTICS, "labels", "sinks"}  # sinks: one text's sink positions
    expected = metrics.entropy(result.attentions)
    assert rows[17]["entropy"] == pytest.approx(float(expected[1, 5]), abs=1e-6)
    assert rows[17]["prev_score"] == pytest.approx(float(metrics.previous_token_score(result.attentions)[1, 5]), abs=1e-6)


def test_heads_csv_sort_and_top(run_cli):
    r = run_cli("heads", TEXT, "--format", "csv", "--sort", "prev_score", "--top", "3")
    assert r.exit_code == 0, r.stderr
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert len(rows) == 3
    scores = [float(row["prev_score"]) for row in rows]
    assert scores == sorted(scores, reverse=True)
    table = head_table([attnviz.extract(TEXT)])
    assert scores[0] == pytest.approx(float(table.stats["prev_score"].max()), abs=1e-6)


def test_heads_file_averages_over_texts(run_cli, tmp_path):
    texts = ["The cat sat on the mat.", "Attention is all you need.", "注意力机制很重要。"]
    path = tmp_path / "texts.txt"
    path.write_text("\n".join(texts) + "\n\n", encoding="utf-8")
    r = run_cli("heads", "--file", str(path), "--format", "json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["file"] == str(path) and doc["n_texts"] == 3 and "tokens" not in doc and "text" not in doc
    rows = doc["heads"]
    each = [metrics.self_score(attnviz.extract(t).attentions) for t in texts]
    mean = torch.stack(each).mean(0)
    assert rows[30]["self"] == pytest.approx(float(mean[2, 6]), abs=1e-5)
    table = run_cli("heads", "--file", str(path), "--width", "160")
    assert "3 texts (averaged)" in table.stdout


def test_heads_table_labels(run_cli):
    r = run_cli("heads", TEXT, "--width", "200")
    assert r.exit_code == 0, r.stderr
    table, legend = r.stdout.split("\nlabels: ", 1)
    assert "previous-token" in table  # MiniLM's L0H2 looks at the previous token
    assert legend.startswith("broad = entN ≥ 0.8; self = self ≥ 0.5; previous-token = prev ≥ 0.5")  # column order
    assert "left out" not in r.stdout  # every statistic fits 200 columns


def _result(attn, tokens, special=None):
    from attnviz.result import AttentionResult

    return AttentionResult(tokens=tokens, attentions=torch.as_tensor(attn, dtype=torch.float32)[None],
                           special=special or [False] * len(tokens))


def test_every_label_on_a_head_built_for_it():
    n = 6
    eye = torch.eye(n)
    prev = torch.zeros(n, n)
    prev[0, 0] = 1
    prev[torch.arange(1, n), torch.arange(0, n - 1)] = 1
    nxt = torch.zeros(n, n)
    nxt[n - 1, n - 1] = 1
    nxt[torch.arange(0, n - 1), torch.arange(1, n)] = 1
    first = torch.zeros(n, n)
    first[:, 0] = 1
    last = torch.zeros(n, n)
    last[:, -1] = 1
    punct = torch.zeros(n, n)
    punct[:, 3] = 1
    uniform = torch.full((n, n), 1 / n)
    heads = torch.stack([eye, prev, nxt, first, last, punct, uniform])  # (7, n, n)
    tokens = ["[CLS]", "a", "b", ",", "c", "[SEP]"]
    table = head_table([_result(heads, tokens, [True, False, False, False, False, True])])
    expect = ["self", "previous-token", "next-token", "first-token", "[SEP]", "punctuation", "broad"]
    for h, label in enumerate(expect):
        assert label in table.labels(0, h), (h, table.labels(0, h))
    assert table.labels(0, 6) == ["broad"]


def test_bos_and_eos_count_as_cls_and_sep():
    attn = torch.zeros(1, 4, 4)
    attn[0, :, 0] = 1
    r = _result(attn[0][None], ["<s>", "x", "y", "</s>"], [True, False, False, True])
    table = head_table([r])
    assert float(table.stats["first"][0, 0]) == pytest.approx(1.0) and float(table.stats["sep"][0, 0]) == 0.0


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["heads", TEXT, "--sort", "nonsense"], "--sort 'nonsense' is not a column; use layer, head or one of"),
        (["heads", TEXT, "--sort", "prev_mean"], "(prev_mean is now prev_score: they were always equal)"),
        (["heads", TEXT, "--columns", "prev,nonsense"], "--columns: 'nonsense' is not a statistic"),
        (["heads", TEXT, "--columns", ","], "--columns is empty"),
        (["heads"], "give exactly one of TEXT, --file FILE or --probe induction"),
        (["heads", TEXT, "--probe", "induction"], "give exactly one of TEXT"),
        (["heads", "--probe", "induction"], "--probe induction needs a causal (decoder) model"),
        (["heads", "--file", "/nonexistent.txt"], "/nonexistent.txt does not exist"),
    ],
)
def test_heads_errors(run_cli, args, expected):
    r = run_cli(*args)
    assert r.exit_code in (1, 2) and expected in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_heads_file_with_invalid_utf8(run_cli, tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"fine line\n\xff\xfe broken\n")
    r = run_cli("heads", "--file", str(path))
    assert r.exit_code == 1 and "line 2 is not valid UTF-8" in r.stderr


def test_induction_probe_on_a_decoder(tiny_hf):
    from attnviz.analysis.probes import induction_probe
    from attnviz.sources.resolve import load_source

    source = load_source(tiny_hf["gpt2"])
    r = induction_probe(source)
    half = (len(r.tokens) - 1) // 2
    assert r.token_ids[0] == source.bos_id  # a BOS first, as TransformerLens's probe has
    assert r.token_ids[1 : 1 + half] == r.token_ids[1 + half :]  # the random tokens, repeated


def test_compare_heads_bare_uses_the_example(run_cli):
    r = run_cli("compare-heads", "--width", "120")
    assert r.exit_code == 0, r.stderr
    assert r.stderr.startswith("attnviz: no TEXT given; using the example sentence")
    assert all(f"L{la}   H0" in r.stdout for la in range(6))  # a compact grid of every layer's heads
    assert len(r.stdout.splitlines()) < 200
    assert "most similar pairs of heads" in r.stdout and "most different pairs of heads" in r.stdout
    assert "Jensen–Shannon divergence between heads, summed over query rows" in r.stdout
    # The answer first: the pairs come before the grid of every head (issue 27: 143 lines before anything).
    lines = r.stdout.splitlines()
    assert "most similar pairs of heads" in "\n".join(lines[:4])
    first = {key: next(i for i, line in enumerate(lines) if key in line) for key in ("most different pairs", "L0   H0")}
    assert first["most different pairs"] < first["L0   H0"]


def test_compare_heads_image(run_cli, tmp_path):
    from PIL import Image

    out = tmp_path / "grid.png"
    r = run_cli("compare-heads", TEXT, "--layer", "1", "--out", str(out))  # every layer: the README's own line
    assert r.exit_code == 0, r.stderr
    with Image.open(out) as im:
        pixels = np.asarray(im.convert("RGB"))
    assert pixels.shape[1] > 1500 and pixels.std() > 20  # 12 heads in rows beside the matrix (issue 41 item 17)


def test_compare_heads_pairs_match_the_distance_matrix(run_cli):
    r = run_cli("compare-heads", TEXT, "--layer", "2", "--top-pairs", "1", "--width", "120")
    assert r.exit_code == 0, r.stderr
    dist = metrics.head_distance(attnviz.extract(TEXT).attentions[2:3]).numpy()
    iu = np.triu_indices(12, 1)
    best = int(np.argmin(dist[iu]))
    i, j = iu[0][best], iu[1][best]
    similar = r.stdout.split("most similar")[1].split("most different")[0]
    assert f"L2H{i} " in similar and f"L2H{j} " in similar and f"{dist[i, j]:.3f}" in similar


def test_compare_heads_vs_text_and_vs_model(run_cli, tiny_hf):
    r = run_cli("compare-heads", "The cat sat.", "--vs", "The dog ran.", "--width", "120")
    assert r.exit_code == 0, r.stderr
    assert "Jensen–Shannon distance of the patterns" in r.stdout  # same token count: patterns compared
    r = run_cli("compare-heads", "The cat sat.", "--vs", "A much longer sentence here.", "--width", "120")
    assert r.exit_code == 0, r.stderr
    assert "statistics (the token counts differ)" in " ".join(r.stdout.split())
    assert "every head on 'A much longer sentence here.'" in r.stdout  # the second input's heads are drawn too
    r = run_cli("compare-heads", "The cat sat.", "--vs-model", tiny_hf["bert"])
    assert r.exit_code == 2 and "different shapes: (6, 12) and (2, 4)" in r.stderr
    r = run_cli("compare-heads", "The cat sat.", "--vs-model", tiny_hf["bert"], "--model", tiny_hf["bert"],
                "--engine", "hf", "--width", "120")
    assert r.exit_code == 0, r.stderr
    changes = " ".join(r.stdout.split()).split("heads that change most")[1]
    assert "0.000" in changes and not any(f"{x:.3f}" in changes for x in (0.1, 0.2, 0.5))  # itself: no change


def test_rollout_matches_the_metric(run_cli):
    r = run_cli("rollout", TEXT, "--values", "--width", "120", "--layer", "1")
    assert r.exit_code == 0, r.stderr
    expected = rollout(attnviz.extract(TEXT).attentions)[1]
    row = next(line for line in r.stdout.splitlines() if line.strip().startswith("cat "))
    shown = [float("0" + v) if v.startswith(".") else float(v) for v in row.split()[1:]]
    assert shown == pytest.approx(expected[2].tolist(), abs=0.006)


def test_rollout_norm_and_errors(run_cli, tmp_path):
    out = tmp_path / "norm.png"
    r = run_cli("rollout", TEXT, "--norm", "--layer", "2", "--head", "all", "--out", str(out))
    assert r.exit_code == 0 and out.exists()
    r = run_cli("rollout", TEXT, "--norm", "--engine", "hf")
    assert r.exit_code == 2 and "norm-based attention needs each head's value vectors" in r.stderr
    r = run_cli("rollout", TEXT, "--fusion", "median")
    assert r.exit_code == 2
    r = run_cli("rollout", TEXT, "--norm", "--fusion", "max")
    assert r.exit_code == 2 and "--fusion belongs to rollout" in r.stderr


def test_short_texts_are_warned_about(run_cli):
    r = run_cli("heads", "Hi", "--format", "json")
    assert r.exit_code == 0 and "attnviz: warning: a text of 3 token(s) says little about a head" in r.stderr


def test_compare_heads_image_draws_every_head_on_one_axes(run_cli, tmp_path, monkeypatch):
    """Every head is an image at its place on one Axes (one Axes per head, under constrained layout,
    took 7 s for MiniLM's 72), and no token label is drawn over a head's panel."""
    from conftest import TINY

    from attnviz.render import compare_image

    figures = []
    real = compare_image.save_figure
    monkeypatch.setattr(compare_image, "save_figure", lambda fig, path: figures.append(fig) or real(fig, path))
    out = tmp_path / "grid.png"
    r = run_cli("compare-heads", "The cat sat on the mat.", "--model", TINY, "--out", str(out))
    assert r.exit_code == 0, r.stderr
    (fig,) = figures
    grid, matrix, _colorbar = fig.axes
    n_heads = len([t for t in grid.texts if re.fullmatch(r"L\d+H\d+", t.get_text())])
    assert n_heads >= 4 and len(grid.images) == n_heads and len(matrix.images) == 1
    renderer = fig.canvas.get_renderer()
    panels = [image.get_window_extent(renderer) for image in grid.images]
    for text in grid.texts:
        box = text.get_window_extent(renderer)
        assert not any(box.overlaps(panel) for panel in panels), text.get_text()
        assert box.x0 >= 0 and box.y0 >= 0 and box.x1 <= fig.bbox.x1 and box.y1 <= fig.bbox.y1, text.get_text()
    assert max(p.x1 for p in panels) < matrix.get_window_extent(renderer).x0
