"""The API gives what each command shows (issue 11, point 1): a Python user gets the same data
without copying a command."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import SEED, TINY

import attnviz
from attnviz import api
from attnviz.analysis import metrics
from attnviz.analysis.transforms import drop_special, to_words
from attnviz.attribution.rollout import rollout
from attnviz.errors import UsageError

TEXT = "Unbelievably, the cat sat on the mat."


@pytest.fixture(scope="module")
def minilm():
    return api.load()


def test_attention_view_is_the_heatmap_pipeline(minilm):
    result = attnviz.extract(TEXT)
    view = api.attention_view(minilm, TEXT, layer=2, head=5,
                              reading=api.Reading(hide_special=True, renormalize=True, words=True))
    expected = to_words(drop_special(result, renormalize=True)).attentions[2, 5].numpy()
    assert np.allclose(view.panels[0], expected, atol=1e-6)
    assert "[CLS]" not in view.row_labels and "unbelievably" in [label.lower() for label in view.row_labels]
    with pytest.raises(UsageError, match="hide_special"):
        api.attention_view(minilm, TEXT, reading=api.Reading(renormalize=True))


def test_one_head_across_every_layer(minilm, run_cli):
    result = attnviz.extract(TEXT)
    view = api.attention_view(minilm, TEXT, layer=None, head=3)
    assert view.panels.shape[0] == 6 and view.panel_titles[4] == "L4"
    assert np.allclose(view.panels, result.attentions[:, 3].numpy(), atol=1e-6)
    mean = api.attention_view(minilm, TEXT, layer=None, head="mean")
    assert np.allclose(mean.panels, result.attentions.double().mean(1).numpy(), atol=1e-6)
    r = run_cli("heatmap", TEXT, "--layer", "all", "--head", "3", "--width", "120")
    assert r.exit_code == 0 and "head 3 · every layer" in r.stdout
    grid = api.attention_view(minilm, TEXT, head="all")  # every head of every layer, a row per layer
    assert grid.panels.shape[0] == 72 and grid.columns == 12 and grid.panel_titles[13] == "L1H1"
    assert np.allclose(grid.panels[13], result.attentions[1, 1].numpy(), atol=1e-6)
    r = run_cli("heatmap", TEXT, "--head", "all", "--width", "200")  # --layer all is the default
    assert r.exit_code == 0 and "every head · every layer" in r.stdout and "L5H11" in r.stdout


def test_rollout_and_norm_views(minilm):
    result = minilm.extract(TEXT)
    view = api.rollout_view(minilm, TEXT, layer=2, fusion="max")
    assert np.allclose(view.panels[0], rollout(result.attentions, head_fusion="max")[2].numpy(), atol=1e-9)
    norm = api.norm_view(minilm, TEXT, layer=1, head=4)
    expected = metrics.norm_attention(result.attentions, result.value_norms)[1, 4].numpy()
    assert np.allclose(norm.panels[0], expected, rtol=1e-5, atol=1e-6)


def test_rollout_refuses_what_it_would_ignore(run_cli):
    r = run_cli("rollout", TEXT, "--head", "3")
    assert r.exit_code == 2 and "--head applies to norm and attn-grad" in r.stderr
    r = run_cli("rollout", "--model", SEED, "--width", "80")  # a fixed input needs no TEXT, as in heatmap
    assert r.exit_code == 0, r.stderr


def test_heads_of_texts_and_probe(tiny_hf):
    table = api.heads_of(api.load(TINY), ["the cat sat on the mat", "a dog ran after the cat"])
    assert table.n_texts == 2 and table.shape == (2, 4)
    gpt2 = api.load(tiny_hf["gpt2"])
    probe = api.heads_of(gpt2, probe="induction")
    assert probe.n_texts == 1 and probe.shape[0] == gpt2.n_layers
    with pytest.raises(UsageError, match="one of the two"):
        api.heads_of(gpt2)


def test_explain_returns_the_walkthrough():
    walk = api.explain()
    direct = attnviz.api.explain(None, SEED)
    assert torch.equal(torch.as_tensor(walk.to_dict()["output"]), torch.as_tensor(direct.to_dict()["output"]))
    from attnviz.sources.resolve import default_model_folder

    real = api.explain("The cat sat", str(default_model_folder()), layer=2, head=5)
    assert real.model_kind == "model" and real.shown_heads == [5] and real.tokens[0] == "[CLS]"
    with pytest.raises(UsageError, match="positive number"):
        api.explain(scale="-1")
    with pytest.raises(UsageError, match="numbered from 0"):
        api.explain(layer=-1)


def test_the_comparison_is_data_before_it_is_drawn(minilm):
    from attnviz.analysis.compare import comparison

    overview = api.compare_heads_of_text(minilm, TEXT, layer=1)
    result = comparison(overview, top=2)
    d = overview.distance
    upper = d[np.triu_indices(len(d), 1)]
    assert result.pairs.most_similar[0][2] == pytest.approx(upper.min())
    assert result.pairs.most_different[0][2] == pytest.approx(upper.max())
    assert sorted(result.rows) == sorted(overview.names) and result.matrix.shape == d.shape
    assert np.allclose(np.sort(result.matrix.ravel()), np.sort(d.ravel()))  # the same numbers, reordered
