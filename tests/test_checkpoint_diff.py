"""A checkpoint diff over a corpus (issue 32, part 2): a planted change (one head's W_Q scrambled in a copy of the
default model) ranks that head first, with the interval and p-value a paired test gives; heads the change cannot
reach are exactly unchanged; the means equal the statistics of each model taken text by text."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from attnviz import api
from attnviz.analysis.checkpoint_diff import summarise
from attnviz.sources.resolve import default_model_folder

TEXTS = ["The cat sat on the mat.", "A dog chased the cat around the garden.", "Attention is all you need.",
         "The river runs through the old city.", "She read the letter twice before she answered.",
         "Birds sing at dawn in the quiet park.", "He plays the piano every evening.", "It rained all day long."]
LAYER, HEAD = 2, 5


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> str:
    """A copy of all-MiniLM-L6-v2 whose layer 2, head 5 query weights are scrambled (rows permuted, seeded)."""
    from safetensors.torch import load_file, save_file

    folder = tmp_path_factory.mktemp("planted") / "minilm-scrambled"
    shutil.copytree(default_model_folder(), folder)
    weights = load_file(folder / "model.safetensors")
    prefix = next(k for k in weights if k.endswith(f"layer.{LAYER}.attention.self.query.weight"))[: -len("weight")]
    rows = slice(HEAD * 32, (HEAD + 1) * 32)
    order = torch.randperm(32, generator=torch.Generator().manual_seed(0)) + HEAD * 32
    for name in ("weight", "bias"):
        tensor = weights[prefix + name].clone()
        tensor[rows] = weights[prefix + name][order]
        weights[prefix + name] = tensor
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    return str(folder)


def test_a_planted_change_ranks_its_head_first(planted):
    base, other = api.load(), api.load(planted)
    diff = api.checkpoint_diff(base, other, TEXTS, bootstrap=400, permutations=400)
    first = diff.heads[0]
    assert (first.layer, first.head) == (LAYER, HEAD)
    assert first.distance.low > 0 and first.distance.low <= first.distance.mean <= first.distance.high
    assert first.distance.p < 0.02  # every text moved the same way: a paired test of 8 texts says so
    untouched = [h for h in diff.heads if h.layer < LAYER or (h.layer == LAYER and h.head != HEAD)]
    assert all(h.distance.mean == pytest.approx(0, abs=1e-9) and h.distance.p == 1.0 for h in untouched)
    assert first.distance.mean > 5 * max(h.distance.mean for h in diff.heads[1:])
    # the means are each model's statistics taken text by text
    for name in ("entropy", "prev_score", "first"):
        a = torch.stack([api.heads_of(base, [t]).stats[name] for t in TEXTS])
        b = torch.stack([api.heads_of(other, [t]).stats[name] for t in TEXTS])
        assert first.stats[name].mean == pytest.approx(float((b - a)[:, LAYER, HEAD].double().mean()), abs=1e-6)


def test_the_summaries_equal_a_hand_computation():
    """The mean, a bootstrap interval that holds the mean, and the permutation p of a paired sign-flip test."""
    generator = torch.Generator().manual_seed(1)
    values = torch.tensor([[0.5], [0.7], [0.4], [0.6], [0.5], [0.9]], dtype=torch.float64)[:, :, None]  # [texts, 1, 1]
    mean, low, high, p = summarise(values, 2000, 2000, generator)
    assert float(mean) == pytest.approx(0.6)
    assert float(low) < 0.6 < float(high) and float(high) - float(low) < 0.4
    assert float(p) == pytest.approx(2 / 64, abs=0.02)  # all 6 positive: only the 2 all-same sign patterns of 64
    zeros = torch.zeros(5, 1, 1, dtype=torch.float64)
    assert float(summarise(zeros, 200, 200, generator)[3]) == 1.0


def test_the_command_prints_the_ranking_as_json(planted, run_cli, tmp_path):
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    result = run_cli("atlas", str(texts), "--vs-model", planted, "--format", "json", "--top", "3",
                     "--bootstrap", "200", "--permutations", "200")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert (doc["heads"][0]["layer"], doc["heads"][0]["head"]) == (LAYER, HEAD) and len(doc["heads"]) == 3
    assert doc["n_texts"] == len(TEXTS) and set(doc["heads"][0]["statistics"]) >= {"entropy", "prev_score"}
    table = run_cli("atlas", str(texts), "--vs-model", planted, "--top", "2", "--width", "140")
    assert table.exit_code == 0 and f"  {LAYER}   {HEAD}" in table.stdout.replace("│", " ")
    bad = run_cli("atlas", str(texts), "--vs-model", "sample_configs/tiny.toml")
    assert bad.exit_code != 0 and ("tokenize it differently" in bad.stderr or "architecture" in bad.stderr), bad.stderr
