"""The views the commands show, as API functions (issue 28): generate's summary and heatmap, two runs
compared head by head, the compare-heads page, and heads for one layer computing only that layer."""

from __future__ import annotations

import pytest
import torch
from conftest import ROOT, TINY

import attnviz
from attnviz import api
from attnviz.errors import AttnvizWarning, UsageError

CAUSAL = str(ROOT / "sample_configs" / "causal.toml")
TEXT = "the cat sat on the mat"


def test_generation_summary_and_view_read_the_generated_rows():
    result = attnviz.generate("the cat", CAUSAL, max_new_tokens=4)
    start = int(result.metadata["prompt_length"])
    summary = api.generation_summary(result, layer=1, head=0, top=2)
    assert [s.position for s in summary.steps] == list(range(start, len(result.tokens)))
    assert "layer 1 · head 0" in summary.heading() and not summary.seq2seq
    row = result.attentions[1, 0, start].double()
    best = row[: start + 1].topk(2)
    assert [k for k, _, _ in summary.steps[0].attended] == best.indices.tolist()
    view = api.generation_view(result)  # every layer, mean of heads
    expected = result.attentions.double().mean((0, 1))[start:]
    assert torch.allclose(torch.from_numpy(view.panels[0]), expected)
    with pytest.raises(UsageError, match="layer=9 is out of range"):
        api.generation_view(result, layer=9)


def test_two_runs_compared_head_by_head():
    source = api.load(TINY)
    same = api.compare_runs_of_text(source, TEXT, vs=TEXT)
    assert same.change.shape == (source.n_layers, source.extract(TEXT).n_heads) and float(same.change.abs().max()) == 0
    other = api.compare_runs_of_text(source, TEXT, other=api.load(TINY), layer=1, other_name="again")
    assert other.overview.layers == [1] and float(other.change.abs().max()) == 0 and other.other_name == "again"
    with pytest.warns(AttnvizWarning, match="compared position by position"):
        moved = api.compare_runs_of_text(source, TEXT, vs="a dog ran to the log")
    assert float(moved.change.max()) > 0  # other tokens, other patterns (of the same count)
    with pytest.raises(UsageError, match="one of the two"):
        api.compare_runs_of_text(source, TEXT)
    with pytest.raises(UsageError, match="layer=7 is out of range"):
        api.compare_runs_of_text(source, TEXT, vs=TEXT, layer=7)


def test_the_compare_heads_page_carries_the_head_distances():
    source = api.load(TINY)
    overview = api.compare_heads_of_text(source, TEXT)
    page = api.compare_heads_page(source, TEXT, overview)
    assert page.initial["view"] == "extras" and page.extras[0]["name"] == "distances"
    n = len(overview.names)
    assert len(page.extras[0]["rows"]) == n and len(page.extras[0]["values"]) == n


def test_heads_for_one_layer_compute_only_that_layer(monkeypatch):
    source = api.load(TINY)
    whole = api.heads_of(source, [TEXT])
    asked: list = []
    original = source.stream_batch

    def recorded(*args, **kwargs):
        asked.append(kwargs.get("layers"))
        return original(*args, **kwargs)

    monkeypatch.setattr(source, "stream_batch", recorded)
    one = api.heads_of(source, [TEXT], layer=1)
    assert asked == [[1]] and one.layers in (None, [1]) and one.shape[0] == 1
    for got, expected in zip(one.select(layer=1), whole.select(layer=1), strict=True):  # rounded to 6 digits
        assert got["labels"] == expected["labels"] and got["head"] == expected["head"] and got["layer"] == 1
        assert all(abs(got[name] - expected[name]) <= 2e-6 for name in one.stats)
    with pytest.raises(UsageError, match="is out of range"):
        api.heads_of(source, [TEXT], layer=5)
