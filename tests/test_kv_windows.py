"""attnviz kv on sliding-window models (issue 50, A.1): Mistral's every layer a window, Gemma 3's local and global
layers. A windowed layer's policy chooses among the keys its cache still holds, a full budget loses nothing, and the
cut cache equals transformers' eager attention with each layer type's own mask, evicted keys hidden per head."""

from __future__ import annotations

import pytest
import torch

from attnviz.kv import kv

TEXT = ("the cat sat on the mat and the dog ran far away over the hill and then the cat came back home to sleep "
        "while the dog kept running")
QUESTION = "where did the cat go"
POLICIES = ["streaming", "h2o", "snapkv", "tova", "pyramidkv", "oracle"]


@pytest.fixture(scope="module")
def mistral(tiny_hf, tmp_path_factory):
    """A Mistral language model: every layer a 5-token window, 4 query heads over 2 key/value heads."""
    from tiny_models import causal_lm

    return causal_lm(tiny_hf["mistral"], tmp_path_factory.mktemp("kv_windows") / "mistral", positions=512)


@pytest.fixture(scope="module")
def gemma3(tiny_hf, tmp_path_factory):
    """A Gemma 3 language model: a local layer (a 4-token window) then a global one, grouped-query attention."""
    import transformers

    folder = tmp_path_factory.mktemp("kv_windows") / "gemma3"
    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_hf["llama"])
    config = transformers.Gemma3TextConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, sliding_window=4, layer_types=["sliding_attention", "full_attention"],
        max_position_embeddings=512, query_pre_attn_scalar=8, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.eos_token_id)
    torch.manual_seed(0)
    transformers.Gemma3ForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def transformers_only(tiny_hf, tmp_path_factory):
    """Gemma 2 (soft-capping, a local layer then a global one) and gpt-oss (learned sinks, the same layers)."""
    from tiny_models import build_transformers_only

    return build_transformers_only(tmp_path_factory.mktemp("kv_windows"), tiny_hf["llama"], ("gemma2", "gpt_oss"),
                                   positions=512)


@pytest.mark.parametrize("family", ["gemma2", "gpt_oss"])
@pytest.mark.parametrize("engine", ["fused", "hf"])
def test_soft_capped_and_sink_models_keep_everything_at_a_full_budget(transformers_only, family, engine):
    result = kv(transformers_only[family], TEXT, policies=["snapkv", "h2o"], budgets=[3, 1.0], question=QUESTION,
                answer_tokens=3, engine=engine, keep_sets=True)
    n = result.n_context
    for run in result.runs:
        assert all(p >= n - 3 for p in run.kept[0][0] + run.kept[0][1])  # layer 0: a 4-token window
        if run.budget == 1.0:
            assert run.keys == [3, n] and run.kl == pytest.approx(0.0, abs=1e-9) and run.changed is False
            assert all(head.recall == pytest.approx(1.0, abs=1e-6) for head in run.heads)
    assert any(run.kl > 1e-6 for run in result.runs if run.budget == 3)


@pytest.mark.parametrize(("which", "engine", "windows"), [
    ("mistral", "native", [5, 5]), ("mistral", "hf", [5, 5]), ("gemma3", "fused", [4, None]), ("gemma3", "hf", [4, None]),
])
def test_a_windowed_layer_keeps_only_what_it_holds_and_a_full_budget_loses_nothing(request, which, engine, windows):
    result = kv(request.getfixturevalue(which), TEXT, policies=POLICIES, budgets=[3, 1.0], question=QUESTION,
                answer_tokens=3, engine=engine, keep_sets=True)
    n = result.n_context
    held = [n if w is None else w - 1 for w in windows]  # a window of W: the next query sees the last W − 1 keys
    for run in result.runs:
        for layer, kept in enumerate(run.kept):
            for positions in kept:
                assert all(p >= n - held[layer] for p in positions), (run.policy, layer, positions)
        if run.budget == 1.0:
            assert run.keys == held
            assert all(head.recall == pytest.approx(1.0, abs=1e-6) and head.error == pytest.approx(0.0, abs=1e-6)
                       for head in run.heads)
            assert run.kl == pytest.approx(0.0, abs=1e-9) and run.changed is False
        else:
            assert run.keys == [3, 3]
    small = [run for run in result.runs if run.budget == 3]
    assert any(run.kl > 1e-6 for run in small)  # the cut matters: these checks could fail


def test_snapkv_with_the_question_as_its_window_runs_on_a_windowed_model(run_cli, mistral):
    """The command that ended in 'index … is out of bounds' (issue 50, A.1)."""
    result = run_cli("kv", TEXT, "--model", mistral, "--policy", "snapkv", "--budget", "8", "--question", QUESTION,
                     "--question-window", "-q", "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert "internal error" not in result.stderr


def test_the_cut_cache_of_local_and_global_layers_equals_eager_attention_with_their_own_masks(gemma3):
    """An independent reference: transformers' eager attention over the whole sequence, each layer type with its own
    mask (causal; the local layer's window), the evicted keys hidden from the future rows head by head."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from attnviz.kv.evict import CacheRunner
    from attnviz.sources.stepping import TransformersStepper

    model = AutoModelForCausalLM.from_pretrained(gemma3, attn_implementation="eager").eval()
    tokenizer = AutoTokenizer.from_pretrained(gemma3)
    ctx = tokenizer(TEXT)["input_ids"]
    future = tokenizer(QUESTION, add_special_tokens=False)["input_ids"]
    t, total, window = len(ctx), len(ctx) + len(tokenizer(QUESTION, add_special_tokens=False)["input_ids"]), 4
    local = torch.zeros(2, t, dtype=torch.bool)  # each key/value head keeps its own held keys (of the last 3)
    local[0, [t - 3, t - 1]] = True
    local[1, [t - 2, t - 1]] = True
    full = torch.zeros(2, t, dtype=torch.bool)
    full[0, [0, 1, 5, t - 1]] = True
    full[1, [0, 2, t - 4, t - 2]] = True
    runner = CacheRunner(TransformersStepper(model, "m"), ctx, [])
    cut = runner.run(runner.cut([local, full]), future, 0)

    i, j = torch.arange(total)[:, None], torch.arange(total)[None, :]

    def mask(kept: torch.Tensor, width: int | None) -> torch.Tensor:
        allowed = (j <= i) & ((i - j < width) if width else True)
        per_head = allowed.expand(2, total, total).clone()
        per_head[:, t:, :t] &= kept[:, None, :]  # the future rows see only the kept context keys
        per_head = per_head.repeat_interleave(2, dim=0)[None]  # [1, H, total, total]: query heads 2g, 2g + 1
        return torch.zeros(per_head.shape).masked_fill(~per_head, torch.finfo(torch.float32).min)

    masks = {"sliding_attention": mask(local, window), "full_attention": mask(full, None)}
    with torch.no_grad():
        logits = model(torch.tensor([ctx + future]), attention_mask=masks).logits[0, t:]
    torch.testing.assert_close(cut.logprobs.float(), torch.log_softmax(logits.double(), -1).float(), atol=1e-4,
                               rtol=1e-4)
    assert (runner.full(future, 0).logprobs - cut.logprobs).abs().max() > 1e-3  # the cut matters
