"""``attnviz rollout --method``: every method behind one command, in every output, equal to its pure
function (the pure functions themselves are checked against their papers' independent references in
test_flow.py, test_relevance.py and test_mixing.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from docs_text import DOCS

from attnviz import api
from attnviz.attribution.relevance import attention_times_gradient, gradient_rollout
from attnviz.errors import UsageError
from attnviz.render.page import head_values, page_of_view

TEXT = "The cat sat on the mat."


@pytest.fixture(scope="module")
def minilm():
    return api.load()


def test_grad_rollout_and_attn_grad_views_are_their_functions(minilm):
    from attnviz.sources.gradients import attention_gradients

    found = attention_gradients(minilm, TEXT, vs="A dog barked.")
    view = api.attribution_view(minilm, TEXT, method="grad-rollout", layer=3, vs="A dog barked.")
    expected = gradient_rollout(found.result.attentions[:4], found.gradients[:4])[-1]
    assert np.allclose(view.panels[0], expected.numpy() - np.eye(expected.shape[0]), atol=1e-6)  # drawn: R − I
    assert "cosine similarity" in view.notes[0] and "through layers 0–3" in view.title
    grads = api.attribution_view(minilm, TEXT, method="attn-grad", layer=2, head="all", vs="A dog barked.")
    signed = attention_times_gradient(found.result.attentions, found.gradients)[2]
    assert np.allclose(grads.panels, signed.numpy(), atol=1e-9)
    assert grads.scale.vmin == -grads.scale.vmax and grads.scale.cmap == "coolwarm"  # zero in the middle
    assert (grads.panels < 0).any() and (grads.panels > 0).any()


def test_mixing_views_are_their_functions(minilm):
    from attnviz.attribution import mixing
    from attnviz.sources.mixing import mixing_parts

    _, parts = mixing_parts(minilm, TEXT, layers=[1])
    part = next(iter(parts))
    layer = api.attribution_view(minilm, TEXT, method="norm-layer", layer=1)
    assert np.allclose(layer.panels[0], mixing.layer_norm_attention(part.attentions, part.transformed).numpy())
    ratio = api.attribution_view(minilm, TEXT, method="mixing")
    assert ratio.panels.shape == (1, minilm.n_layers, len(layer.row_labels)) and ratio.row_labels[0] == "L0"
    assert ((ratio.panels > 0) & (ratio.panels < 1)).all()


def test_every_method_in_every_output(minilm, run_cli, tmp_path):
    from io import StringIO

    from rich.console import Console

    from attnviz.render.registry import for_path
    from attnviz.render.terminal import render_terminal

    methods = {"flow": {}, "grad-rollout": {"vs": "A dog barked."}, "attn-grad": {"vs": "A dog barked.", "layer": 5},
               "norm-layer": {"layer": 1}, "norm-res": {"layer": 1}, "norm-resln": {"layer": 1}, "mixing": {}}
    for method, options in methods.items():
        view = api.attribution_view(minilm, TEXT, method=method, **options)
        for suffix in (".png", ".html", ".npz", ".json"):
            out = for_path(f"x{suffix}").render(view, tmp_path / f"{method}{suffix}")
            assert out.stat().st_size > 0
        numbers = np.load(tmp_path / f"{method}.npz")["panels"]
        document = json.loads((tmp_path / f"{method}.json").read_text(encoding="utf-8"))
        assert np.allclose(np.array(document["panels"], dtype=float), numbers) and np.allclose(numbers, view.panels)
        console = Console(file=StringIO(), width=120, color_system=None)
        render_terminal(view, console, values=False, fit="downsample")
        assert view.title.split(" · ")[1][:12] in console.file.getvalue().replace("\n", " ")
    # The command draws the same views (one output each, to keep the suite fast).
    for method, args, suffix in (("flow", (), ".json"), ("grad-rollout", ("--similar-to", "A dog barked."), ".npz"),
                                 ("mixing", (), ".png")):
        r = run_cli("rollout", TEXT, "--method", method, *args, "--out", str(tmp_path / f"cli{suffix}"))
        assert r.exit_code == 0, (method, r.stderr)
    assert np.allclose(np.load(tmp_path / "cli.npz")["panels"], np.load(tmp_path / "grad-rollout.npz")["panels"])
    cli_flow = json.loads((tmp_path / "cli.json").read_text(encoding="utf-8"))["panels"]
    assert np.allclose(np.array(cli_flow, dtype=float), np.load(tmp_path / "flow.npz")["panels"])


def test_attn_grad_page_reads_back_the_signed_numbers(minilm, tmp_path):
    view = api.attribution_view(minilm, TEXT, method="attn-grad", layer=0, head=1, vs="A dog barked.")
    kind = page_of_view(view).kinds["self"]
    shape = view.panels.shape[1:]
    assert head_values(kind, 0, 0).shape == shape
    step = (kind["vmax"] - kind["offset"]) * 2.0**-11  # half floats of values scaled into [0, 1]
    assert np.allclose(head_values(kind, 0, 0), view.panels[0], atol=step)


@pytest.mark.parametrize(("args", "message"), [
    (("--method", "flow", "--head", "2"), "--head applies to norm and attn-grad"),
    (("--method", "flow", "--head", "0"), "--head applies to norm and attn-grad"),  # head 0 is given too (0 == False)
    (("--method", "flow", "--similar-to", "x"), "--target-token and --similar-to choose the output y"),
    (("--method", "mixing", "--force"), "--force lets attention flow run past"),
    (("--method", "mixing", "--fusion", "max"), "--fusion belongs to rollout and flow"),
    (("--method", "attn-grad", "--words"), "attn-grad is per token"),
    (("--method", "norm-layer", "--pair", "It was tired."), "--pair goes with rollout, flow and norm"),
    (("--method", "grad-rollout", "--similar-to", "A dog.", "--pair", "It was tired."), "--pair goes with rollout, flow"),
    (("--method", "grad-rollout", "--similar-to", ""), "--similar-to: the text is empty"),
    (("--method", "mixing", "--norm"), "--norm is --method norm"),
    (("--method", "attn-grad"), "--similar-to"),  # a sentence encoder: y needs a second text
])
def test_an_option_the_method_does_not_use_is_refused(run_cli, args, message):
    r = run_cli("rollout", TEXT, *args)
    assert r.exit_code != 0 and message in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_norm_resln_on_a_pre_ln_model_says_why(tiny_hf, run_cli):
    r = run_cli("rollout", "the cat sat", "--model", tiny_hf["gpt2"], "--method", "norm-resln")
    assert r.exit_code != 0 and "pre-LN" in r.stderr and "--method norm-res" in r.stderr, r.stderr
    r = run_cli("rollout", "the cat sat", "--model", tiny_hf["gpt2"], "--method", "mixing")
    assert r.exit_code == 0 and "pre-LN model" in r.stdout, r.stderr
    view = api.attribution_view(api.load(tiny_hf["gpt2"]), "the cat sat", method="grad-rollout")
    assert "predicted next token" in view.notes[0]


def test_head_zero_is_head_zero_not_the_mean(minilm):
    from attnviz.analysis.metrics import norm_attention

    view = api.attribution_view(minilm, TEXT, method="norm", layer=1, head=0)
    result = minilm.extract(TEXT, layers=[1])
    assert "head 0" in view.title and np.allclose(view.panels[0], norm_attention(result.attentions,
                                                                                result.value_norms)[0, 0].numpy())


def test_the_python_api_refuses_an_unknown_method(minilm):
    with pytest.raises(UsageError, match="method='saliency' is unknown"):
        api.attribution_view(minilm, TEXT, method="saliency")
    assert torch.is_tensor(api.rollout_of_text(minilm, TEXT)[0])


def test_flow_says_its_cost_first_and_refuses_past_the_limit_unless_forced(run_cli, monkeypatch):
    import attnviz.attribution
    import attnviz.attribution.flow

    text = "The cat sat on the mat while the dog slept."
    monkeypatch.setattr(attnviz.attribution.views, "FLOW_NOTICE_SECONDS", 0.0)
    r = run_cli("rollout", text, "--method", "flow", "--layer", "3", "--width", "120")
    assert r.exit_code == 0 and "attention flow: 169 max-flow problems over 13 tokens and 4 layers" in r.stderr, r.stderr
    monkeypatch.setattr(attnviz.attribution.flow, "FLOW_SECONDS_LIMIT", 1e-9)
    r = run_cli("rollout", text, "--method", "flow", "--layer", "3")
    assert r.exit_code == 2 and "solves 169 max-flow problems" in r.stderr and "or pass --force" in r.stderr, r.stderr
    r = run_cli("rollout", text, "--method", "flow", "--layer", "3", "--force", "--width", "120")
    assert r.exit_code == 0, r.stderr


def test_the_readme_attribution_example_runs_as_written():
    readme = DOCS["python-api.md"]
    marker = readme.index("from attnviz.sources.gradients import attention_gradients")
    block = readme[readme.rindex("```python", 0, marker) + len("```python"): readme.index("```", marker)]
    names: dict = {}
    exec(compile(block, "docs/python-api.md", "exec"), names)  # the documentation's own example
    t = len(names["result"].tokens)
    assert names["flow"].shape == (6, t, t) and torch.allclose(names["flow"].sum(-1), torch.ones(6, t, dtype=torch.float64))
    assert names["signed"].shape == (6, 12, t, t) and names["mixed"].ratio.shape == (t,)
    assert "flow" in names["view"].title


def test_shrinking_keeps_strong_negatives_and_a_mixing_ratio_keeps_its_layers():
    from dataclasses import replace

    from attnviz.render.view import matrix_view, max_pool

    rng = np.random.default_rng(0)
    values = rng.normal(size=(1, 8, 8))
    values[0, 5, 2] = -9.0  # the strongest cell is negative
    view = matrix_view(values, list("abcdefgh"), list("abcdefgh"), title="t", panel_titles=["p"], signed=True)
    pooled = max_pool(view, 4)
    blocks = values[0].reshape(2, 4, 2, 4).transpose(0, 2, 1, 3).reshape(2, 2, 16)
    expected = np.take_along_axis(blocks, np.abs(blocks).argmax(-1)[..., None], -1)[..., 0]  # by magnitude, signed
    assert np.array_equal(pooled.panels[0], expected) and pooled.panels[0, 1, 0] == -9.0
    ratio = replace(matrix_view(rng.random((1, 6, 40)), [f"L{i}" for i in range(6)], [str(i) for i in range(40)],
                                title="t", panel_titles=["p"]), pool_rows=False)
    shrunk = max_pool(ratio, 4)
    assert shrunk.panels.shape == (1, 6, 10) and shrunk.row_labels == [f"L{i}" for i in range(6)]
    assert np.array_equal(shrunk.panels[0], ratio.panels[0].reshape(6, 10, 4).max(-1))


def test_tiny_signed_values_print_in_readable_units():
    from io import StringIO

    from rich.console import Console

    from attnviz.render.terminal import render_terminal
    from attnviz.render.view import matrix_view

    view = matrix_view(np.array([[[-4.2e-4, 1.5e-4], [3.0e-5, 2.0e-4]]]), ["a", "b"], ["a", "b"], title="t",
                       panel_titles=["p"], signed=True)
    console = Console(file=StringIO(), width=80, color_system=None)
    render_terminal(view, console, values=True)
    text = console.file.getvalue()
    assert "units of 1e-4" in text and "-4" in text and "1.5" in text and ".30" in text
