"""Matrices configs: cross-attention (``context``), padding, causal masks and d_v ≠ d_k, each number
checked against an independent float64 computation (torch's SDPA, or the softmax by hand); every new
config error names the key and the fix; the cross-attention sample draws with both token axes."""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import ROOT, write_config

import attnviz
from attnviz.attention import MultiHeadAttention
from attnviz.config import MatrixConfig, SoftmaxClaim, load_config
from attnviz.errors import ConfigError, UsageError
from attnviz.sources.own import ConfigSource, _run_matrices
from attnviz.sources.resolve import load_source

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

CROSS = str(ROOT / "sample_configs" / "cross_attention.toml")
D = torch.float64


def reference(x, w_q, w_k, w_v, n_heads, *, context=None, allowed=None, w_o=None):
    """Per-head weights and the output, computed from the raw numbers in float64: softmax by hand
    (exp over the sum of the allowed keys; a row with no allowed key is 0) and torch's SDPA."""
    x = torch.tensor(x, dtype=D)
    c = x if context is None else torch.tensor(context, dtype=D)
    q, k, v = x @ torch.tensor(w_q, dtype=D), c @ torch.tensor(w_k, dtype=D), c @ torch.tensor(w_v, dtype=D)
    dk, dv = q.shape[1] // n_heads, v.shape[1] // n_heads
    allowed = torch.ones(q.shape[0], k.shape[0], dtype=torch.bool) if allowed is None else allowed
    weights, heads = [], []
    for h in range(n_heads):
        qh, kh, vh = q[:, h * dk:(h + 1) * dk], k[:, h * dk:(h + 1) * dk], v[:, h * dv:(h + 1) * dv]
        s = (qh @ kh.T) / math.sqrt(dk)
        e = torch.where(allowed, torch.exp(s - s.max()), torch.zeros_like(s))
        total = e.sum(-1, keepdim=True)
        w = torch.where(total > 0, e / total.clamp_min(1e-300), torch.zeros_like(e))
        weights.append(w)
        # torch's SDPA agrees on every row that has a key to attend to (it gives NaN for one that has none).
        sdpa = F.scaled_dot_product_attention(qh[None], kh[None], vh[None], attn_mask=allowed[None])[0]
        some = allowed.any(-1)
        assert torch.allclose((w @ vh)[some], sdpa[some], atol=1e-12)
        heads.append(w @ vh)
    out = torch.cat(heads, dim=-1)
    if w_o is not None:
        out = out @ torch.tensor(w_o, dtype=D)
    return torch.stack(weights), out


def raw(path: str) -> dict:
    return tomllib.loads(Path(path).read_text(encoding="utf-8"))


# --- cross-attention --------------------------------------------------------------------------------


def test_cross_attention_sample_weights_and_output():
    data = raw(CROSS)
    inp, w = data["input"], data["weights"]
    allowed = ~torch.tensor(inp["padding"])[None, :].expand(len(inp["x"]), -1)
    want_w, want_out = reference(inp["x"], w["w_q"], w["w_k"], w["w_v"], 2, context=inp["context"], allowed=allowed)
    result = attnviz.extract(None, model=CROSS, details=True)
    assert result.tokens == ["the", "cat", "sleeps", "<pad>"] and result.target_tokens == ["le", "chat", "dort"]
    assert result.attentions.shape == (0, 2, 4, 4) and result.decoder_attentions is None  # no self-attention made up
    assert result.cross_attentions.shape == (1, 2, 3, 4) and result.attention_mask == [1, 1, 1, 0]
    assert torch.allclose(result.cross_attentions[0].double(), want_w, atol=1e-7)
    assert (result.cross_attentions[..., 3] == 0).all()
    assert result.scores.shape == (1, 2, 3, 4) and result.queries.shape == (1, 2, 3, 2)
    assert result.keys.shape == (1, 2, 4, 2) and result.values.shape == (1, 2, 4, 2)
    # Well conditioned: the real keys' weights are spread, never saturated.
    real = want_w[..., :3]
    assert real.min() > 0.1 and real.max() < 0.7
    out = _run_matrices(load_source(CROSS).explain_inputs(None))
    assert torch.allclose(out.output[0], want_out, atol=1e-12)


def test_cross_attention_explain_inputs():
    inputs = load_source(CROSS).explain_inputs(None)
    assert inputs.context is not None and inputs.context.shape == (4, 4) and inputs.x.shape == (3, 4)
    assert inputs.context_tokens == ["the", "cat", "sleeps", "<pad>"] and inputs.padding == [False, False, False, True]
    assert inputs.tokens == ["le", "chat", "dort"] and inputs.causal is False


def test_cross_attention_with_other_widths_and_default_labels(tmp_path):
    """x 2 wide, context 3 wide: W_Q reads x's width, W_K and W_V the context's."""
    x, c = [[1.0, -1.0], [0.5, 2.0]], [[1.0, 0.0, 2.0], [0.0, 1.0, -1.0], [1.0, 1.0, 1.0]]
    w_q, w_k, w_v = [[0.3, -0.2], [0.1, 0.4]], [[0.2, 0.1], [-0.3, 0.2], [0.1, 0.1]], [[1.0], [2.0], [3.0]]
    body = (f"[model]\ntype = \"matrices\"\n[input]\nx = {x}\ncontext = {c}\n"
            f"[weights]\nw_q = {w_q}\nw_k = {w_k}\nw_v = {w_v}\n")
    cfg = load_config(write_config(tmp_path, body))
    assert cfg.context_tokens == ("c1", "c2", "c3") and cfg.key_tokens == ("c1", "c2", "c3")
    want_w, want_out = reference(x, w_q, w_k, w_v, 1, context=c)
    result = ConfigSource(cfg).extract(None)
    assert torch.allclose(result.cross_attentions[0].double(), want_w, atol=1e-7)
    assert torch.allclose(_run_matrices(ConfigSource(cfg).explain_inputs(None)).output[0], want_out, atol=1e-12)


# --- padding and causal masks -------------------------------------------------------------------------

X4 = [[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0], [1.0, 1.0, 0.0, 0.0], [0.0, 0.5, 1.0, 1.0]]
W_QK = [[0.5, 0.1], [0.2, 0.4], [0.3, 0.1], [0.1, 0.2]]
W_V = [[0.5, 0.1], [0.2, 0.4], [0.3, -0.1], [0.1, 0.2]]


def self_config(tmp_path, *, padding, causal=False, w_v=W_V, w_o=None) -> str:
    """A self-attention config over X4 with two heads; ``padding`` one bool per row of x."""
    flags = ", ".join("true" if p else "false" for p in padding)
    body = (f"[model]\ntype = \"matrices\"\nn_heads = 2\ncausal = {'true' if causal else 'false'}\n"
            f"[input]\nx = {X4}\npadding = [{flags}]\n"
            f"[weights]\nw_q = {W_QK}\nw_k = {W_QK}\nw_v = {w_v}\n" + ("" if w_o is None else f"w_o = {w_o}\n"))
    return write_config(tmp_path, body)


def test_padding_zeroes_the_padded_columns_and_equals_sdpa(tmp_path):
    padding = [False, True, False, False]
    allowed = ~torch.tensor(padding)[None, :].expand(4, -1)
    want_w, want_out = reference(X4, W_QK, W_QK, W_V, 2, allowed=allowed)
    source = load_source(self_config(tmp_path, padding=padding))
    result = source.extract(None)
    assert result.attention_mask == [1, 0, 1, 1] and result.attentions.shape == (1, 2, 4, 4)  # padded keys kept
    assert (result.attentions[..., 1] == 0).all()  # exactly 0, not merely small
    assert torch.allclose(result.attentions[0].double(), want_w, atol=1e-7)
    assert torch.allclose(_run_matrices(source.explain_inputs(None)).output[0], want_out, atol=1e-12)
    assert source.explain_inputs(None).padding == padding


def test_causal_and_padding_combine(tmp_path):
    padding = [False, False, False, True]
    allowed = torch.ones(4, 4, dtype=torch.bool).tril() & ~torch.tensor(padding)[None, :]
    want_w, want_out = reference(X4, W_QK, W_QK, W_V, 2, allowed=allowed)
    source = load_source(self_config(tmp_path, padding=padding, causal=True))
    result = source.extract(None)
    assert result.causal and (result.attentions[0][:, ~allowed] == 0).all()
    assert torch.allclose(result.attentions[0].double(), want_w, atol=1e-7)
    assert torch.allclose(_run_matrices(source.explain_inputs(None)).output[0], want_out, atol=1e-12)


def test_a_row_with_no_key_left_gets_weights_and_output_zero(tmp_path):
    """Causal, and position 0 is padding: x1 may see only itself, which is padding."""
    padding = [True, False, False, False]
    w_o = [[1.0, 0.0, 2.0], [0.0, 1.0, -1.0]]
    allowed = torch.ones(4, 4, dtype=torch.bool).tril() & ~torch.tensor(padding)[None, :]
    want_w, want_out = reference(X4, W_QK, W_QK, W_V, 2, allowed=allowed, w_o=w_o)
    source = load_source(self_config(tmp_path, padding=padding, causal=True, w_o=w_o))
    result = source.extract(None)
    assert (result.attentions[0, :, 0] == 0).all() and torch.isfinite(result.attentions).all()
    assert torch.allclose(result.attentions[0].double(), want_w, atol=1e-7)
    out = _run_matrices(source.explain_inputs(None)).output[0]
    assert (out[0] == 0).all() and torch.allclose(out, want_out, atol=1e-12)


# --- d_v ≠ d_k ----------------------------------------------------------------------------------------


def test_value_width_differs_from_key_width(tmp_path):
    """d_k = 2 (1 per head), d_v = 4 (2 per head), W_O [4, 3]."""
    w_v = [[1.0, 0.0, 0.5, -0.5], [0.0, 1.0, 0.2, 0.1], [0.3, 0.3, 1.0, 0.0], [-0.2, 0.4, 0.0, 1.0]]
    w_o = [[1.0, 0.0, 0.5], [0.0, 1.0, -0.5], [0.2, 0.3, 1.0], [0.1, -0.1, 0.0]]
    cfg = load_config(self_config(tmp_path, padding=[False] * 4, w_v=w_v, w_o=w_o))
    assert (cfg.d_qk, cfg.d_v) == (2, 4)
    source = ConfigSource(cfg)
    mha = source.explain_inputs(None).attention
    assert (mha.d_head, mha.d_value) == (1, 2)
    assert mha.v_proj.weight.shape == (4, 4) and mha.o_proj.weight.shape == (3, 4)
    want_w, want_out = reference(X4, W_QK, W_QK, w_v, 2, w_o=w_o)
    result = source.extract(None, details=True)
    assert result.values.shape == (1, 2, 4, 2) and result.queries.shape == (1, 2, 4, 1)
    assert torch.allclose(result.attentions[0].double(), want_w, atol=1e-7)
    out = _run_matrices(source.explain_inputs(None))
    assert out.output.shape == (1, 4, 3) and torch.allclose(out.output[0], want_out, atol=1e-12)
    # ‖f(x_j)‖ = ‖v_j^h W_O^h‖ with head h's rows of W_O (Kobayashi et al. 2020), by hand.
    v = torch.tensor(X4, dtype=D) @ torch.tensor(w_v, dtype=D)
    wo = torch.tensor(w_o, dtype=D)
    norms = torch.stack([(v[:, 2 * h:2 * h + 2] @ wo[2 * h:2 * h + 2]).norm(dim=-1) for h in range(2)])
    assert torch.allclose(result.value_norms[0].double(), norms, atol=1e-6)


def test_module_value_width_on_the_fused_path_too():
    torch.manual_seed(0)
    mha = MultiHeadAttention(6, 2, d_head=2, d_value=3, d_context=5, d_out=4).double()
    assert mha.v_proj.out_features == 6 and mha.o_proj.in_features == 6
    x, c = torch.randn(1, 3, 6, dtype=D), torch.randn(1, 4, 5, dtype=D)
    full = mha(x, c)
    fused = mha(x, c, need_weights=False)
    assert full.values.shape == (1, 2, 4, 3) and full.output.shape == (1, 3, 4)
    assert torch.allclose(full.output, fused.output, atol=1e-12)
    assert MultiHeadAttention(8, 2).v_proj.out_features == 8  # d_value defaults to d_head


# --- the CLI and the other commands ---------------------------------------------------------------------


def _column_labels(lines: list[str], first_row: int, start: int) -> list[str]:
    """The vertical column labels above ``first_row``, read top-down, from character ``start``."""
    header = [line for line in lines[:first_row] if line.strip() and not any(m in line for m in ("·", "▼", "("))]
    width = max(len(line) for line in header)
    cols = ["".join(line.ljust(width)[i] for line in header).strip() for i in range(start, width)]
    return [c for c in cols if c]


@pytest.mark.parametrize("kind", [[], ["--kind", "cross"]])
def test_heatmap_cli_shows_target_rows_and_source_columns(run_cli, kind):
    r = run_cli("heatmap", "--model", CROSS, "--values", "--width", "120", *kind)
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    rows = [i for i, line in enumerate(lines) if line.split()[:1] and line.split()[0] in ("le", "chat", "dort")]
    assert [lines[i].split()[0] for i in rows] == ["le", "chat", "dort"]
    assert lines[rows[0]].split()[1:] == [".66", ".11", ".23", "·"]  # head 0, le → the, cat, sleeps, <pad> (masked: ·)
    labels = _column_labels(lines, rows[0], len("chat "))
    assert "".join(labels) == "thecatsleeps<pad>"  # one character column each: the labels read down


def test_heatmap_view_axes_without_kind():
    source = load_source(CROSS)
    view = attnviz.api.attention_view(source, None, layer=0, head="all")
    assert view.row_labels == ["le", "chat", "dort"] and view.col_labels == ["the", "cat", "sleeps", "<pad>"]
    assert view.panels.shape == (2, 3, 4)
    same = attnviz.api.attention_view(source, None, layer=0, head="all", kind="cross")
    assert (same.panels == view.panels).all()


@pytest.mark.parametrize("command", [["heads"], ["rollout"], ["compare-heads"], ["rollout", "--norm"]])
def test_commands_reading_self_attention_refuse_in_one_line(run_cli, tmp_path, monkeypatch, command):
    # (its page, heatmap --out page.html, draws: tests/test_cross_results.py)
    monkeypatch.chdir(tmp_path)
    r = run_cli(*command, "--model", CROSS)
    assert r.exit_code == 2
    assert r.stderr.count("\n") == 1 and "one cross-attention layer" in r.stderr and "attnviz heatmap" in r.stderr


def test_cross_attention_refuses_causal_and_decoder_kind(run_cli):
    r = run_cli("heatmap", "--model", CROSS, "--causal")
    assert r.exit_code == 2 and "never causal" in r.stderr and "--causal" in r.stderr
    r = run_cli("heatmap", "--model", CROSS, "--kind", "decoder")
    assert r.exit_code == 2 and "no decoder self-attention" in r.stderr and "--kind cross" in r.stderr


def test_padded_self_attention_draws_everywhere(run_cli, tmp_path):
    path = self_config(tmp_path, padding=[True, False, False, True], causal=True)
    for command in (["heatmap", "--head", "all"], ["heads"], ["compare-heads"], ["rollout", "--norm"]):
        r = run_cli(*command, "--model", path)
        assert r.exit_code == 0, (command, r.stderr)
    r = run_cli("heatmap", "--model", path, "--out", str(tmp_path / "p.png"))
    assert r.exit_code == 0, r.stderr


# --- the reference ----------------------------------------------------------------------------------------

SELF = """
[model]
type = "matrices"
n_heads = 2
causal = true
[input]
x = [[1, 2], [3, 4], [5, 6]]
[weights]
w_q = [[0.1, 0.2], [0.3, 0.4]]
w_k = [[0.1, 0.2], [0.3, 0.4]]
w_v = [[0.1, 0.2], [0.3, 0.4]]
[reference]
"""

CROSS_BODY = """
[model]
type = "matrices"
[input]
x = [[1, 2], [3, 4]]
context = [[1, 0, 1], [0, 1, 1], [1, 1, 0]]
[weights]
w_q = [[0.1, 0.2], [0.3, 0.4]]
w_k = [[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]]
w_v = [[0.1], [0.3], [0.5]]
"""


def test_reference_claims_are_parsed(tmp_path):
    body = SELF + ("x_shape = [3, 2]\nscores = [[[1, 0, 0], [0.5, 0.5, 0], [0.2, 0.3, 0.5]]]\n"
                   "mask_true_means = \"masked\"\nweights = [[[1, 0, 0], [0.5, 0.5, 0], [0.2, 0.3, 0.5]]]\n"
                   "[reference.softmax]\nhead = 1\nrow = 2\nscores = [1, 2, 3]\nexp = [2.718, 7.389, 20.09]\n"
                   "sum = 30.2\nweights = [0.09, 0.24, 0.67]\n")
    ref = load_config(write_config(tmp_path, body)).reference
    assert ref.x_shape == (3, 2) and ref.mask_true_means == "masked" and ref.q_from is None
    assert ref.scores == (((1.0, 0.0, 0.0), (0.5, 0.5, 0.0), (0.2, 0.3, 0.5)),) and len(ref.weights) == 1
    assert ref.softmax == SoftmaxClaim(head=1, row=2, scores=(1.0, 2.0, 3.0), exp=(2.718, 7.389, 20.09), sum=30.2,
                                       weights=(0.09, 0.24, 0.67))
    cross = load_config(write_config(tmp_path, CROSS_BODY + "[reference]\nq_from = \"context\"\n", "c.toml"))
    assert cross.reference.q_from == "context" and cross.reference.softmax is None and cross.reference.scores == ()
    seed = load_config(str(ROOT / "sample_configs" / "seed_example.toml")).reference  # every old field kept
    assert seed.scale == 0.57735 and seed.q is not None and seed.output is not None and len(seed.weights) == 1


# --- every new error --------------------------------------------------------------------------------------


def _short(pattern: str) -> str:
    """A test id from an expected message: its words, without the regex."""
    return " ".join(re.sub(r"\\.|[^\w' =]", " ", pattern).split())[:60]


def _edit(body: str, old: str, new: str) -> str:
    assert old in body, old
    return body.replace(old, new, 1)


CROSS_ERRORS = [
    (("context = [[1, 0, 1], [0, 1, 1], [1, 1, 0]]", "context = [[1, 0, 1], [0, 1]]"),
     r"\[input\] context row 1 has 2 numbers but row 0 has 3"),
    (("context = [[1, 0, 1], [0, 1, 1], [1, 1, 0]]", "context = []"), r"\[input\] context must be a non-empty list of rows"),
    (("[input]", "[input]\ncontext_tokens = [\"a\", \"b\"]"), r"\[input\] context_tokens must be 3 strings, one label per row of context"),
    (("[input]", "[input]\ncontext_tokens = [1, 2, 3]"), r"context_tokens must be 3 strings"),
    (("w_k = [[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]]", "w_k = [[0.1, 0.2], [0.3, 0.4]]"),
     r"\[weights\] w_k has 2 rows but context has 3 columns; w_k must be \[3, d_out\] because K = context · W_K"),
    (("w_v = [[0.1], [0.3], [0.5]]", "w_v = [[0.1], [0.3]]"),
     r"\[weights\] w_v has 2 rows but context has 3 columns; w_v must be \[3, d_out\] because V = context · W_V"),
    (("w_q = [[0.1, 0.2], [0.3, 0.4]]", "w_q = [[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]]"),
     r"\[weights\] w_q has 3 rows but X has 2 columns; w_q must be \[2, d_out\] because Q = X · W_Q"),
    (("[model]", "[model]\ncausal = true"), r"\[model\] causal = true does not go with \[input\] context: cross-attention .* is never causal, .*; remove causal"),
    (("[input]", "[input]\npadding = [false, true]"), r"\[input\] padding has 2 entries but context has 3 rows .*one true/false per row of context"),
    (("[input]", "[input]\npadding = [0, 1, 0]"), r"\[input\] padding must be a list of true/false, one per row of context"),
    (("[input]", "[input]\npadding = [true, true, true]"), r"\[input\] padding marks every row of context as padding.* set at least one to false"),
    (("[input]", "[input]\npading = [true]"), r"unknown key 'pading' in \[input\]; did you mean 'padding'"),
]

SELF_ERRORS = [
    (("[input]", "[input]\ncontext_tokens = [\"a\"]"), r"\[input\] context_tokens label the rows of context, which is missing; add \[input\] context"),
    (("[input]", "[input]\npadding = [false, true]"), r"\[input\] padding has 2 entries but x has 3 rows"),
    (("w_v = [[0.1, 0.2], [0.3, 0.4]]", "w_v = [[0.1, 0.2, 0.3], [0.3, 0.4, 0.5]]"),
     r"\[model\] n_heads = 2 does not divide the 3 columns of w_v; choose n_heads among 1, 3"),
    (("w_v = [[0.1, 0.2], [0.3, 0.4]]", "w_v = [[0.1, 0.2, 0.3, 0.4], [0.3, 0.4, 0.5, 0.6]]\nw_o = [[1], [2]]"),
     r"\[weights\] w_o has 2 rows but w_v has 4 columns; w_o must be \[4, d_out\]"),
    (("w_v = [[0.1, 0.2], [0.3, 0.4]]", "w_v = [[0.1, 0.2, 0.3, 0.4], [0.3, 0.4, 0.5, 0.6]]\nb_v = [1, 2]"),
     r"\[weights\] b_v has 2 numbers; it needs 4"),
    (("[reference]", "[reference]\nx_shape = [3]"), r"\[reference\] x_shape = \[3\] must be two positive whole numbers.*e.g. \[4, 3\]"),
    (("[reference]", "[reference]\nx_shape = [3, 0]"), r"x_shape = \[3, 0\] must be two positive whole numbers"),
    (("[reference]", "[reference]\nx_shape = [3, 2.5]"), r"x_shape = \[3, 2.5\] must be two positive whole numbers"),
    (("[reference]", "[reference]\nscores = 1"), r"\[reference\] scores must be a list of matrices, one per head from head 0"),
    (("[reference]", "[reference]\nscores = [[[1, 2], [3]]]"), r"\[reference\] scores\[0\] row 1 has 1 numbers but row 0 has 2"),
    (("[reference]", "[reference]\nsoftmax = 1"), r"\[reference\] softmax must be a table, \[reference.softmax\]"),
    (("[reference]", "[reference]\nsoftmax = {scores = [1, 2], expp = [1, 2]}"),
     r"unknown key 'expp' in \[reference.softmax\]; did you mean 'exp'"),
    (("[reference]", "[reference]\nsoftmax = {scores = [1, 2], exp = [1, 2, 3]}"),
     r"\[reference.softmax\] scores has 2, exp has 3 numbers; give each one number per key"),
    (("[reference]", "[reference]\nsoftmax = {head = -1}"), r"\[reference.softmax\] head = -1 must be 0 or more"),
    (("[reference]", "[reference]\nsoftmax = {row = \"x1\"}"), r"\[reference.softmax\] row = 'x1' must be int"),
    (("[reference]", "[reference]\nsoftmax = {sum = \"big\"}"), r"\[reference.softmax\] sum = 'big' must be float"),
    (("[reference]", "[reference]\nsoftmax = {sum = inf}"), r"\[reference.softmax\] sum = inf must be a finite number"),
    (("[reference]", "[reference]\nsoftmax = {weights = [0.5, true]}"), r"\[reference.softmax\] weights contains True"),
    (("[reference]", "[reference]\nsoftmax = {head = 2}"), r"\[reference.softmax\] head = 2, but the layer has heads 0 to 1"),
    (("[reference]", "[reference]\nsoftmax = {row = 3}"), r"\[reference.softmax\] row = 3, but x has rows 0 to 2.*row = 0 is x1"),
    (("[reference]", "[reference]\nmask_true_means = \"true\""), r"\[reference\] mask_true_means = 'true'; use one of 'masked', 'attend'"),
    (("[reference]", "[reference]\nq_from = \"k\""), r"\[reference\] q_from = 'k'; use one of 'x', 'context'"),
    (("[reference]", "[reference]\nq_from = \"context\""), r"\[reference\] q_from says where cross-attention's Q comes from, but there is no \[input\] context"),
    (("[reference]", "[reference]\nmask_true_mean = \"masked\""), r"unknown key 'mask_true_mean' in \[reference\]; did you mean 'mask_true_means'"),
]


@pytest.mark.parametrize(("edit", "expected"), CROSS_ERRORS, ids=[_short(e) for _, e in CROSS_ERRORS])
def test_cross_config_errors(tmp_path, edit, expected):
    with pytest.raises(ConfigError, match=expected):
        load_config(write_config(tmp_path, _edit(CROSS_BODY, *edit)))


@pytest.mark.parametrize(("edit", "expected"), SELF_ERRORS, ids=[_short(e) for _, e in SELF_ERRORS])
def test_self_config_and_reference_errors(tmp_path, edit, expected):
    with pytest.raises(ConfigError, match=expected):
        load_config(write_config(tmp_path, _edit(SELF, *edit)))


def test_mask_claim_needs_a_mask(tmp_path):
    body = _edit(SELF, "causal = true", "causal = false") + "mask_true_means = \"masked\"\n"
    with pytest.raises(ConfigError, match=r"mask_true_means describes a mask, but this layer has none; add causal = true "
                                          r"or \[input\] padding"):
        load_config(write_config(tmp_path, body))


def test_causal_override_on_a_cross_config_is_refused():
    cfg = load_config(CROSS)
    assert isinstance(cfg, MatrixConfig) and cfg.context is not None
    with pytest.raises(UsageError, match=r"never causal.*leave out causal=True"):
        ConfigSource(cfg, causal=True)
