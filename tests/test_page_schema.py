"""The page scripts' data contract (issue 42): ``Page.data()`` checked against the one declaration of it,
attnviz/render/page_schema.py, for a page opened on every view and every kind of page: short, long (pooled,
with each query's strongest keys), a generation's (and an encoder-decoder's), a heatmap view's, one with an
extra matrix, and what ``attnviz serve`` hands (its home page and /api/page). The checker names the key path."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import TINY
from test_pyramid import _causal_weights  # the pyramid tests' causal softmax of random scores

from attnviz import api
from attnviz.render.html import render_html
from attnviz.render.page import PageBuilder, page_of_view
from attnviz.render.page_schema import PAGE, PageDataError, check_page_data
from attnviz.render.page_views import PAGE_VIEWS
from attnviz.render.view import matrix_view
from attnviz.result import AttentionResult
from attnviz.views.page_parts import page_of_result, page_sinks

TEXT = "The cat sat on the mat."


@pytest.fixture(scope="module")
def source():
    return api.load(TINY)


@pytest.fixture(scope="module")
def short(source):
    return api.page_view(source, TEXT).data()


def _blob(html: str) -> dict:
    found = re.search(r'<script type="application/json" id="attnviz-data">(.*?)</script>', html, re.S)
    return json.loads(found.group(1).replace("<\\/", "</"))


def test_the_declaration_names_every_key_the_page_hands(short):
    assert set(short) == set(PAGE.keys) and not PAGE.optional


@pytest.mark.parametrize("view", list(PAGE_VIEWS))
def test_a_short_page_opened_on_each_view_keeps_the_contract(source, view):
    data = api.page_view(source, TEXT, view=view).data()
    check_page_data(data)
    assert data["initial"]["view"] == view and data["stats"] is not None and data["qk"]


def test_the_written_page_carries_the_same_data(source, tmp_path):
    page = api.page_view(source, TEXT)
    data = _blob(render_html(page, tmp_path / "p.html").read_text(encoding="utf-8"))
    check_page_data(data)
    assert data["kinds"] == json.loads(json.dumps(page.data()["kinds"]))


def test_a_long_pooled_page_keeps_the_contract():
    n = 700  # over LEAVES_ALWAYS: pooled levels, the finest left out by the budget, each query's strongest keys
    weights = _causal_weights(2, n, 1)
    weights[:, :, 0] += 1.0  # a sink on the first key, for the marker to find
    weights /= weights.sum(-1, keepdims=True)
    builder = PageBuilder("long", "synthetic", cells=weights.size, layers=2, budget=1, sinks=page_sinks)
    tokens = [f"t{i}" for i in range(n)]
    for layer in (3, 5):
        builder.add_layer(layer, weights, rows=tokens, cols=tokens, causal=True)
    page = builder.finish(initial={"kind": "self", "layer": 0, "head": 0, "view": "matrix"})
    data = page.data()
    check_page_data(data)
    kind = data["kinds"]["self"]
    assert kind["included"] < len(kind["levels"]) and kind["lines"] > 0 and data["notes"]
    assert kind["pyramids"][0][0]["sinks"] == [0] and "lines" in kind["pyramids"][0][0]


def test_a_long_page_of_the_model_with_its_statistics_keeps_the_contract(tmp_path):
    config = tmp_path / "longer.toml"  # the tiny config, taking 1,024 tokens
    config.write_text(re.sub(r"max_positions = 512", "max_positions = 1024",
                             Path(TINY).read_text(encoding="utf-8")), encoding="utf-8")
    text = " ".join(["the cat sat on the mat"] * 120)
    data = api.page_view(api.load(str(config)), text, budget=1, view="table").data()
    check_page_data(data)
    assert data["kinds"]["self"]["included"] < len(data["kinds"]["self"]["levels"]) and data["stats"]["rows"]


def _generated() -> AttentionResult:
    tokens = ["The", "cat", "sat", "on", "the", "mat"]
    scores = torch.randn(2, 3, 6, 6, generator=torch.Generator().manual_seed(0))
    attentions = scores.masked_fill(torch.ones(6, 6, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
    return AttentionResult(tokens=tokens, attentions=attentions, causal=True, model_name="tiny-lm",
                           metadata={"generation": True, "prompt_length": 3})


def _seq2seq() -> AttentionResult:
    source, target = ["Der", "Hund", "bellt", "</s>"], ["<s>", "The", "dog", "barks", "</s>"]
    g = torch.Generator().manual_seed(2)
    decoder = torch.randn(2, 3, 5, 5, generator=g).masked_fill(torch.ones(5, 5, dtype=torch.bool).triu(1),
                                                                 float("-inf")).softmax(-1)
    return AttentionResult(tokens=source, attentions=torch.randn(2, 3, 4, 4, generator=g).softmax(-1),
                           model_name="tiny-t5", decoder_attentions=decoder,
                           cross_attentions=torch.randn(2, 3, 5, 4, generator=g).softmax(-1), target_tokens=target,
                           target_special=[True, False, False, False, True],
                           metadata={"generation": True, "encoder_decoder": True, "target_start": 1})


@pytest.mark.parametrize("view", ["query", "head", "table"])
def test_a_generations_page_keeps_the_contract(view):
    data = page_of_result(_generated(), view=view).data()
    check_page_data(data)
    assert data["generation"]["promptLength"] == 3 and data["initial"]["query"] == 3
    data = page_of_result(_seq2seq(), kind="decoder", view=view).data()
    check_page_data(data)
    assert set(data["kinds"]) == {"self", "decoder", "cross"} and data["generation"]["kinds"] == ["decoder", "cross"]


def test_a_heatmap_views_page_and_an_extra_matrix_keep_the_contract(short):
    values = np.array([[[-0.2, 0.1], [0.05, 0.4]], [[0.3, 0.1], [0.2, 0.0]]])
    view = matrix_view(values, ["a", "b"], ["a", "b"], title="t", panel_titles=["p", "q"], signed=True,
                       cmap="coolwarm")
    page = page_of_view(view)
    page.add_matrix("distances", np.eye(2), ["L0H0", "L0H1"], ["L0H0", "L0H1"], title="head distances")
    data = page.data()
    check_page_data(data)
    assert data["kinds"]["self"]["panelTitles"] == ["p", "q"] and data["extras"][0]["name"] == "distances"


def test_what_the_server_hands_keeps_the_contract(source):
    from starlette.testclient import TestClient

    from attnviz.serve import create_app

    client = TestClient(create_app(source), base_url="http://127.0.0.1:8000")
    home = client.get("/")
    assert home.status_code == 200
    data = _blob(home.text)
    check_page_data(data)
    assert data["live"]["endpoint"] == "/api/page"
    answer = client.get("/api/page", params={"text": TEXT})
    assert answer.status_code == 200
    check_page_data(answer.json())


@pytest.mark.parametrize(("change", "path"), [
    (lambda d: d["kinds"]["self"]["pyramids"][0][1].__setitem__("vmax", "high"), r"kinds\.self\.pyramids\[0\]\[1\]\.vmax: expected a number"),
    (lambda d: d["kinds"]["self"].pop("causal"), r"kinds\.self: missing kinds\.self\.causal"),
    (lambda d: d["initial"].__setitem__("zoom", 2), r"initial: undeclared initial\.zoom"),
    (lambda d: d["stats"]["rows"][2].pop(), r"stats\.rows\[2\]: .* cells for"),
    (lambda d: d["stats"]["rows"][0].__setitem__(1, True), r"stats\.rows\[0\]\[1\]: expected int"),
    (lambda d: d["views"][0].__setitem__("needs", "qq"), r"views\[0\]\.needs: expected one of"),
    (lambda d: d.__setitem__("version", 2), r"version: expected one of 1"),
    (lambda d: d["kinds"]["self"]["pyramids"].pop(), r"kinds\.self\.pyramids: 1 layers of pyramids for 2 layers"),
    (lambda d: d["initial"].__setitem__("kind", "cross"), r"initial\.kind: 'cross' is not one of the page's kinds"),
    (lambda d: d["kinds"]["self"]["pyramids"][1][0].__setitem__("sinks", [99]), r"pyramids\[1\]\[0\]\.sinks: a key outside"),
])
def test_the_checker_names_the_key_path(short, change, path):
    broken = copy.deepcopy(short)
    change(broken)
    with pytest.raises(PageDataError, match=path):
        check_page_data(broken)


def test_an_exported_page_keeps_the_contract_and_marks_its_sinks(run_cli, tmp_path):
    texts = tmp_path / "texts.txt"
    texts.write_text(f"{TEXT}\nA dog barked at the cat.\n", encoding="utf-8")
    r = run_cli("export", str(texts), "--formats", "html", "--out", str(tmp_path / "out"), "--model", TINY)
    assert r.exit_code == 0, r.stderr
    pages = sorted((tmp_path / "out").glob("*.html"))
    assert len(pages) == 2
    for path in pages:
        data = _blob(path.read_text(encoding="utf-8"))
        check_page_data(data)
        assert "kind" not in data["initial"]  # export's page opens on its first kind
    # The sinks the export's page marks (views/page_parts.page_sinks, its builder's marker) are there.
    assert any(head["sinks"] for layer in data["kinds"]["self"]["pyramids"] for head in layer)
