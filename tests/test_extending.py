"""A statistic and an attribution method added from outside the package (README, Development):
each is one record, registered from this test module, and every command and API function that lists
statistics or methods takes it up, without a line of attnviz changed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

import pytest
import torch
from conftest import TINY

from attnviz import api
from attnviz.analysis.statistics import STATISTICS, Statistic, registered
from attnviz.attribution import methods
from attnviz.render.view import matrix_view

TEXT = "the cat sat on the mat and the dog sat on the log"


def _far_rows(block) -> torch.Tensor:
    """Per head, the weight each query row puts on keys more than 2 tokens away, summed over the block's rows."""
    w = block.weights  # [heads, rows, width]
    rows = torch.arange(block.start, block.start + w.shape[1])[:, None]
    keys = torch.arange(w.shape[2])[None, :]
    return (w * ((rows - keys).abs() > 2)).sum((-1, -2)).double()


FAR = Statistic("far", "far", "mean weight on keys more than 2 tokens away", _far_rows, label="far-reaching",
                threshold=0.5)


def _far_by_hand(attentions: torch.Tensor) -> torch.Tensor:
    """The same statistic from whole layers ``[L, H, n, n]``: a mask and a mean over query rows."""
    n = attentions.shape[-1]
    i = torch.arange(n)
    far = ((i[:, None] - i[None, :]).abs() > 2).double()
    return (attentions.double() * far).sum(-1).mean(-1)


def test_a_statistic_added_from_a_test_module_reaches_the_table_the_cli_and_the_page(run_cli):
    source = api.load(TINY)
    with registered(FAR):
        table = api.heads_of(source, [TEXT])
        expected = _far_by_hand(source.extract(TEXT).attentions)
        torch.testing.assert_close(table.stats["far"], expected, rtol=1e-6, atol=1e-9)  # float32 weights
        rows = table.rows()
        assert all(("far-reaching" in row["labels"]) == (row["far"] >= 0.5) for row in rows)
        r = run_cli("heads", TEXT, "--model", TINY, "--sort", "far", "--format", "json")
        assert r.exit_code == 0, r.stderr
        printed = json.loads(r.stdout)["heads"]
        assert [h["far"] for h in printed] == sorted((h["far"] for h in printed), reverse=True)
        assert {(h["layer"], h["head"]): h["far"] for h in printed} == pytest.approx(
            {(row["layer"], row["head"]): row["far"] for row in rows}, abs=1e-6)
        page = api.page_view(source, TEXT)
        assert "far" in page.stats["columns"] and page.stats["descriptions"]["far"] == FAR.description
    assert "far" not in STATISTICS  # gone with the block
    assert "far" not in api.heads_of(source, [TEXT]).stats


def _last_layer_mean(source, text, request: methods.Request):
    """A method of this test: the mean of the heads of the last layer (or of ``request.layer``)."""
    result = source.extract(text, pair=request.pair)
    layer = result.n_layers - 1 if request.layer is None else request.layer
    mean = result.attentions[layer].double().mean(0)
    return matrix_view(mean[None].numpy(), result.tokens, result.tokens, cmap=request.cmap or "viridis",
                       title=f"{result.model_name} · mean of the heads of layer {layer}", panel_titles=[f"layer {layer}"])


MEAN = methods.Method("last-mean", "mean of the last layer's heads", "the mean of one layer's heads, as a test adds it",
                      _last_layer_mean, frozenset({"pair"}))


def test_a_method_added_from_a_test_module_reaches_the_api_and_the_cli(run_cli):
    source = api.load(TINY)
    with methods.registered(MEAN):
        view = api.attribution_view(source, TEXT, method="last-mean")
        expected = source.extract(TEXT).attentions[-1].double().mean(0)
        assert torch.allclose(torch.from_numpy(view.panels[0]), expected)
        r = run_cli("rollout", TEXT, "--model", TINY, "--method", "last-mean", "--width", "100")
        assert r.exit_code == 0 and "mean of the heads of layer" in r.stdout, r.stderr
        refused = run_cli("rollout", TEXT, "--model", TINY, "--method", "last-mean", "--fusion", "max")
        assert refused.exit_code == 2 and "--fusion belongs to rollout and flow" in refused.stderr
        assert "last-mean" in refused.stderr  # the message names the method asked for
    r = run_cli("rollout", TEXT, "--model", TINY, "--method", "last-mean")
    assert r.exit_code == 2 and "is unknown" in r.stderr  # unregistered with the block


def test_a_method_declares_its_options_and_the_check_reads_each_declaration():
    """The options are records (methods.OPTIONS) a method names; the check refuses one given that the method
    does not name, in the option's words, naming the methods that do (one added from outside among them)."""
    from attnviz.attribution import check_method_options
    from attnviz.errors import UsageError

    with pytest.raises(UsageError, match="choose the output y that grad-rollout and attn-grad differentiate; "
                                         "rollout uses no gradient"):
        check_method_options("rollout", target_token="cat")  # alone, without vs
    refusal = lambda m, takers: f"[[cmap]] colours {takers} only; {m.name} draws in its own colours"  # noqa: E731
    with methods.OPTIONS.registered(methods.Option("cmap", refusal)), \
            methods.registered(methods.Method("painted", "p", "p", _last_layer_mean, frozenset({"cmap", "pair"}))):
        with pytest.raises(UsageError, match=r"cmap.* colours painted only; rollout draws in its own colours"):
            methods.check_request(methods.METHODS["rollout"], methods.Request(cmap="magma"))
        methods.check_request(methods.METHODS["painted"], methods.Request(cmap="magma", pair="x"))
    assert "cmap" not in methods.OPTIONS
    with pytest.raises(ValueError, match="not a field of Request"):
        methods.Option("colour", refusal)


def test_a_record_with_a_bad_name_or_a_taken_one_is_refused():
    with pytest.raises(ValueError, match="identifier"):
        Statistic("two words", "tw", "x", _far_rows)
    with pytest.raises(ValueError, match="already registered"), registered(Statistic("entropy", "e2", "x", _far_rows)):
        pass
    with pytest.raises(ValueError, match="unknown options"):
        methods.register(methods.Method("m", "m", "m", _last_layer_mean, frozenset({"colour"})))
    with pytest.raises(ValueError, match="stays"):
        methods.unregister("rollout")


def test_native_families_are_their_classes_traits():
    """The family list in messages and the mixing decomposition's pre-norms come from each family's class."""
    from attnviz.sources.mixing import what_works
    from attnviz.sources.native import CLASSES, FAMILIES, family_names

    assert {kind: cls for cls in CLASSES for kind in cls.model_types} == FAMILIES
    names = [name for cls in CLASSES for name in cls.model_types.values()]
    assert family_names() == ", ".join(names) and all(name in what_works() for name in names)
    assert [cls.pre_norm for cls in CLASSES] == [None, "ln_1", "norm_attn", "norm_attn", "norm_attn"]  # BERT: post-LN


def test_a_native_family_added_from_outside_runs_on_the_native_engine(tiny_hf, tmp_path):
    """A family is one class (its traits) and one register_family call: a checkpoint of its model_type then
    runs on attnviz's own attention, and the messages name it."""
    import shutil

    from attnviz.errors import AttnvizError
    from attnviz.sources import native

    class MyGPT(native.gpt2.GPT2):
        model_types: ClassVar[dict[str, str]] = {"mygpt": "MyGPT"}

    folder = Path(shutil.copytree(tiny_hf["gpt2"], tmp_path / "mygpt"))
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "mygpt"}))
    with pytest.raises(AttnvizError, match="model_type 'mygpt' is not one of"):
        api.load(str(folder), engine="native")
    with native.registered_family(MyGPT):
        assert native.FAMILIES["mygpt"] is MyGPT and native.family_names().endswith(", MyGPT")
        got = api.load(str(folder), engine="native").extract(TEXT).attentions
        want = api.load(tiny_hf["gpt2"], engine="native").extract(TEXT).attentions
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        with pytest.raises(ValueError, match="'gpt2' is already registered"):
            native.register_family(type("Again", (native.gpt2.GPT2,), {"model_types": {"gpt2": "GPT-2"}}))
    assert "mygpt" not in native.FAMILIES and MyGPT not in native.CLASSES
    with pytest.raises(ValueError, match="it stays"):
        native.unregister_family(native.gpt2.GPT2)


def test_the_explain_help_names_every_native_family(run_cli):
    """The CLI's help is written out (importing the families would load torch for --help): held equal here."""
    from attnviz.sources.native import CLASSES

    text = " ".join(run_cli("explain", "--help").stdout.split())
    assert all(next(iter(cls.model_types.values())) in text for cls in CLASSES)


def test_page_views_are_records_the_library_checks():
    from attnviz.errors import UsageError
    from attnviz.render.html import page_html
    from attnviz.render.page_views import PAGE_VIEWS

    source = api.load(TINY)
    with pytest.raises(UsageError, match=r"view='nope'.* is not a view of the page; use one of head, model"):
        api.page_view(source, TEXT, view="nope")
    result = source.extract(TEXT)
    with pytest.raises(UsageError, match="is not a view of the page"):
        api.page_of_result(result, view="nope")
    page = api.page_of_result(result, view="model")
    assert [v["name"] for v in page.data()["views"]] == list(PAGE_VIEWS)
    document = page_html(page)
    assert all(f'<section id="view-{name}">' in document for name in PAGE_VIEWS)


COUNT = "(data, state, section) => { section.querySelector('#tokcount').textContent = data.kinds.self.rows.length + ' tokens'; }"


def test_a_page_view_record_is_checked_and_only_a_registered_one_is_a_view_of_the_page(tmp_path):
    """The library's checks of a page view's record (a taken name, a script that would end the page's <script>),
    without a browser: a registered view is in the written page, as a tab; after, asking for it is one error."""
    from attnviz.errors import UsageError
    from attnviz.render import page_views
    from attnviz.render.html import render_html

    with pytest.raises(ValueError, match="already registered"):
        page_views.register(page_views.PageView("head", "Again", "", "<div></div>"))
    with pytest.raises(ValueError, match="would end its <script>"):
        page_views.PageView("bad", "Bad", "", "<div></div>", script="() => '</script>'")
    view = page_views.PageView("count", "Token count", "How many tokens the text has.", "<p id=\"tokcount\"></p>",
                               script=COUNT)
    source = api.load(TINY)
    with page_views.registered(view):
        html = render_html(api.page_view(source, TEXT, view="count"), tmp_path / "page.html").read_text()
        assert '{"name":"count","tab":"Token count"' in html and '<p id="tokcount"></p>' in html  # its tab, section
    with pytest.raises(UsageError, match="is not a view of the page"):
        api.page_view(source, TEXT, view="count")


def test_a_page_view_added_from_outside_gets_its_tab_and_draws(browser, tmp_path):
    """A page view is one record with its drawing function (its ``script``): the page has its tab and section, and
    the browser draws it."""
    from conftest import open_offline

    from attnviz.errors import UsageError
    from attnviz.render import page_views
    from attnviz.render.html import render_html

    view = page_views.PageView("count", "Token count", "How many tokens the text has.", "<p id=\"tokcount\"></p>",
                               script=COUNT)
    source = api.load(TINY)
    with page_views.registered(view):
        path = render_html(api.page_view(source, TEXT, view="count"), tmp_path / "page.html")
        requests: list[str] = []
        errors: list[str] = []
        page = open_offline(browser, path, requests, errors, ready="#tokcount:not(:empty)")
        n = len(source.extract(TEXT).tokens)
        assert page.inner_text("#tokcount") == f"{n} tokens" and not errors
        assert page.inner_text("nav.tabs button[data-view=count]") == "Token count"
        page.click("nav.tabs button[data-view=head]")  # the built-in views still draw beside it
        page.wait_for_selector("#headview[data-drawn]")
        page.close()
    with pytest.raises(UsageError, match="is not a view of the page"):
        api.page_view(source, TEXT, view="count")


def test_the_readme_statistic_example_runs_as_written():
    from docs_text import README

    from attnviz.analysis.statistics import unregister

    marker = README.index("from attnviz.analysis.statistics import Statistic, register")
    block = README[README.rindex("```python", 0, marker) + len("```python"): README.index("```", marker)]
    names: dict = {}
    try:
        exec(compile(block, "README.md", "exec"), names)
        table = names["table"]
        assert table.stats["far"].shape == table.stats["entropy"].shape and float(table.stats["far"].min()) >= 0
    finally:
        unregister("far")
