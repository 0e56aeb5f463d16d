"""`explain`'s steps for learners: the softmax worked out, masks shown, scales, positions, both languages.

Every number is checked against an independent computation: plain Python math, or torch's own functions.
"""

from __future__ import annotations

import json
import math
import re
import string

import pytest
import torch
import torch.nn.functional as F
from conftest import SEED, TINY
from docs_text import DOCS

import attnviz
import attnviz.api
from attnviz.errors import UsageError
from attnviz.explain import build_mask, choose_scale, softmax_steps
from attnviz.explain.text import EN, ZH


def hand_softmax_steps(row: list[float], allowed: list[bool]):
    kept = [s for s, ok in zip(row, allowed, strict=True) if ok]
    if not kept:
        return [0.0] * len(row), 0.0, [0.0] * len(row)
    top = max(kept)
    e = [math.exp(s - top) if ok else 0.0 for s, ok in zip(row, allowed, strict=True)]
    total = sum(e)
    return e, total, [v / total for v in e]


def test_softmax_steps_equal_a_hand_computation_with_a_mask():
    scores = torch.tensor([[1.0, 2.0, 3.0], [0.5, -1.0, 4.0], [2.0, 2.0, 2.0]], dtype=torch.float64)
    mask = build_mask(3, 3, causal=True, padding=[False, True, False])
    assert mask.tolist() == [[True, False, False], [True, False, False], [True, False, True]]
    masked, row_max, exp, sums, weights = softmax_steps(scores, mask)
    for i in range(3):
        e, total, w = hand_softmax_steps(scores[i].tolist(), mask[i].tolist())
        assert exp[i].tolist() == pytest.approx(e, rel=1e-15)
        assert float(sums[i]) == pytest.approx(total, rel=1e-15)
        assert weights[i].tolist() == pytest.approx(w, rel=1e-15)
        assert all(math.isinf(v) for v, ok in zip(masked[i].tolist(), mask[i].tolist(), strict=True) if not ok)
    # The same as torch's own attention with the boolean mask (True = may attend).
    torch.testing.assert_close(weights, torch.softmax(scores.masked_fill(~mask, -math.inf), dim=-1))
    assert float(row_max[2]) == 2.0


def test_a_fully_masked_row_gives_zero_weights_and_says_why(run_cli, tmp_path):
    config = tmp_path / "empty_row.toml"
    config.write_text(
        '[model]\ntype = "matrices"\ncausal = true\n'
        '[input]\nx = [[1, 0], [0, 1], [1, 1]]\npadding = [true, false, false]\n'
        '[weights]\nw_q = [[1, 0], [0, 1]]\nw_k = [[1, 0], [0, 1]]\nw_v = [[1, 2], [3, 4]]\n',
        encoding="utf-8",
    )
    walk = attnviz.api.explain(None, str(config))
    assert walk.empty_rows == [0]  # x1 may see only itself, and it is padding
    head = walk.heads[0]
    assert head.weights[0].tolist() == [0.0, 0.0, 0.0] and head.output[0].tolist() == [0.0, 0.0]
    assert float(head.row_sums[0]) == 0.0
    # Row x2 sees x2 alone (x1 is padding): weight 1 on x2.
    assert head.weights[1].tolist() == [0.0, 1.0, 0.0]
    out = run_cli("explain", "--model", str(config), "--width", "200").stdout
    assert "Row x1: every key is masked" in out and "−∞" in out and "✓" in out
    zh = run_cli("explain", "--model", str(config), "--lang", "zh", "--width", "200").stdout
    assert "第 x1 行：所有键都被屏蔽" in zh and "填充掩码" in zh and "因果掩码" in zh


@pytest.mark.parametrize(("spec", "divisor"), [("sqrt-dk", 2.0), ("sqrt-len", math.sqrt(5)), ("none", 1.0),
                                               ("64", 64.0), (8, 8.0)])
def test_scale_choices(spec, divisor):
    chosen = choose_scale(spec, d_k=4, n_keys=5)
    assert chosen.value == pytest.approx(1 / divisor) and chosen.divisor == pytest.approx(divisor)


@pytest.mark.parametrize("bad", ["sqrt", "-3", "0", "nan", "inf"])
def test_bad_scales_are_refused(bad):
    with pytest.raises(UsageError, match="scale"):
        choose_scale(bad, d_k=4, n_keys=5)


def test_scale_changes_the_scores_and_turns_the_reference_check_off():
    walk = attnviz.api.explain(None, SEED, scale="sqrt-len")
    raw = walk.heads[0].raw_scores
    torch.testing.assert_close(walk.heads[0].scores, raw / math.sqrt(3))
    # Row x1 scaled by 1/√3 is what the tutorial printed as its Z_1 row: 14.43, 37.53, 60.62 ... of ITS Q;
    # ours comes from the correct Q (5, 11.4, 17.8), so the numbers are 25/√3, 57/√3, 89/√3.
    assert walk.heads[0].scores[0].tolist() == pytest.approx([25 / math.sqrt(3), 57 / math.sqrt(3), 89 / math.sqrt(3)])
    assert walk.reference_off == "scale" and walk.differences == []


def test_causal_flag_turns_the_reference_check_off(run_cli):
    walk = attnviz.api.explain(None, SEED, causal=True)
    assert walk.reference_off == "causal" and walk.differences == []
    out = run_cli("explain", "--causal", "--width", "200").stdout
    assert "comparison with seed 002" in out and "is off" in out
    assert "the tutorial has" not in out  # nothing blamed on the tutorial for what the flag changed


def test_head_keeps_one_head_in_view(run_cli):
    walk = attnviz.api.explain(None, SEED, head=1)
    assert walk.shown_heads == [1] and len(walk.heads) == 2  # both computed: the concatenation needs them
    data = json.loads(run_cli("explain", "--only-head", "1", "--format", "json").stdout)
    assert [h["head"] for h in data["heads"]] == [1]
    with pytest.raises(UsageError, match="heads 0 to 1"):
        attnviz.api.explain(None, SEED, head=2)


def test_position_step_is_embedding_plus_sinusoid_then_layer_norm():
    from attnviz.sources.resolve import load_source

    source = load_source(TINY)
    inputs = source.explain_inputs("the cat sat", 0)
    pos = inputs.positions
    d = source.cfg.d_model
    for p in range(3):  # PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(...), by hand
        for i in range(0, d, 2):
            assert float(pos.position[p, i]) == pytest.approx(math.sin(p / 10000 ** (i / d)), abs=1e-6)
            assert float(pos.position[p, i + 1]) == pytest.approx(math.cos(p / 10000 ** (i / d)), abs=1e-6)
    torch.testing.assert_close(pos.summed, pos.embedding + pos.position)
    ln = source.network.blocks[0].ln_attn
    torch.testing.assert_close(inputs.x, F.layer_norm(pos.summed, (d,), ln.weight, ln.bias))
    later = source.explain_inputs("the cat sat", 1).positions
    assert later.kind == "residual" and later.embedding is None


def test_catalogues_say_the_same_things_in_both_languages():
    assert EN.keys() == ZH.keys()
    fields = lambda s: {f for _, f, _, _ in string.Formatter().parse(s) if f}  # noqa: E731
    for key in EN:
        assert fields(EN[key]) == fields(ZH[key]), key
    for term in ("查询", "键", "值", "缩放点积", "掩码", "多头", "拼接"):
        assert any(term in text for text in ZH.values()), term


def test_zh_walkthrough_numbers_rows_as_the_tutorial(run_cli):
    out = run_cli("explain", "--lang", "zh", "--width", "200").stdout
    assert "第 1 步 · 输入 X" in out and "缩放点积" in out and "拼接" in out
    assert "Q 第 x2 行：教程为 [13, 15]，计算得 [11.4, 14]" in out
    assert re.search(r"│ x1\s+│", out)  # rows of the tables are x1, x2, x3


def test_bad_language_is_refused(run_cli):
    r = run_cli("explain", "--lang", "fr")
    assert r.exit_code == 2 and "fr" in r.stderr


def test_the_readme_teaching_walkthrough_is_computed_by_hand():
    """docs/learning.md walks through head 0, row x1 of teaching.toml: redo it in plain Python from the TOML."""
    from pathlib import Path

    from attnviz.config import tomllib

    root = Path(__file__).resolve().parent.parent
    cfg = tomllib.loads((root / "sample_configs" / "teaching.toml").read_text(encoding="utf-8"))
    x, w = cfg["input"]["x"], cfg["weights"]
    mat = lambda a, b: [[sum(a[i][t] * b[t][j] for t in range(len(b))) for j in range(len(b[0]))] for i in range(len(a))]  # noqa: E731
    q, k = mat(x, w["w_q"]), mat(x, w["w_k"])
    assert q[0] == [1, 0, 0, 0.5]
    raw = [q[0][0] * k[j][0] + q[0][1] * k[j][1] for j in range(3)]  # head 0: columns 1-2
    assert raw == [0, 1.5, 1]
    scaled = [s / math.sqrt(2) for s in raw]
    e, total, weights = hand_softmax_steps(scaled, [True] * 3)
    readme = DOCS["learning.md"]
    for text in (f"[{e[0]:.4f}, 1, {e[2]:.4f}]", f"sum to {total:.4f}", f"[{weights[0]:.3f}, {weights[1]:.4f}, {weights[2]:.4f}]"):
        assert text in readme, text
    walk = attnviz.api.explain(None, str(root / "sample_configs" / "teaching.toml"))
    assert walk.heads[0].weights[0].tolist() == pytest.approx(weights, rel=1e-12)
    every = torch.stack([h.weights for h in walk.heads])
    assert float(every.min()) > 0.16 and float(every.max()) < 0.49  # well-conditioned, as docs/learning.md says


def test_cross_attention_walkthrough_and_seed_001_backwards_claim():
    from pathlib import Path

    config = Path(__file__).resolve().parent.parent / "sample_configs" / "cross_attention.toml"
    walk = attnviz.api.explain(None, str(config))
    assert walk.cross and walk.key_tokens == ["the", "cat", "sleeps", "<pad>"]
    x, c = walk.x, walk.context
    # Q from X, K and V from C, by torch's own attention with the padding mask (True = may attend).
    q, k, v = x @ walk.w_q, c @ walk.w_k, c @ walk.w_v
    allowed = torch.tensor([True, True, True, False])
    for h in range(2):
        cols = slice(2 * h, 2 * h + 2)
        expected = F.scaled_dot_product_attention(q[None, :, cols], k[None, :, cols], v[None, :, cols],
                                                  attn_mask=allowed.expand(3, 4))[0]
        torch.testing.assert_close(walk.heads[h].output, expected)
        assert walk.heads[h].weights[:, 3].tolist() == [0.0, 0.0, 0.0]
    texts = [d.text() for d in walk.differences]
    assert len(texts) == 1 and "the output would have 4 rows, one per source token (4×4)" in texts[0]
    assert "3-row residual stream" in texts[0]


def test_d_v_different_from_d_k_walks_through(tmp_path, run_cli):
    config = tmp_path / "dv.toml"
    w_v = [[0.1 * (i + j) for j in range(6)] for i in range(4)]
    w_o = [[0.05 * (i - j) for j in range(4)] for i in range(6)]
    config.write_text(
        '[model]\ntype = "matrices"\nn_heads = 2\n'
        '[input]\nx = [[1, 0, 1, 0], [0, 2, 0, 1], [1, 1, 1, 1]]\n'
        '[weights]\nw_q = [[0.5, 0, 0, 0.5], [0, 0.5, 0.5, 0], [0.5, 0, 0, 0], [0, 0, 0.5, 0.5]]\n'
        'w_k = [[0, 0.5, 0.5, 0], [0.5, 0, 0, 0.5], [0, 0.5, 0, 0], [0.5, 0, 0.5, 0]]\n'
        f"w_v = {w_v}\nw_o = {w_o}\n", encoding="utf-8")
    walk = attnviz.api.explain(None, str(config))
    assert (walk.d_k, walk.d_v) == (2, 3)
    x = walk.x
    q, k, v = x @ walk.w_q, x @ walk.w_k, x @ torch.tensor(w_v, dtype=torch.float64)
    heads = [F.scaled_dot_product_attention(q[None, :, 2 * h:2 * h + 2], k[None, :, 2 * h:2 * h + 2],
                                            v[None, :, 3 * h:3 * h + 3])[0] for h in range(2)]
    torch.testing.assert_close(walk.output, torch.cat(heads, dim=1) @ torch.tensor(w_o, dtype=torch.float64))
    out = run_cli("explain", "--model", str(config), "--width", "200").stdout
    assert "d_v = 3 differs from d_k = 2" in out
