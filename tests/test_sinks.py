"""Attention sinks as Gu et al. 2024 define them, checked against transformers' own attentions with
the definition written out: α_k = (1/(T − k)) Σ_{t ≥ k} A[t, k] in a causal model (0-based), the
column mean in an encoder; a sink at k when α_k > 0.3; the sink rate is the share of heads with
a sink on the first token."""

from __future__ import annotations

import json

import pytest
import torch

from attnviz.analysis import metrics
from attnviz.analysis.heads import head_table

TEXT = "the cat sat on the mat and the dog sat on the log"


def _by_hand(attn: torch.Tensor, causal: bool) -> list[list[list[float]]]:
    """α per layer, head and key, with plain loops over the definition."""
    layers, heads, t, _ = attn.shape
    out = []
    for layer in range(layers):
        rows = []
        for head in range(heads):
            alphas = []
            for k in range(t):
                seeing = range(k, t) if causal else range(t)
                alphas.append(sum(float(attn[layer, head, i, k]) for i in seeing) / len(seeing))
            rows.append(alphas)
        out.append(rows)
    return out


def _hf_attentions(folder: str, text: str) -> tuple[list[str], torch.Tensor]:
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    encoded = tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        out = model(**encoded, output_attentions=True)
    return tokenizer.convert_ids_to_tokens(encoded["input_ids"][0]), torch.stack([a[0] for a in out.attentions])


@pytest.mark.parametrize(("family", "causal"), [("gpt2", True), ("llama", True), ("bert", False)])
def test_sink_importance_is_gu_et_al(tiny_hf, run_cli, family, causal):
    _, attn = _hf_attentions(tiny_hf[family], TEXT)
    expected = _by_hand(attn, causal)
    got = metrics.sink_importance(attn, causal=causal)
    assert torch.allclose(got, torch.tensor(expected, dtype=torch.float64), atol=1e-6)
    r = run_cli("heads", TEXT, "--model", tiny_hf[family], "--format", "json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    for row in doc["heads"]:
        alphas = expected[row["layer"]][row["head"]]
        assert row["sink"] == pytest.approx(max(alphas), abs=1e-5)
        assert row["sinks"] == [k for k, a in enumerate(alphas) if a > 0.3]
        assert ("sink" in row["labels"]) == (max(alphas) >= 0.3)
    first = [expected[layer][head][0] for layer in range(attn.shape[0]) for head in range(attn.shape[1])]
    assert doc["sink_rate"] == pytest.approx(sum(a > 0.3 for a in first) / len(first), abs=1e-6)


def test_sink_rate_and_positions_in_the_table(run_cli):
    r = run_cli("heads", "The cat sat on the mat because it was tired.", "--width", "160")
    assert r.exit_code == 0 and "sink rate:" in r.stdout and "sink@0" in r.stdout
    table = head_table([_minilm("The cat sat.")])
    assert table.sinks is not None and table.rows()[0]["sinks"] == table.sinks[(0, 0)]
    averaged = head_table([_minilm("The cat sat."), _minilm("A dog ran.")])
    assert averaged.sinks is None and "sinks" not in averaged.rows()[0]
    assert 0.0 <= averaged.sink_rate <= 1.0


def _minilm(text: str):
    import attnviz

    return attnviz.extract(text)


def test_pictures_mark_the_sinks(run_cli, tmp_path):
    """The heatmap names each panel's sinks in a note (terminal and image) and marks their columns."""
    import attnviz
    from attnviz import api

    source = api.load()
    view = api.attention_view(source, "The cat sat on the mat.", layer=3, head="all")
    result = attnviz.extract("The cat sat on the mat.")
    alphas = metrics.sink_importance(result.attentions[3:4], causal=False)[0]
    assert view.marks == [[k for k in range(alphas.shape[1]) if alphas[h, k] > 0.3] for h in range(12)]
    assert any(view.marks) and any(note.startswith("▼ attention sinks") for note in view.notes)
    r = run_cli("heatmap", "The cat sat on the mat.", "--layer", "3", "--head", "1", "--width", "100")
    assert r.exit_code == 0 and "▼ attention sinks (α > 0.3, Gu et al. 2024): [CLS] (0) in head 1" in r.stdout
    # Every head of the layer: the panels sharing a sink are named together, in whole items.
    note = next(n for n in view.notes if n.startswith("▼ attention sinks"))
    sharing = [f"head {h}" for h in range(12) if view.marks[h] == [0]]
    assert f"[CLS] (0) in {', '.join(sharing[:6])}" in note and "more panels" not in note


def test_one_token_across_the_model(run_cli, tiny_hf):
    """--query: the token's row in every layer and head, equal to transformers' attentions."""
    from attnviz import api

    folder = tiny_hf["gpt2"]
    tokens, attn = _hf_attentions(folder, TEXT)
    source = api.load(folder)
    index = 5
    view = api.query_view(source, TEXT, index)
    layers, heads = attn.shape[:2]
    assert view.panels.shape == (1, layers * heads, len(tokens))
    assert view.row_labels[heads + 1] == "L1H1"
    expected = attn[:, :, index, :].reshape(layers * heads, -1).double().numpy()
    assert abs(view.panels[0] - expected).max() < 1e-5
    by_token = api.query_view(source, TEXT, tokens[index].lstrip("Ġ"))  # a token as typed finds its first copy
    first = next(i for i, t in enumerate(tokens) if t.lstrip("Ġ") == tokens[index].lstrip("Ġ"))
    assert by_token.title.endswith(f"(token {first}) attends to")
    r = run_cli("heatmap", TEXT, "--model", folder, "--query", "5", "--layer", "1", "--head", "0", "--width", "100")
    assert r.exit_code == 0 and "L1H0" in r.stdout and "L0H0" not in r.stdout, r.stderr
    r = run_cli("heatmap", TEXT, "--model", folder, "--query", "zebra")
    assert r.exit_code == 2 and "--query 'zebra' is not a token of the text" in r.stderr
    r = run_cli("heatmap", TEXT, "--model", folder, "--query", "99")
    assert r.exit_code == 2 and "--query 99 is out of range" in r.stderr
