"""Cross-attention alone (a matrices config with a context, ``sample_configs/cross_attention.toml``):
the config and its saved result draw where they can (heatmap of layer 0, the page, ``attnviz.show``),
with the numbers of ``cross_attentions`` and titled "cross"; what reads self-attention (heads,
rollout, compare-heads, norm-based attention) refuses in one line that says why, never as an
internal error or with the encoder-decoder message."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import ROOT

import attnviz
from attnviz import api
from attnviz.errors import UsageError
from attnviz.render.page import head_values
from attnviz.result import AttentionResult
from attnviz.sources.resolve import load_source

CROSS = str(ROOT / "sample_configs" / "cross_attention.toml")
TARGET, SOURCE = ["le", "chat", "dort"], ["the", "cat", "sleeps", "<pad>"]


@pytest.fixture(scope="module")
def result() -> AttentionResult:
    return attnviz.extract(None, model=CROSS, details=True)


@pytest.fixture(scope="module")
def saved(tmp_path_factory, result) -> str:
    plain = AttentionResult(tokens=result.tokens, attentions=result.attentions, attention_mask=result.attention_mask,
                            model_name=result.model_name, cross_attentions=result.cross_attentions,
                            target_tokens=result.target_tokens, metadata=result.metadata)
    return str(plain.save(tmp_path_factory.mktemp("cross") / "cross.npz"))


def one_line_error(r, *, code: int = 2) -> str:
    assert r.exit_code == code, (r.exit_code, r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("attnviz: error: "), r.stderr
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr
    return r.stderr


def page_data(path: Path) -> dict:
    blob = re.search(r'<script type="application/json" id="attnviz-data">(.*?)</script>',
                     path.read_text(encoding="utf-8"), re.S).group(1)
    return json.loads(blob.replace("<\\/", "</"))


def check_cross_page(data: dict, cross: torch.Tensor) -> None:
    """A page of cross-attention alone: one kind, opened on it, every head's weights within a step."""
    assert list(data["kinds"]) == ["cross"] and data["initial"]["kind"] == "cross" and data["stats"] is None
    kind = data["kinds"]["cross"]
    assert kind["rows"] == TARGET and kind["cols"] == SOURCE and kind["layers"] == [0] and kind["heads"] == 2
    for h in range(2):
        got = head_values(kind, 0, h)
        np.testing.assert_allclose(got, cross[0, h].numpy(), rtol=2.0**-11, atol=1e-7)  # half floats


# --- the shape of the result, and what its attention_mask says -----------------------------------


def test_the_result_is_cross_attention_alone_with_its_padding_kept(result):
    assert result.cross_only and result.n_layers == 0 and result.layers_held == 1
    assert result.attentions.shape == (0, 2, 4, 4) and result.cross_attentions.shape == (1, 2, 3, 4)
    assert result.tokens == SOURCE and result.target_tokens == TARGET
    # The padded key stays, marked 0 in attention_mask, with weight 0 from every query (as documented).
    assert result.attention_mask == [1, 1, 1, 0]
    assert torch.equal(result.cross_attentions[..., 3], torch.zeros(1, 2, 3))
    assert torch.allclose(result.cross_attentions.sum(-1), torch.ones(1, 2, 3))
    assert "keeps its padded key positions" in AttentionResult.__doc__


def test_layers_of_a_cross_only_result(result, tmp_path):
    one = result.select_layers([0])
    assert one.metadata["layers"] == [0] and torch.equal(one.cross_attentions, result.cross_attentions)
    assert one.attentions.shape[0] == 0 and torch.equal(one.queries, result.queries)
    assert torch.equal(result.narrowed([0]).cross_attentions, result.cross_attentions)
    with pytest.raises(UsageError, match=r"layers=1 is out of range; .* has layers 0 to 0"):
        result.narrowed([1])
    back = AttentionResult.load(result.save(tmp_path / "one.npz", layers=[0]))
    assert back.cross_only and back.metadata["layers"] == [0] and torch.equal(back.cross_attentions, result.cross_attentions)


# --- 1, 2: the config's refusals say what it has -------------------------------------------------


@pytest.mark.parametrize("command", [["heads"], ["rollout"], ["compare-heads"]])
@pytest.mark.parametrize("kind", [[], ["--kind", "cross"], ["--kind", "decoder"]])
def test_what_reads_self_attention_refuses_in_one_line(run_cli, command, kind):
    err = one_line_error(run_cli(*command, "--model", CROSS, *kind))
    assert "one cross-attention layer" in err and "no self-attention" in err
    assert "attnviz heatmap" in err and "attnviz explain" in err
    assert "encoder-decoder" not in err and "value vectors" not in err and ".toml config" not in err
    if kind:
        assert err.startswith(f"attnviz: error: --kind {kind[1]}: ")


def test_norm_view_refuses_with_the_reason(run_cli):
    err = one_line_error(run_cli("rollout", "--norm", "--model", CROSS))
    assert "one cross-attention layer" in err and "no self-attention" in err and "attnviz heatmap" in err
    assert "norm-based attention" in err and "needs self-attention" in err
    assert "config engine" not in err and "value vectors" not in err and ".toml config" not in err
    with pytest.raises(UsageError, match="no self-attention"):
        api.norm_view(load_source(CROSS), None)


def test_decoder_kind_of_the_page_names_what_it_has(run_cli, tmp_path):
    err = one_line_error(run_cli("view", "--model", CROSS, "--kind", "decoder", "--page", str(tmp_path / "p.html")))
    assert "no decoder self-attention" in err and "--kind cross" in err and "encoder-decoder" not in err


# --- 3: the page of the config, of its saved result, and attnviz.show ------------------------------


@pytest.mark.parametrize("kind", [[], ["--kind", "cross"]])
def test_view_of_the_config_opens_on_cross_attention(run_cli, tmp_path, result, kind):
    out = tmp_path / "p.html"
    r = run_cli("view", "--model", CROSS, "--page", str(out), *kind)
    assert r.exit_code == 0 and r.stdout.strip() == f"wrote {out}", r.stderr
    data = page_data(out)
    check_cross_page(data, result.cross_attentions)
    # The query-key view: each head's q over the target, k over the source (the config gives details).
    qk = data["qk"]["0"]["1"]
    assert np.allclose(qk["q"], result.queries[0, 1].numpy(), atol=1e-3) and len(qk["q"]) == 3
    assert np.allclose(qk["k"], result.keys[0, 1].numpy(), atol=1e-3) and len(qk["k"]) == 4
    assert any("no self-attention" in note for note in data["notes"])


def test_heatmap_page_of_the_config(run_cli, tmp_path, result):
    out = tmp_path / "h.html"
    r = run_cli("heatmap", "--model", CROSS, "--layer", "0", "--out", str(out))
    assert r.exit_code == 0, r.stderr
    data = page_data(out)
    check_cross_page(data, result.cross_attentions)
    assert data["initial"]["view"] == "matrix"


def test_saved_result_heatmap_of_layer_0(run_cli, saved, result):
    r = run_cli("heatmap", "--model", saved, "--layer", "0", "--head", "1", "--values", "--width", "120")
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"{result.model_name} · cross · layer 0 · head 1")
    rows = [line.split() for line in lines if line.split()[:1] and line.split()[0] in TARGET]
    printed = torch.tensor([[0.0 if c == "·" else float(c) for c in row[1:]] for row in rows],  # ·: exactly 0
                           dtype=torch.float64)
    assert printed.shape == (3, 4)
    assert torch.allclose(printed, result.cross_attentions[0, 1].double(), atol=0.006)  # two decimals
    view = api.attention_view(load_source(saved), None, layer=0, head="all")
    assert np.allclose(view.panels, result.cross_attentions[0].numpy(), atol=1e-6)
    assert view.row_labels == TARGET and view.col_labels == SOURCE
    err = one_line_error(run_cli("heatmap", "--model", saved, "--layer", "1"))
    assert "--layer 1 is out of range" in err and "holds layers 0" in err


def test_saved_result_as_a_source(saved):
    source = load_source(saved)
    assert source.n_layers == 1 and source.layer_numbers == [0]
    assert not source.capabilities.self_attention and source.capabilities.cross


@pytest.mark.parametrize("command", [["heads"], ["rollout"], ["compare-heads"], ["rollout", "--norm"],
                                     ["heads", "--kind", "cross"], ["rollout", "--layer", "0"]])
def test_saved_result_refuses_what_reads_self_attention(run_cli, saved, command):
    err = one_line_error(run_cli(*command, "--model", saved))
    assert "one cross-attention layer" in err and "no self-attention" in err and "attnviz heatmap" in err
    assert "attnviz explain" not in err  # explain walks through models, not saved results
    assert "saved without them" not in err


def test_saved_result_view_and_show(run_cli, saved, result, tmp_path):
    out = tmp_path / "s.html"
    r = run_cli("view", "--model", saved, "--page", str(out))
    assert r.exit_code == 0, r.stderr
    data = page_data(out)
    check_cross_page(data, result.cross_attentions)
    assert data["qk"] is None  # saved without details: no q and k to show
    err = one_line_error(run_cli("view", "--model", saved, "--show", "table", "--page", str(tmp_path / "t.html")))
    assert "heads table" in err and "no self-attention" in err
    loaded = AttentionResult.load(saved)
    shown = attnviz.show(loaded)
    assert 'id="attnviz-data"' in shown.html
    check_cross_page(api.page_of_result(loaded).data(), result.cross_attentions)
    assert "attnviz-data" in loaded._repr_html_()
    with pytest.raises(UsageError, match="no decoder self-attention"):
        attnviz.show(loaded, kind="decoder")


# --- 5: titles say cross ---------------------------------------------------------------------------


def test_titles_say_cross(saved):
    for model in (CROSS, saved):
        source = load_source(model)
        assert " · cross · layer 0 · head 0" in api.attention_view(source, None, layer=0).title
        assert " · cross · head 0 · every layer" in api.attention_view(source, None).title
        assert " · cross · what 'chat'" in api.query_view(source, None, "chat").title
