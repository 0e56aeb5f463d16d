"""`explain`: every number of seed 002's example, checked against a hand computation in Python."""

from __future__ import annotations

import json
import math

import pytest
import torch
from conftest import SEED, TINY

import attnviz
import attnviz.api
from attnviz.explain import walkthrough
from attnviz.sources.resolve import load_source

X = [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]]
W = [[0.1, 0.2], [0.3, 0.4], [0.5, 0.6], [0.7, 0.8]]


def hand_matmul(a, b):
    return [[sum(a[i][t] * b[t][j] for t in range(len(b))) for j in range(len(b[0]))] for i in range(len(a))]


def hand_softmax(row):
    top = max(row)
    e = [math.exp(v - top) for v in row]
    return [v / sum(e) for v in e]


def hand_seed_example():
    qkv = hand_matmul(X, W)  # Q = K = V because W_Q = W_K = W_V
    heads = []
    for h in range(2):  # two heads of width 1: head h is column h
        col = [row[h] for row in qkv]
        scores = [[qi * kj / math.sqrt(1) for kj in col] for qi in col]  # d_k = 1
        weights = [hand_softmax(r) for r in scores]
        out = [[sum(w * v for w, v in zip(wr, col, strict=True))] for wr in weights]
        heads.append({"q": [[c] for c in col], "scores": scores, "weights": weights, "output": out})
    final = [[heads[0]["output"][i][0], heads[1]["output"][i][0]] for i in range(3)]
    return qkv, heads, final


def test_seed_example_numbers():
    walk = walkthrough(load_source(SEED).explain_inputs(None))
    qkv, heads, final = hand_seed_example()
    # The correct Q; the seed prints [13, 15] and [21, 24] for rows 1 and 2.
    assert qkv == [pytest.approx(r) for r in ([5.0, 6.0], [11.4, 14.0], [17.8, 22.0])]
    for m in (walk.q, walk.k, walk.v):
        assert m.tolist() == [pytest.approx(r) for r in qkv]
    assert walk.d_k == 1 and walk.scale == 1.0  # 1/√d_k with d_k = 1, not 1/√3
    for h, ref in zip(walk.heads, heads, strict=True):
        assert h.scores.tolist() == [pytest.approx(r) for r in ref["scores"]]
        assert h.weights.tolist() == [pytest.approx(r, rel=1e-9, abs=1e-300) for r in ref["weights"]]
        assert h.output.tolist() == [pytest.approx(r) for r in ref["output"]]
    assert walk.output.tolist() == [pytest.approx(r) for r in final]
    assert walk.w_o is None and walk.mask is None


def test_seed_differences_are_reported():
    walk = attnviz.api.explain(None, SEED)
    text = "\n".join(d.text() for d in walk.differences)
    assert "Q row x2: the tutorial has [13, 15], computed [11.4, 14]" in text
    assert "Q row x1" not in text  # the seed's first row is right
    assert "divides by 1.7321, √3: the square root of the sequence length" in text
    assert "1/√d_k = 1/√1 = 1" in text
    assert "head 0 weights row x1" in text and "output row x1" in text


def test_explain_json_cli(run_cli):
    result = run_cli("explain", "--model", SEED, "--format", "json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    _, heads, final = hand_seed_example()
    assert {"heads", "output"} <= data.keys()
    assert len(data["heads"]) == 2
    for got, ref in zip(data["heads"], heads, strict=True):
        assert {"q", "k", "v", "scores", "weights", "output"} <= got.keys()
        assert got["q"] == [pytest.approx(r) for r in ref["q"]]
        assert got["weights"] == [pytest.approx(r, rel=1e-9, abs=1e-300) for r in ref["weights"]]
        assert got["output"] == [pytest.approx(r) for r in ref["output"]]
    assert data["output"] == [pytest.approx(r) for r in final]


def test_explain_default_model_is_the_seed_example(run_cli):
    result = run_cli("explain")
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    for step in ("Step 1", "Step 4", "Step 6", "Step 8", "Step 10", "Step 11", "Why 1/√d_k"):
        assert step in out
    assert "11.4" in out and "17.8" in out
    assert "Q row x2: the tutorial has [13, 15], computed [11.4, 14]" in out


def test_tiny_walkthrough_agrees_with_the_module_and_extract():
    source = load_source(TINY)
    inputs = source.explain_inputs("The cat sat on the mat", layer=1)
    walk = walkthrough(inputs)
    out = inputs.attention.double()(inputs.x.double()[None])
    torch.testing.assert_close(walk.output, out.output[0])
    extracted = attnviz.extract("The cat sat on the mat", model=TINY).attentions[1]
    torch.testing.assert_close(torch.stack([h.weights for h in walk.heads]).float(), extracted, rtol=1e-5, atol=1e-6)
    assert walk.w_o is not None and set(walk.biases) == {"b_q", "b_k", "b_v", "b_o"}


def test_causal_walkthrough_masks_the_future(run_cli):
    result = run_cli("explain", "a b c", "--model", TINY, "--causal", "--format", "json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["mask"] == [[True, False, False], [True, True, False], [True, True, True]]
    for head in data["heads"]:
        assert head["weights"][0][1:] == [0.0, 0.0] and head["weights"][1][2] == 0.0


def test_explain_errors(run_cli):
    r = run_cli("explain", "some text", "--model", SEED)
    assert r.exit_code == 2 and "fixed input X" in r.stderr
    r = run_cli("explain", "a b", "--model", TINY, "--walk-layer", "7")
    assert r.exit_code == 2 and "layers 0 to 1" in r.stderr
    r = run_cli("explain", "a b", "--model", TINY, "--walk-layer", "-1")
    assert r.exit_code == 2 and "negative" in r.stderr


def test_every_error_of_the_worked_example_is_named_with_hand_computed_numbers():
    """Seed 002's own arithmetic, redone by hand here: e^s, its sums, its softmax, its weighted sum."""
    walk = attnviz.api.explain(None, SEED)
    text = "\n".join(d.text() for d in walk.differences)
    assert "X is 3×4 (3 tokens x1–x3, 4 numbers each), not 4×3" in text
    their_scores = [14.43, 37.53, 60.62]
    their_exp = [1850752, 20215372293, 1800537936918]
    assert f"e^37.53 = {math.exp(37.53):.4g}, not 20,215,372,293" in text
    assert f"e^60.62 = {math.exp(60.62):.4g}, not 1,800,537,936,918" in text
    assert "e^14.43" not in text  # that one the tutorial got right
    assert f"its own e values add up to {sum(their_exp):,}, not 1,822,604,060,963" in text
    assert f"true sum of e^s over the row is {sum(math.exp(s) for s in their_scores):.4g}" in text
    soft = hand_softmax(their_scores)
    assert f"is [{soft[0]:.3g}, {soft[1]:.3g}, 1], not [0.001, 0.011, 0.988]" in text
    divided = [e / 1822604060963 for e in their_exp]
    assert f"divided by its own sum are [{divided[0]:.3g}, " in text
    weighted = 0.001 * 5 + 0.011 * 13 + 0.988 * 21
    assert weighted == pytest.approx(20.896)
    assert "0.001·5 + 0.011·13 + 0.988·21 = 20.896, not 20.86" in text
    assert "normally ends with W_O" in text
