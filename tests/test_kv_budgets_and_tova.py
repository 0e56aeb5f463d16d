"""kv and patterns on repeated, non-finite and too many budgets, and TOVA as its paper defines it (issue 50, A.2–A.4)."""

from __future__ import annotations

import json
import re

import pytest
from test_kv import QUESTION, TEXT

from attnviz.errors import AttnvizWarning, UsageError
from attnviz.kv import kv


@pytest.fixture(scope="module")
def llama(tiny_hf, tmp_path_factory):
    from tiny_models import causal_lm  # test_kv's seeded GQA model

    return causal_lm(tiny_hf["llama"], tmp_path_factory.mktemp("kv_round5") / "llama", positions=512)


@pytest.mark.parametrize(("policy", "budget"), [("snapkv", "8,8"), ("snapkv", "0.5,50%"), ("tova,tova", "8")])
@pytest.mark.parametrize("end_to_end", ["--end-to-end", "--no-end-to-end"])
def test_a_budget_or_policy_given_twice_is_one_run_and_says_so(run_cli, llama, policy, budget, end_to_end):
    result = run_cli("kv", TEXT, "--model", llama, "--question", QUESTION, "--policy", policy, "--budget", budget,
                     end_to_end, "-n", "2", "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert "internal error" not in result.stderr
    assert ("one run" in result.stderr) if "," in budget else ("runs once" in result.stderr)
    doc = json.loads(result.stdout)
    assert len(doc["runs"]) == 1
    run = doc["runs"][0]
    assert len(run["heads"]) == doc["n_layers"] * doc["n_kv_heads"] and len(run["keys"]) == doc["n_layers"]


def test_budgets_that_keep_the_same_keys_of_this_context_are_one_run(llama):
    n = kv(llama, TEXT, policies=["h2o"], budgets=[1.0], question=QUESTION, end_to_end=False).n_context
    with pytest.warns(AttnvizWarning, match=f"both keep {n // 2} of {n} keys"):
        result = kv(llama, TEXT, policies=["h2o"], budgets=[n // 2, 0.5, n // 2 + 1], question=QUESTION,
                    end_to_end=False)
    assert [run.budget for run in result.runs] == [n // 2, n // 2 + 1]


@pytest.mark.parametrize("command", ["kv", "patterns"])
@pytest.mark.parametrize("budget", ["nan", "nan%", "inf", "-inf%"])
def test_a_budget_that_is_not_a_number_is_one_line(run_cli, llama, command, budget):
    extra = ["--question", QUESTION] if command == "kv" else []
    result = run_cli(command, TEXT, "--model", llama, "--budget", budget, *extra)
    assert result.exit_code != 0
    assert result.stderr.startswith("attnviz: error: --budget") and len(result.stderr.strip().splitlines()) == 1


def test_a_non_finite_budget_is_refused_by_the_library_too(llama):
    for budget in (float("nan"), float("inf")):
        with pytest.raises(UsageError, match="budget"):
            kv(llama, TEXT, budgets=[budget], question=QUESTION, end_to_end=False)


def test_too_many_budgets_or_runs_are_refused_before_any_work(run_cli, llama):
    many = ",".join(str(i) for i in range(1, 20_001))
    result = run_cli("kv", TEXT, "--model", llama, "--question", QUESTION, "--budget", many)
    assert result.exit_code != 0 and "20,000 budgets; at most 64" in result.stderr
    result = run_cli("kv", TEXT, "--model", llama, "--question", QUESTION, "--policy", "all", "--budget",
                     ",".join(str(i) for i in range(1, 44)))
    assert result.exit_code != 0 and "258 runs" in result.stderr and "at most 256" in result.stderr


def test_a_budget_of_one_key_reads_as_one_key(run_cli, llama):
    result = run_cli("kv", TEXT, "--model", llama, "--question", QUESTION, "--policy", "h2o", "--budget", "1,1.0",
                     "--no-end-to-end", "--width", "120", "-q")
    assert result.exit_code == 0, result.stderr
    summary = [line.split() for line in result.stdout.splitlines() if line.startswith("h2o")][:2]
    assert summary[0][1:3] == ["1", "1"]  # one key, not 100 %
    assert summary[1][1] == "100%" and summary[1][2] != "1"


def test_tova_keeps_one_set_per_layer_by_default_and_one_per_group_when_asked(llama):
    """TOVA's code and kvpress's TOVAPress average the last query over every head of a layer: each layer's key/value
    heads keep the same keys. The per-group variant (an option) lets them differ."""
    paper = kv(llama, TEXT, policies=["tova"], budgets=[6], question=QUESTION, end_to_end=False, keep_sets=True)
    grouped = kv(llama, TEXT, policies=["tova"], budgets=[6], question=QUESTION, end_to_end=False, keep_sets=True,
                 tova_across="group")
    assert all(layer[0] == layer[1] for layer in paper.runs[0].kept)
    assert any(layer[0] != layer[1] for layer in grouped.runs[0].kept)


def test_the_command_reaches_both_forms_of_tova(run_cli, llama):
    found = {}
    for flag in ([], ["--tova-per-group"]):
        result = run_cli("kv", TEXT, "--model", llama, "--question", QUESTION, "--policy", "tova", "--budget", "6",
                         "--no-end-to-end", "--format", "json", *flag)
        assert result.exit_code == 0, result.stderr
        found[bool(flag)] = json.loads(result.stdout)["runs"][0]["kept"]
    assert all(layer[0] == layer[1] for layer in found[False])
    assert found[True] != found[False]


def _curves(monkeypatch, result) -> object:
    """The figure kv's PNG is drawn from (the command's own curves), caught before it is saved."""
    from attnviz.kv.outputs import write_figure
    from attnviz.render import figure_style

    caught = {}
    monkeypatch.setattr(figure_style, "save_figure", lambda fig, path: caught.setdefault("fig", fig))
    write_figure(result, __import__("pathlib").Path("unused.png"))
    return caught["fig"]


def test_one_budget_is_a_point_on_the_whole_axis_in_each_policys_one_colour(llama, monkeypatch):
    from attnviz.kv.page import page_document

    result = kv(llama, TEXT, policies=["oracle", "snapkv", "tova"], budgets=[0.25], question=QUESTION,
                answer_tokens=2, keep_sets=True)
    fig = _curves(monkeypatch, result)
    for ax in fig.axes:
        low, high = ax.get_xlim()
        assert low <= 0 and high >= 100  # not a 24–26 % window around the one budget
    drawn = {line.get_label(): line.get_color() for line in fig.axes[0].get_lines()}
    page = page_document(result, result.need)["colours"]
    assert drawn == page and len(set(drawn.values())) == 3
    alone = kv(llama, TEXT, policies=["tova"], budgets=[0.25], question=QUESTION, end_to_end=False, keep_sets=True)
    assert page_document(alone, alone.need)["colours"]["tova"] == drawn["tova"]  # whatever runs beside it


def test_the_dropped_keys_weights_keep_their_digits():
    from attnviz.render.kv import heads_table, mass_label

    assert [mass_label(m) for m in (0.31, 0.047, 0.0012, 3.1e-05, 0.0)] == ["0.31", "0.047", "0.0012", "3.1e-05", "0"]
    row = {"policy": "h2o", "budget": 8, "layer": 0, "kv_head": 1, "recall": 0.5, "error": 0.2,
           "dropped": [(3, "cat", 0.0042), (7, "mat", 0.00051)]}
    from rich.console import Console

    console = Console(width=120, record=True, color_system=None)
    console.print(heads_table([row], width=120))
    text = console.export_text()
    assert re.findall(r"@\d+ ([^,\s]+)", text) == ["0.0042", "5.1e-04"]  # not 0.00, 0.00


def test_question_and_continue_together_say_so(run_cli, llama):
    result = run_cli("kv", TEXT, "--model", llama, "--question", QUESTION, "--continue", "4")
    assert result.exit_code != 0 and "not both" in result.stderr


@pytest.mark.slow
def test_the_page_labels_the_matrix_rows_and_keys_and_a_budget_of_one_key(llama, browser, tmp_path):
    from conftest import open_offline

    from attnviz.kv.page import page_document
    from attnviz.render.kv_page import render_kv_page

    result = kv(llama, TEXT, policies=["h2o"], budgets=[1, 0.5], question=QUESTION, end_to_end=False,
                keep_sets=True)
    path = render_kv_page(page_document(result, result.need), tmp_path / "kv.html")
    requests, errors = [], []
    page = open_offline(browser, path, requests, errors, ready="body[data-drawn]")
    try:
        labels = page.eval_on_selector_all("#rowlabels div", "els => els.map(e => e.textContent)")
        assert labels == [f"L{layer} · KV{head}" for layer in range(result.n_layers) for head in range(result.n_kv_heads)]
        assert page.text_content("#keyfirst") == "key 0"
        assert page.text_content("#keylast") == f"key {result.n_context - 1}"
        budgets = page.eval_on_selector_all("#runs tr[data-run] td:nth-child(2)", "els => els.map(e => e.textContent)")
        assert budgets == ["1", "50%"]
        assert errors == [] and requests == [path.as_uri()]
    finally:
        page.close()
