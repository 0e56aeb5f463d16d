"""The tutorials' errata: each finding's numbers against an independent computation, texts in both languages."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import torch

from attnviz import attention
from attnviz.explain.errata import Erratum, errata
from attnviz.explain.errata_code import SEED_001_MHA

SEED_001 = Path(__file__).parent / "seeds" / "001.txt"  # the tutorial seed 001, as the project received it
KEYS = ["000-scale-64", "000-mask-true-means-masked", "001-cross-attention-backwards", "001-mha-class-does-not-run",
        "003-params-3h-plus-1"]
CJK = re.compile(r"[\u4e00-\u9fff]")


@pytest.fixture(scope="module")
def by_key() -> dict[str, Erratum]:
    return {e.key: e for e in errata()}


def _softmax(row: list[float]) -> list[float]:
    """Written out with math.exp, no torch."""
    top = max(row)
    e = [math.exp(x - top) for x in row]
    return [x / sum(e) for x in e]


def _texts(e: Erratum) -> list[str]:
    return [e.finding["en"], e.finding["zh"]]


def _mentions(e: Erratum, *values: float) -> None:
    for text in _texts(e):
        for v in values:
            assert f"{v:.4f}" in text, (v, text)


def test_every_erratum_has_both_languages_and_json_numbers(by_key):
    assert list(by_key) == KEYS
    for e in by_key.values():
        assert e.seed in ("000", "001", "003") and e.key.startswith(e.seed)
        for part in (e.claim, e.finding):
            assert set(part) == {"en", "zh"} and all(part.values())
            assert CJK.search(part["zh"]) and not CJK.search(part["en"])
        json.dumps(e.numbers, allow_nan=False)


def test_deterministic_and_leaves_the_global_rng_alone():
    state, threads = torch.get_rng_state(), torch.get_num_threads()
    first = json.dumps([(e.key, e.finding, e.numbers) for e in errata()], ensure_ascii=False)
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.get_num_threads() == threads  # errata() computes on one thread, then restores the setting
    assert json.dumps([(e.key, e.finding, e.numbers) for e in errata()], ensure_ascii=False) == first


def test_scale_is_sqrt_dk_not_64(by_key):
    e = by_key["000-scale-64"]
    n = e.numbers
    row = n["example_scores"]
    by_8, by_64 = _softmax([x / 8 for x in row]), _softmax([x / 64 for x in row])
    assert n["sqrt_d_k"] == 8.0
    assert n["softmax_div_sqrt_d_k"] == pytest.approx(by_8, abs=2e-4)
    assert n["softmax_div_64"] == pytest.approx(by_64, abs=2e-4)
    assert max(by_64) - min(by_64) < (max(by_8) - min(by_8)) / 3  # much flatter
    assert all(abs(w - 0.2) < 0.05 for w in by_64)
    assert 7.5 < n["std_raw"] < 8.5  # √d_k for unit-variance components
    assert n["std_div_sqrt_d_k"] == pytest.approx(n["std_raw"] / 8, abs=2e-4)
    assert n["std_div_64"] == pytest.approx(n["std_raw"] / 64, abs=2e-4)
    assert abs(n["std_div_sqrt_d_k"] - 1) < 0.06 and abs(n["std_div_64"] - 0.125) < 0.01
    _mentions(e, *row, *n["softmax_div_sqrt_d_k"], *n["softmax_div_64"], n["std_raw"], n["std_div_sqrt_d_k"],
              n["std_div_64"])


def test_seed_mask_passed_to_sdpa_attends_only_to_the_future(by_key):
    e = by_key["000-mask-true-means-masked"]
    n = e.numbers
    t, scores = n["tokens"], n["scores"]
    wrong, right = n["sdpa_weights_with_seed_mask"], n["sdpa_weights_with_inverted_mask"]
    assert n["seed_mask"] == [[j > i for j in range(t)] for i in range(t)]
    for i in range(t):
        future = list(range(i + 1, t))
        for j in range(i + 1):  # exactly zero wherever a causal mask would allow attention
            assert wrong[i][j] == 0.0
        if future:
            assert [wrong[i][j] for j in future] == pytest.approx(_softmax([scores[i][j] for j in future]), abs=1e-3)
            assert all(wrong[i][j] > 0 for j in future)
        assert right[i][: i + 1] == pytest.approx(_softmax(scores[i][: i + 1]), abs=1e-3)
        assert right[i][i + 1:] == [0.0] * (t - i - 1)
    # The last query has no allowed key: whatever torch gives is reported, and said in the text.
    assert n["last_row"] == wrong[-1]
    if n["last_row_has_nan"]:
        assert "NaN" in e.finding["en"]
    else:
        assert n["last_row_sum"] == 0.0 and "no NaN" in e.finding["en"]
    assert n["weight_on_future_per_row"][:-1] == pytest.approx([1.0] * (t - 1), abs=1e-4)
    for ours, torchs in zip(n["attnviz_weights_with_seed_mask"][:-1], wrong[:-1], strict=True):
        assert ours == pytest.approx(torchs, abs=1e-4)
    assert n["inverted_equals_causal_mask"] is True
    assert n["seed_masked_fill_weights"] == right  # in the seed's own masked_fill code the mask is right
    _mentions(e, *wrong[0], *right[1], *right[2])


def test_cross_attention_queries_come_from_the_decoder(by_key):
    e = by_key["001-cross-attention-backwards"]
    n = e.numbers
    s, t, d = n["encoder_tokens"], n["decoder_tokens"], n["d_model"]
    assert s != t
    assert n["right_output_shape"] == n["right_residual_shape"] == n["decoder_stream_shape"] == [1, t, d]
    assert n["right_weights_shape"][-2:] == [t, s] and n["backwards_weights_shape"][-2:] == [s, t]
    assert n["backwards_output_shape"] == [1, s, d]
    assert n["backwards_residual_shape"] is None and "must match" in n["backwards_residual_error"]
    for text in _texts(e):
        assert str([1, t, d]) in text and str([1, s, d]) in text and n["backwards_residual_error"] in text


def test_seed_001_code_is_the_seeds_text_but_for_whitespace():
    page = SEED_001.read_text(encoding="utf-8")
    start = page.index("```python import torch.nn as nn")
    block = page[start + len("```python"): page.index("```", start + 3)]
    assert SEED_001_MHA.split() == block.split()


def test_seed_001_class_failures_are_computed_in_order(by_key):
    e = by_key["001-mha-class-does-not-run"]
    n = e.numbers
    found = [(f["kind"], f["name"]) for f in n["failures"]]
    assert found == [("args", "n_embd"), ("args", "n_head"), ("import", "math"), ("is_causal", "is_causal"),
                     ("import", "F"), ("kv_view", "view")]
    assert n["failures_count"] == 6
    for f in n["failures"]:
        assert (f["name"] if f["kind"] != "kv_view" else "invalid for input") in f["error"]
        for text in _texts(e):
            assert f["error"] in text
    # The last failure is the S ≠ T cross-attention: the keys were viewed with the queries' length T.
    s, t, width = n["S"], n["T"], n["start_args"]["dim"]
    heads = n["start_args"]["n_heads"]
    assert f"[1, {t}, {heads}, {width // heads}]" in n["failures"][-1]["error"]
    assert f"size {s * width}" in n["failures"][-1]["error"]
    result = n["result"]
    assert result["self_shape"] == result["cross_shape"] == [1, t, width]
    assert result["max_abs_diff_vs_attnviz"] < 1e-6


def test_multi_head_has_the_same_parameter_count(by_key):
    e = by_key["003-params-3h-plus-1"]
    n = e.numbers
    d, h = n["d_model"], n["h"]
    assert n["params_h1"] == n["params_h8"] == 4 * d * d + 4 * d == 1_050_624
    assert n["ratio"] == 1.0 and n["claimed_ratio"] == (3 * h + 1) / 4 == 6.25
    wide = 3 * (d * h * d + h * d) + (h * d * d + d)  # Q, K, V of h full-width heads, then W_O from h·d
    assert n["params_h8_full_width_heads"] == wide
    for text in _texts(e):
        assert "1,050,624" in text and "6.25" in text and f"{wide:,}" in text


@pytest.mark.parametrize("function", [attention.scaled_dot_product_attention, attention.attention_weights,
                                      attention.MultiHeadAttention.forward, attention.causal_mask])
def test_mask_convention_warning_in_docstrings(function):
    doc = function.__doc__
    assert "Warning:" in doc and "may attend" in doc and "~mask" in doc and "future" in doc
