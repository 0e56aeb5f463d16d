"""Long inputs read a block of query rows at a time: the described mask, the blocked output, and every
consumer (head statistics, compare-heads, rollout, flow, pooled heatmaps) against the whole matrices."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnviz import api
from attnviz.attention import combine_masks, decoding_mask, padding_mask, scaled_dot_product_attention
from attnviz.attention.rows import AttentionRows, RowMask, blocked_attention
from attnviz.render.view import max_pool
from attnviz.sources import stream
from attnviz.views.heatmap import head_across_layers_view, heatmap_view

TEXTS = ["the cat sat on the mat . the cat sat on the mat again , and then the dog came", "a dog ran"]


def _reference_mask(attention_mask, t, start, window):
    causal = None if start is None else decoding_mask(start, t, window=window)
    return combine_masks(padding_mask(attention_mask), causal)


@pytest.mark.parametrize(("start", "window"), [(None, None), (0, None), (0, 3), (4, None), (4, 3)])
def test_a_described_mask_is_the_built_one(start, window):
    t = 6
    keys = t + (start or 0)
    attention_mask = torch.ones(2, keys, dtype=torch.long)
    attention_mask[1, keys - 2 :] = 0
    described = RowMask.of(attention_mask, t, start=start, window=window)
    built = _reference_mask(attention_mask, t, start, window).expand(2, 1, t, keys)
    assert torch.equal(described.dense().expand(2, 1, t, keys), built)
    for first, stop in ((0, 2), (2, 5), (5, 6)):
        width = described.visible(stop)
        assert not built[..., first:stop, width:].any()  # what a block leaves out is masked
        assert torch.equal(described.rows(first, stop, width).expand(2, 1, stop - first, width),
                           built[..., first:stop, :width])


@pytest.mark.parametrize(("start", "window", "padded"), [(None, None, True), (0, None, False), (0, None, True),
                                                          (0, 3, False), (4, None, True)])
def test_the_blocked_output_equals_the_whole_softmax(start, window, padded, monkeypatch):
    monkeypatch.setattr("attnviz.attention.rows.BLOCK_ELEMENTS", 1)  # 16 rows a block: several blocks
    torch.manual_seed(0)
    t, keys = 40, 40 + (start or 0)
    q, k, v = torch.randn(2, 3, t, 8), torch.randn(2, 3, keys, 8), torch.randn(2, 3, keys, 5)
    attention_mask = torch.ones(2, keys, dtype=torch.long)
    if padded:
        attention_mask[1, keys - 7 :] = 0
        if start is not None:
            attention_mask[1, :1] = 0  # left padding too: a causal row sees no key at all
    described = RowMask.of(attention_mask, t, start=start, window=window)
    expected, weights = scaled_dot_product_attention(q, k, v, mask=_reference_mask(attention_mask, t, start, window))
    assert torch.allclose(blocked_attention(q, k, v, described), expected, atol=1e-5)
    rows = AttentionRows(q, k, described)
    for item in range(2):
        assert torch.allclose(rows.dense(item), weights[item], atol=1e-6)


@pytest.mark.parametrize("family", ["bert", "gpt2", "llama", "mistral"])
def test_the_native_engine_gives_the_same_weights_as_row_blocks(tiny_hf, family, monkeypatch):
    source = api.load(tiny_hf[family], engine="native")
    whole = source.extract_batch(TEXTS)
    monkeypatch.setattr(stream, "ROWS_FROM_BYTES", -1)
    made = source.extract_batch(TEXTS)
    for a, b in zip(whole, made, strict=True):
        assert torch.allclose(a.attentions, b.attentions, atol=1e-5)
    parts = next(iter(source.stream_batch(TEXTS)))[1]
    assert all(part.lazy for part in parts)  # a negative control: the blocks really were the path taken


def _never_whole(monkeypatch):
    """Fail if any consumer builds a layer's whole matrix from its row blocks."""
    def refuse(*args, **kwargs):
        raise AssertionError("a long input's layer was built whole")

    monkeypatch.setattr(AttentionRows, "dense", refuse)


def test_head_statistics_from_row_blocks(tiny_hf, monkeypatch):
    source = api.load(tiny_hf["gpt2"], engine="native")
    whole = api.head_table_of_texts(source, TEXTS)
    monkeypatch.setattr(stream, "ROWS_FROM_BYTES", -1)
    _never_whole(monkeypatch)
    blocks = api.head_table_of_texts(source, TEXTS)
    for name, value in whole.stats.items():
        assert torch.allclose(blocks.stats[name], value, atol=1e-6), name
    assert blocks.n_texts == 2


def test_compare_heads_from_row_blocks(tiny_hf, monkeypatch):
    source = api.load(tiny_hf["llama"], engine="native")
    monkeypatch.setattr("attnviz.analysis.compare.THUMBNAIL_CELLS", 5)  # pooled 4×4 blocks
    monkeypatch.setattr("attnviz.analysis.compare.DISTANCE_BUDGET", 1)  # distances from some rows only
    whole = api.compare_heads_of_text(source, TEXTS[0])
    monkeypatch.setattr(stream, "ROWS_FROM_BYTES", -1)
    _never_whole(monkeypatch)
    blocks = api.compare_heads_of_text(source, TEXTS[0])
    assert whole.display.shape == blocks.display.shape and whole.display.shape[-1] < len(whole.labels) * 4 + 1
    assert torch.allclose(whole.display, blocks.display, atol=1e-6)
    assert np.allclose(whole.distance, blocks.distance, atol=1e-5)
    assert whole.notes == blocks.notes and any("estimated" in note for note in whole.notes)


@pytest.mark.parametrize("fusion", ["mean", "max", "min"])
def test_rollout_and_flow_from_row_blocks(tiny_hf, monkeypatch, fusion):
    from attnviz.attribution import flow_of_text, rollout_of_text

    source = api.load(tiny_hf["gpt2"], engine="native")
    text = TEXTS[1] + " and back"
    whole, _ = rollout_of_text(source, text, head_fusion=fusion)
    whole_flow, _ = flow_of_text(source, text, head_fusion=fusion)
    monkeypatch.setattr(stream, "ROWS_FROM_BYTES", -1)
    _never_whole(monkeypatch)
    blocks, _ = rollout_of_text(source, text, head_fusion=fusion)
    assert torch.allclose(whole, blocks, atol=1e-6)
    assert torch.allclose(whole_flow, flow_of_text(source, text, head_fusion=fusion)[0], atol=1e-6)


@pytest.mark.parametrize(("layer", "head"), [(1, 0), (0, "all"), (1, "mean"), (None, 2), (None, "all")])
def test_a_long_heatmap_is_pooled_as_each_layer_is_computed(tiny_hf, monkeypatch, layer, head):
    """Against the whole result drawn and then max-pooled, as the renderer would: the same panels,
    labels, titles and sink marks (sinks found on the tokens, marked on their blocks)."""
    source = api.load(tiny_hf["gpt2"], engine="native")
    text = TEXTS[0]
    result = source.extract(text)
    full = head_across_layers_view(result, head=head) if layer is None else heatmap_view(result, layer=layer, head=head)
    monkeypatch.setattr("attnviz.render.view.FIGURE_CELLS", 6)
    monkeypatch.setattr("attnviz.views.pooled.FIGURE_CELLS", 6)
    monkeypatch.setattr("attnviz.views.pooled.GRID_CELLS", 6)
    monkeypatch.setattr(stream, "ROWS_FROM_BYTES", -1)
    _never_whole(monkeypatch)
    view = api.attention_view(source, text, layer=layer, head=head)
    factor = -(-len(result.tokens) // 6)
    expected = max_pool(full, factor)
    assert factor > 1 and view.panels.shape == expected.panels.shape
    assert np.allclose(view.panels, expected.panels, atol=1e-6)
    assert (view.title, view.panel_titles, view.row_labels, view.col_labels) == \
        (expected.title, expected.panel_titles, expected.row_labels, expected.col_labels)
    assert view.marks == expected.marks
    assert any("downsampled" in note for note in view.notes)
    # Drawn smaller still (a terminal): pooled again, the ranges and the note still count tokens.
    again, reference = max_pool(view, 2), max_pool(full, factor * 2)
    assert np.allclose(again.panels, reference.panels, atol=1e-6) and again.row_labels == reference.row_labels
    assert again.notes[-1] == reference.notes[-1] and not any(n in again.notes[:-1] for n in view.notes[-1:])


def test_a_long_heatmap_refuses_a_head_or_layer_out_of_range(tiny_hf, monkeypatch):
    from attnviz.errors import UsageError

    monkeypatch.setattr("attnviz.render.view.FIGURE_CELLS", 6)
    source = api.load(tiny_hf["gpt2"], engine="native")
    with pytest.raises(UsageError, match="head=9 is out of range"):
        api.attention_view(source, TEXTS[0], layer=0, head=9, pool=True)
    with pytest.raises(UsageError, match="layer=7 is out of range"):
        api.attention_view(source, TEXTS[0], layer=7, head=0, pool=True)


def test_the_commands_read_a_long_input_block_by_block(tiny_hf, monkeypatch, run_cli, tmp_path):
    """heads (table and --file), compare-heads, rollout and a heatmap to PNG, run as a user runs them,
    on layers handed over as row blocks: none builds a layer whole, and heads prints what it printed."""
    model = ["--model", tiny_hf["llama"]]
    text = TEXTS[0]
    before = run_cli("heads", text, *model, "--format", "json")
    assert before.exit_code == 0, before.output
    monkeypatch.setattr(stream, "ROWS_FROM_BYTES", -1)
    monkeypatch.setattr("attnviz.render.view.FIGURE_CELLS", 6)
    _never_whole(monkeypatch)
    after = run_cli("heads", text, *model, "--format", "json")
    assert after.exit_code == 0, after.output
    import json

    rows_before, rows_after = json.loads(before.stdout)["heads"], json.loads(after.stdout)["heads"]
    assert [r["labels"] for r in rows_before] == [r["labels"] for r in rows_after]
    assert all(abs(a["entropy"] - b["entropy"]) < 1e-5 for a, b in zip(rows_before, rows_after, strict=True))
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    for args in (["heads", "--file", str(texts)], ["compare-heads", text], ["rollout", text],
                 ["heatmap", text, "--layer", "1", "--out", str(tmp_path / "long.png")]):
        done = run_cli(*args, *model)
        assert done.exit_code == 0, (args, done.output)
    assert (tmp_path / "long.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("mask", ["none", "causal", "window", "padding"])
def test_any_columns_from_the_rows_normalisers_equal_the_rows_weights(mask):
    """``columns`` (a tile's keys alone, from each row's log-sum-exp) equals those cells of ``block``."""
    torch.manual_seed(4)
    n = 300
    q, k = torch.randn(2, 3, n, 8) * 2, torch.randn(2, 3, n, 8)
    padding = torch.ones(2, n, dtype=torch.long)
    padding[1, 250:] = 0
    described = {"none": None, "causal": RowMask.of(None, n, start=0), "window": RowMask.of(None, n, start=0, window=40),
                 "padding": RowMask.of(padding, n, start=0)}[mask]
    rows = AttentionRows(q, k, described)
    item, first, stop, c0, c1 = 1, 120, 260, 64, 200
    norms = rows.normalisers(item, first, stop, heads=slice(1, 3))
    got = rows.columns(item, first, stop, c0, c1, norms, heads=slice(1, 3))
    want = rows.block(item, first, stop, heads=slice(1, 3))
    want = torch.nn.functional.pad(want, (0, max(0, c1 - want.shape[-1])))[..., c0:c1]
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)
