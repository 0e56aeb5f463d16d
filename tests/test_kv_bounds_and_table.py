"""kv's end-to-end run is bounded before it starts, and its table says what it measures (issue 58, B11 and D16): a
1,000-token question ran past 120 s at 3.2 GB (2,000 an internal error); `oracle 32 32 0.770 0.079 0.000 0.0000
changed` read as a contradiction (KL 0, the answer changed) and `-0.000` was printed."""

from __future__ import annotations

import io

import pytest
import torch
from rich.console import Console
from test_kv import QUESTION, TEXT

from attnviz.errors import ResourceError, UsageError
from attnviz.kv import MAX_FUTURE, kv
from attnviz.kv.evict import kl_divergence
from attnviz.render.kv import fixed, summary_table


@pytest.fixture(scope="module")
def llama(tiny_hf, tmp_path_factory):
    from tiny_models import causal_lm

    return causal_lm(tiny_hf["llama"], tmp_path_factory.mktemp("kv_bounds") / "llama", positions=2048)


def test_a_question_past_the_end_to_end_bound_is_refused_before_any_run(llama, monkeypatch):
    from attnviz.kv import evict

    def never(*args, **kwargs):
        raise AssertionError("a cache ran before the bound was checked")

    monkeypatch.setattr(evict.CacheRunner, "__init__", never)
    question = " ".join(["where did the cat go"] * (MAX_FUTURE // 4))
    with pytest.raises(UsageError, match=r"at most 512.*end_to_end=False"):
        kv(llama, TEXT, question=question, budgets=[4], policies=["h2o"])


def test_the_same_question_runs_without_the_end_to_end_part(llama):
    question = " ".join(["where did the cat go"] * (MAX_FUTURE // 4))
    result = kv(llama, TEXT, question=question, budgets=[4], policies=["h2o"], end_to_end=False)
    assert len(result.future) > MAX_FUTURE and result.runs[0].kl is None


def test_the_memory_of_the_distributions_is_estimated(llama, monkeypatch):
    monkeypatch.setenv("ATTNVIZ_MAX_MEMORY", "1M")  # the tiny model's weights fit; the future's distributions do not
    from attnviz.kv import _vocabulary

    with pytest.raises(ResourceError, match="next-token distributions"):
        kv(llama, TEXT, question=" ".join(["where did the cat go"] * 8), budgets=[4], policies=["h2o"])
    assert _vocabulary(type("S", (), {"hf_tokenizer": None, "tokenizer": None})()) > 0


def test_the_kl_in_blocks_equals_the_kl_at_once(monkeypatch):
    from attnviz.kv import evict

    torch.manual_seed(0)
    full = torch.log_softmax(torch.randn(37, 101, dtype=torch.float64), -1)
    kept = torch.log_softmax(torch.randn(37, 101, dtype=torch.float64), -1)
    whole = (full.exp() * (full - kept)).sum(-1)
    monkeypatch.setattr(evict, "KL_BLOCK", 3 * 101)  # three rows a block, the last one short
    torch.testing.assert_close(kl_divergence(full, kept), whole, atol=1e-12, rtol=0)


@pytest.mark.parametrize(("value", "digits", "shown"), [(-0.0, 3, "0.000"), (-0.0004, 3, "0.000"),
                                                         (-0.0006, 3, "-0.001"), (0.0, 4, "0.0000"), (0.7704, 3, "0.770")])
def test_no_negative_zero(value, digits, shown):
    assert fixed(value, digits) == shown


@pytest.mark.parametrize(("future", "says"), [("question", "KL on question"), ("continue", "KL on continuation")])
def test_the_table_says_where_kl_is_measured_and_what_changed_means(future, says):
    run = {"policy": "oracle", "budget": 32, "keys": [32], "recall": 0.77, "worst": -1e-9, "error": 0.079,
           "kl": -0.0, "changed": True}
    console = Console(file=io.StringIO(), width=160, color_system=None)
    console.print(summary_table([run], future))
    shown = " ".join(console.file.getvalue().split())
    assert says in shown and "-0.000" not in shown and "differs from the full cache's" in shown, shown
    assert ("answer after the question" if future == "question" else "choice at any of them") in shown


def test_the_command_prints_the_table_with_its_caption(run_cli, llama):
    done = run_cli("kv", TEXT, "--model", llama, "--question", QUESTION, "--policy", "h2o", "--budget", "4",
                   "--width", "200")
    assert done.exit_code == 0, done.stderr
    assert "KL on question" in done.stdout and "answer after it" in done.stdout and "-0.000" not in done.stdout
