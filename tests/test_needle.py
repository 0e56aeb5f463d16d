"""attnviz needle: the retrieval scores against the published definitions, the prompts, a hand-built copy
circuit whose retrieval head is known, and the answers against transformers' greedy generate."""

from __future__ import annotations

import shutil

import copy_circuit as cc
import pytest
import torch

from attnviz.errors import AttnvizError
from attnviz.needle import needle
from attnviz.needle.result import NeedleResult, NeedleRun
from attnviz.needle.scores import RunScores, rouge1_recall


# The published definitions, written as the authors' code computes them on the attention rows of one step
# (``attention_matrix[layer][0][head][-1]``), with ties broken towards the earliest position.
def _top(row: torch.Tensor, k: int) -> tuple[list[float], list[int]]:
    order = sorted(range(len(row)), key=lambda j: (-float(row[j]), j))[:k]
    return [float(row[j]) for j in order], order


def wu_retrieval_calculate(attention_matrix, retrieval_score, inp, prompt_ids, needle_start, needle_end):
    """Wu et al., ``retrieval_calculate`` (topk = 1)."""
    for layer_idx in range(len(attention_matrix)):
        for head_idx in range(attention_matrix[layer_idx].shape[1]):
            values, idx = _top(attention_matrix[layer_idx][0][head_idx][-1], 1)
            for _v, i in zip(values, idx, strict=True):
                if needle_start <= i < needle_end and inp == prompt_ids[i]:
                    retrieval_score[layer_idx][head_idx] += 1 / (needle_end - needle_start)
                    break


def headkv_retrieval_calculate(attention_matrix, retrieval_score, needle_start, needle_end, answer_tokens_num):
    """HeadKV, ``retrieval_head_detection_r2.py``'s ``retrieval_calculate`` (topk = |needle|, no copy test)."""
    topk = needle_end - needle_start
    for layer_idx in range(len(attention_matrix)):
        for head_idx in range(attention_matrix[layer_idx].shape[1]):
            values, idx = _top(attention_matrix[layer_idx][0][head_idx][-1], topk)
            for v, i in zip(values, idx, strict=True):
                if needle_start <= i < needle_end:
                    retrieval_score[layer_idx][head_idx] += 10 * v * 1 / ((needle_end - needle_start) * answer_tokens_num)


def _steps(seed: int, layers: int = 3, heads: int = 4, prompt: int = 40, steps: int = 6):
    """Attention rows of ``steps`` decoding steps (row t sees t + 1 keys), with planted ties and needle hits."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for s in range(steps):
        t = prompt + s
        rows = torch.softmax(torch.randn(layers, heads, t, generator=g) * 3, dim=-1)
        rows[0, 0] = 0.0
        rows[0, 0, [12, 3, 30]] = 1 / 3  # a three-way tie: the earliest (3, outside the needle) wins
        rows[0, 1] = 0.0
        rows[0, 1, [14, 35]] = 0.5  # a tie whose earliest lies inside the needle
        rows[1, 2] = 0.01 / t
        rows[1, 2, 10 + s % 5] += 0.99  # a head on the needle, a different token each step
        rows[2, 3] = 1.0 / t  # uniform: every key ties
        out.append(rows / rows.sum(-1, keepdim=True))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_both_scores_equal_the_published_definitions_on_the_same_rows(seed):
    start, end = 10, 15  # a needle of five tokens
    g = torch.Generator().manual_seed(100 + seed)
    prompt_ids = torch.randint(0, 50, (40,), generator=g).tolist()
    prompt_ids[10:15] = [7, 8, 9, 7, 11]  # a repeated token inside the needle
    steps = _steps(seed)
    tokens = [7, 9, 11, 8, 3, 7]  # some equal to what the needle holds where a head looks, some not
    ours = RunScores(3, 4, prompt_ids, start, end)
    wu = [[0.0] * 4 for _ in range(3)]
    headkv = [[0.0] * 4 for _ in range(3)]
    ids = list(prompt_ids)
    for n, (rows, token) in enumerate(zip(steps, tokens, strict=True)):
        matrix = [rows[layer][None, :, None, :] for layer in range(3)]  # [1, H, 1, T] per layer, as transformers'
        wu_retrieval_calculate(matrix, wu, token, ids, start, end)
        headkv_retrieval_calculate(matrix, headkv, start, end, end - start)
        ours.add(rows, token)
        if n < len(tokens) - 1:
            ours.extend_ids(token)
            ids.append(token)
    torch.testing.assert_close(ours.retrieval, torch.tensor(wu, dtype=torch.float64), atol=1e-12, rtol=0)
    torch.testing.assert_close(ours.reasoning, torch.tensor(headkv, dtype=torch.float64), atol=1e-9, rtol=1e-9)
    assert ours.retrieval[1, 2] > 0 and ours.retrieval[0, 0] == 0  # the planted hit counts; the tie outside does not


def test_a_head_whose_strongest_key_holds_another_token_scores_nothing():
    rows = torch.zeros(1, 1, 20)
    rows[0, 0, 12] = 1.0
    scores = RunScores(1, 1, list(range(20)), 10, 15)
    scores.add(rows, token=99)  # the needle holds 12 there
    assert scores.retrieval.item() == 0.0 and scores.reasoning.item() > 0
    scores.add(rows, token=12)
    assert scores.retrieval.item() == pytest.approx(1 / 5)


def test_a_head_is_averaged_over_the_runs_that_retrieved_only():
    def run(retrieved, value):
        return NeedleRun(length=100, depth=0.5, needle_start=10, needle_end=15, answer="", answer_tokens=[],
                         answer_ids=[], recall=1.0 if retrieved else 0.0, retrieved=retrieved,
                         retrieval=[[value, 0.0]], reasoning=[[value / 2, 0.0]])

    result = NeedleResult(model_name="m", engine="native", n_layers=1, n_heads=2, needle="n", question="q",
                          haystack="h", lengths=[100], depths=[0.5], max_new_tokens=4,
                          runs=[run(True, 0.8), run(False, 0.0), run(True, 0.4)])
    assert result.retrieval_scores()[0] == pytest.approx([0.6, 0.0])
    assert result.reasoning_scores()[0] == pytest.approx([0.3, 0.0])
    ranked = result.heads()
    assert [r["name"] for r in ranked] == ["L0H0", "L0H1"] and ranked[0]["retrieval"] and not ranked[1]["retrieval"]


def test_rouge1_recall_counts_clipped_shared_words_by_hand():
    # the, cat, sat, on, the, mat: "the cat" shares one "the" (clipped to the answer's one) and "cat"
    assert rouge1_recall("The cat sat on the mat.", "the cat") == pytest.approx(2 / 6)
    assert rouge1_recall("The cat sat on the mat.", "the the the cat") == pytest.approx(3 / 6)
    assert rouge1_recall("eat a sandwich", "EAT, a... sandwich!") == 1.0
    assert rouge1_recall("旧金山最好的事", "最好的事") == pytest.approx(4 / 7)  # each CJK character a word
    assert rouge1_recall("a b c d", "") == 0.0


@pytest.fixture(scope="module")
def circuit(tmp_path_factory):
    return str(cc.build(tmp_path_factory.mktemp("copy_circuit") / "copy"))


# Three depths on each engine, five between them: both ends, the middle and the quarters (each engine's step rows
# equal transformers' eager rows, and its answers transformers' greedy generate: the tests below).
@pytest.mark.slow  # 1,100 tokens
@pytest.mark.parametrize(("engine", "depths"), [("native", [0.0, 0.5, 1.0]), ("fused", [0.25, 0.75, 1.0])])
def test_the_copy_circuit_finds_the_needle_at_every_depth_and_its_induction_head_ranks_first(circuit, engine, depths):
    result = needle(circuit, haystack=cc.haystack(), needle=cc.NEEDLE, question=cc.QUESTION, lengths=[1100],
                    depths=depths, max_new_tokens=16, engine=engine)
    assert result.engine == engine and len(result.runs) == len(depths)
    for run in result.runs:
        assert run.length == 1100 and run.retrieved, (run.depth, run.answer)
        assert run.answer.split()[:14] == cc.NEEDLE_WORDS
    ranked = result.heads()
    layer, head = cc.RETRIEVAL_HEAD
    assert (ranked[0]["layer"], ranked[0]["head"]) == (layer, head)
    assert ranked[0]["retrieval_score"] >= 0.9 and ranked[0]["retrieval"]
    scores = result.retrieval_scores()
    for z_layer, z_head in cc.ZEROED_HEADS:
        assert scores[z_layer][z_head] == 0.0
    # The needle's depth moves its span: the runs' spans differ, and each ends where the needle's tokens do.
    starts = [run.needle_start for run in result.runs]
    assert starts == sorted(starts) and len(set(starts)) == len(depths)


def test_the_prompt_is_the_length_asked_with_the_needle_at_a_sentence_boundary(circuit):
    from attnviz.needle.haystack import PromptBuilder
    from attnviz.needle.model import load_stepper

    _, codec = load_stepper(circuit, engine="native")
    builder = PromptBuilder(codec, haystack=cc.haystack(), needle=cc.NEEDLE, question=cc.QUESTION)
    needle_ids = codec.encode(cc.NEEDLE)
    for depth in (0.0, 0.3, 0.5, 1.0):
        prompt = builder.build(700, depth)
        assert len(prompt.ids) == 700 and prompt.needle == needle_ids
        before = codec.decode([prompt.ids[prompt.start - 1]])
        assert prompt.start == 1 or depth == 1.0 or before.endswith("."), (depth, before)  # depth 1: last, as is
    first, last = builder.build(700, 0.0), builder.build(700, 1.0)
    assert first.start == len(codec.start) == 1
    assert last.end == 700 - len(builder.suffix)
    middle = builder.build(700, 0.5)
    asked = len(codec.start) + round((700 - builder.fixed) * 0.5)  # half the haystack's tokens in
    assert asked - 10 <= middle.start <= asked  # moved back to the sentence's end: sentences here are ≤ 10 tokens


@pytest.fixture(scope="module")
def lm(tiny_hf, tmp_path_factory):
    """LLaMA and GPT-2 language models (with heads) with room for a needle, seeded."""
    from transformers import AutoConfig, AutoModelForCausalLM

    root = tmp_path_factory.mktemp("needle_lm")
    folders = {}
    for family in ("gpt2", "llama"):
        folder = root / family
        shutil.copytree(tiny_hf[family], folder)
        config = AutoConfig.from_pretrained(folder)
        if family == "gpt2":
            config.n_positions = 1024
        else:
            config.max_position_embeddings = 1024
        torch.manual_seed(0)
        AutoModelForCausalLM.from_config(config).save_pretrained(folder)
        folders[family] = str(folder)
    return folders


@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize("engine", ["native", "fused", "hf"])
def test_the_answers_are_transformers_greedy_generate_on_every_engine(lm, family, engine):
    from transformers import AutoModelForCausalLM

    from attnviz.needle.haystack import NEEDLE, QUESTION, PromptBuilder
    from attnviz.needle.model import load_stepper

    result = needle(lm[family], lengths=[300], depths=[0.0, 0.6], max_new_tokens=8, engine=engine)
    assert result.engine == engine
    _, codec = load_stepper(lm[family], engine="hf")
    builder = PromptBuilder(codec, haystack=None, needle=NEEDLE, question=QUESTION)
    model = AutoModelForCausalLM.from_pretrained(lm[family], attn_implementation="eager").eval()
    for run in result.runs:
        prompt = builder.build(300, run.depth)
        with torch.no_grad():
            out = model.generate(torch.tensor([prompt.ids]), max_new_tokens=8, do_sample=False, pad_token_id=0)
        expected = out[0, len(prompt.ids):].tolist()
        assert run.answer_ids == expected[: len(run.answer_ids)] and run.answer_ids, (run.answer_ids, expected)
        assert run.needle_start == prompt.start and run.length == 300


def test_each_steps_row_is_the_full_forward_pass_row(lm):
    """The rows the scores read are transformers' eager attention of the same tokens, at the step's position."""
    from transformers import AutoModelForCausalLM

    from attnviz.needle.model import load_stepper
    from attnviz.sources.stepping import prefill, step

    model = AutoModelForCausalLM.from_pretrained(lm["llama"], attn_implementation="eager").eval()
    for engine in ("native", "fused", "hf"):
        stepper, codec = load_stepper(lm["llama"], engine=engine)
        assert stepper.engine == engine
        ids = codec.start + codec.encode("the cat sat on the mat and the dog ran far away")
        prefill(stepper, ids[:-1])
        logits, rows = step(stepper, ids[-1])
        with torch.no_grad():
            out = model(torch.tensor([ids]), output_attentions=True)
        expected = torch.stack([layer[0, :, -1] for layer in out.attentions])
        torch.testing.assert_close(rows, expected, atol=2e-6, rtol=1e-5)
        torch.testing.assert_close(logits, out.logits[0, -1], atol=1e-4, rtol=1e-4)
        # every row of a feed (generate's matrix) on a fresh cache: the whole forward pass's
        stepper.reset()
        _, every = stepper.feed(ids, rows="all")
        torch.testing.assert_close(every, torch.stack([layer[0] for layer in out.attentions]), atol=2e-6, rtol=1e-5)


def test_a_result_saves_and_loads_and_a_damaged_one_is_refused(circuit, tmp_path):
    result = needle(circuit, haystack=cc.haystack(), needle=cc.NEEDLE, question=cc.QUESTION, lengths=[200],
                    depths=[0.5], max_new_tokens=4)
    path = tmp_path / "run.json"
    result.save(path)
    loaded = NeedleResult.load(path)
    assert loaded.to_dict() == result.to_dict()
    data = result.to_dict()
    data["runs"][0]["retrieval"] = [[0.1]]
    import json

    path.write_text(json.dumps(data))
    with pytest.raises(AttnvizError, match="layers"):
        NeedleResult.load(path)
    path.write_text("{}")
    with pytest.raises(AttnvizError, match="not an attnviz needle result"):
        NeedleResult.load(path)


def test_a_grid_the_model_cannot_run_is_refused_before_any_run(circuit):
    with pytest.raises(AttnvizError, match="positions"):
        needle(circuit, lengths=[5000], depths=[0.5])
    with pytest.raises(AttnvizError, match="cannot hold the needle"):
        needle(circuit, lengths=[10], depths=[0.5])
    with pytest.raises(AttnvizError, match="fraction"):
        needle(circuit, lengths=[300], depths=[1.5])


@pytest.mark.slow
def test_ray_and_local_give_identical_json(circuit, ray_cluster):
    kwargs = {"haystack": cc.haystack(), "needle": cc.NEEDLE, "question": cc.QUESTION, "lengths": [300],
              "depths": [0.0, 0.5, 1.0], "max_new_tokens": 16}
    local = needle(circuit, **kwargs)
    seen: list[int] = []
    on_ray = needle(circuit, backend="ray", jobs=2, progress=lambda done, total, run: seen.append(done), **kwargs)
    assert on_ray.to_dict() == local.to_dict()
    assert seen == list(range(4)) and all(run.retrieved for run in on_ray.runs)


def test_the_question_goes_in_the_models_chat_template_where_it_has_one(lm):
    from transformers import AutoTokenizer

    from attnviz.needle.haystack import NEEDLE, QUESTION, PromptBuilder
    from attnviz.sources.stepping import codec_from_tokenizer

    tokenizer = AutoTokenizer.from_pretrained(lm["llama"])
    plain = codec_from_tokenizer(tokenizer, [])
    assert plain.chat is None
    tokenizer.chat_template = ("{% for m in messages %}[USER] {{ m['content'] }} [END]{% endfor %}"
                               "{% if add_generation_prompt %} [BOT]{% endif %}")
    codec = codec_from_tokenizer(tokenizer, [])
    assert codec.chat == ("[USER] ", " [END] [BOT]")
    prompt = PromptBuilder(codec, haystack=None, needle=NEEDLE, question=QUESTION).build(400, 0.5)
    text = codec.decode(prompt.ids)
    assert len(prompt.ids) == 400 and text.startswith("[USER]") and text.endswith("[BOT]")
    assert QUESTION in text and text.index(QUESTION) > text.index(codec.decode(prompt.needle))
