"""Sparse prefill patterns as records: a pattern registered from outside (a plugin) is measured on the same row
blocks, equals a dense reference (transformers' eager attention), competes for each head's winner and is a column
of the table; the built-ins are sealed."""

from __future__ import annotations

import pytest
import torch

from attnviz.analysis.kv_policies import row_blocks
from attnviz.analysis.patterns_registry import PATTERNS, Pattern, registered
from attnviz.errors import PluginError

TEXT = ("the cat sat on the mat and the dog ran far away over the hill and then the cat came back home to sleep "
        "while the dog kept running after the ball near the river and the bird sang in the tree all day long")


def band_recall(rows, budget: int) -> torch.Tensor:
    """A local band of ``budget`` keys, no sinks: each head's mean kept mass over rows i ≥ budget."""
    total, count = torch.zeros(rows.n_heads, dtype=torch.float64), 0
    for start, block in row_blocks(rows):
        for r in range(block.shape[1]):
            i = start + r + rows.offset
            if i >= budget:
                total += block[:, r, max(0, i - budget + 1) : i + 1].sum(-1).double()
                count += 1
    return total / max(count, 1)


@pytest.fixture(scope="module")
def llama(tiny_hf, tmp_path_factory):
    from tiny_models import causal_lm

    return causal_lm(tiny_hf["llama"], tmp_path_factory.mktemp("pattern_lm") / "llama", positions=512)


def test_a_registered_pattern_is_measured_and_equals_a_dense_reference(llama, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from attnviz.kv.patterns import patterns

    budget = 6
    with registered(Pattern("local_band", "a local band, no sinks", "a test", recall=band_recall)):
        result = patterns(llama, TEXT, budgets=[budget], engine="fused")
        result.save(tmp_path / "p.csv")
    assert "local_band" not in PATTERNS  # gone with the block
    header = (tmp_path / "p.csv").read_text(encoding="utf-8").splitlines()[0].split(",")
    assert "recall_local_band" in header and "recall_a_shape" in header
    model = AutoModelForCausalLM.from_pretrained(llama, attn_implementation="eager").eval()
    ids = AutoTokenizer.from_pretrained(llama)(TEXT)["input_ids"]
    assert len(ids) == result.n_tokens
    with torch.no_grad():
        attentions = model(torch.tensor([ids]), output_attentions=True).attentions
    n = len(ids)
    for head in result.heads[budget]:
        a = attentions[head.layer][0, head.head].double()
        expected = torch.stack([a[i, i - budget + 1 : i + 1].sum() for i in range(budget, n)]).mean()
        assert head.recall["local_band"] == pytest.approx(float(expected), abs=1e-5), head
        best = max(head.recall.values())
        assert head.recall[head.winner] == best  # the winner is chosen among every registered pattern


def test_a_pattern_that_returns_the_wrong_shape_is_named_and_built_ins_are_sealed(llama):
    from attnviz.kv.patterns import patterns

    with registered(Pattern("broken", "returns a scalar", "a test", recall=lambda rows, budget: torch.tensor(1.0))), \
            pytest.raises(PluginError, match="pattern broken"):
        patterns(llama, TEXT, budgets=[6])
    with pytest.raises(ValueError):
        PATTERNS.unregister("a_shape")
    with pytest.raises(ValueError, match="lower-case"):
        Pattern("Bad Name", "x", "y")
