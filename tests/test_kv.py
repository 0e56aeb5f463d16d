"""attnviz kv: what a KV-cache policy loses, against answers known in advance and an independent reference for
the cut cache (transformers' eager attention with the evicted keys masked)."""

from __future__ import annotations

import json

import copy_circuit as cc
import pytest
import torch

from attnviz.errors import AttnvizError
from attnviz.kv import kv

TEXT = ("the cat sat on the mat and the dog ran far away over the hill and then the cat came back home to sleep "
        "while the dog kept running after the ball near the river")
QUESTION = "where did the cat go"


@pytest.fixture(scope="module")
def llama(tiny_hf, tmp_path_factory):
    """A LLaMA language model with grouped-query attention (4 query heads over 2 key/value heads), seeded."""
    from tiny_models import causal_lm

    return causal_lm(tiny_hf["llama"], tmp_path_factory.mktemp("kv_lm") / "llama", positions=512)


@pytest.fixture(scope="module")
def circuit(tmp_path_factory):
    return str(cc.build(tmp_path_factory.mktemp("kv_copy") / "copy"))


@pytest.mark.parametrize("engine", ["native", "fused", "hf"])
def test_keeping_every_key_loses_nothing(llama, engine):
    result = kv(llama, TEXT, policies=["streaming", "h2o", "snapkv", "tova", "pyramidkv", "oracle"], budgets=[1.0],
                question=QUESTION, answer_tokens=4, engine=engine)
    assert result.engine == engine and result.n_kv_heads == 2
    for run in result.runs:
        assert run.keys == [result.n_context] * result.n_layers
        assert len(run.heads) == result.n_layers * result.n_kv_heads  # one choice per key/value head
        for head in run.heads:
            assert head.recall == pytest.approx(1.0, abs=1e-6) and head.error == pytest.approx(0.0, abs=1e-6)  # float32 rows
            assert head.dropped == []
        assert run.kl == pytest.approx(0.0, abs=1e-9) and run.changed is False


def test_every_engine_loses_the_same(llama):
    """The native engine's own attention, the fused engine's row blocks and transformers' eager weights (values from
    its cache) give the same recall, output error and KL, head by head."""
    found = {engine: kv(llama, TEXT, policies=["h2o", "snapkv"], budgets=[6], question=QUESTION, answer_tokens=2,
                        engine=engine) for engine in ("native", "fused", "hf")}
    reference = found["native"]
    for engine, result in found.items():
        for run, expected in zip(result.runs, reference.runs, strict=True):
            assert run.kl == pytest.approx(expected.kl, rel=1e-4, abs=1e-9), engine
            for head, other in zip(run.heads, expected.heads, strict=True):
                assert head.recall == pytest.approx(other.recall, abs=1e-5), (engine, head)
                assert head.error == pytest.approx(other.error, abs=1e-4), (engine, head)


def test_the_oracle_keeps_at_least_what_any_policy_keeps(llama):
    result = kv(llama, TEXT, policies=["streaming", "h2o", "snapkv", "tova", "oracle"], budgets=[4, 0.3],
                question=QUESTION, answer_tokens=2)
    oracle = {(run.budget, h.layer, h.kv_head): h.recall for run in result.runs if run.policy == "oracle"
              for h in run.heads}
    for run in result.runs:
        for head in run.heads:
            assert head.recall <= oracle[(run.budget, head.layer, head.kv_head)] + 1e-9, (run.policy, head)
    losses = result.losses()
    assert [h.recall for _, h in losses] == sorted(h.recall for _, h in losses)  # the worst first


def _context_and_question():
    words = cc.haystack().split()
    context = " ".join(words[:300]) + " " + cc.NEEDLE + " " + " ".join(words[300:600])
    return context, "Question: " + " ".join(cc.NEEDLE_WORDS) + " . Answer:"


@pytest.mark.slow  # the copy circuit on ~600 words, each cut run end to end
def test_a_planted_retrieval_head_keeps_the_needle_under_snapkv_and_loses_it_under_streaming(circuit):
    context, question = _context_and_question()
    result = kv(circuit, context, policies=["streaming", "snapkv"], budgets=[32], question=question,
                answer_tokens=14, question_window=True, engine="native")
    assert result.full_answer.split() == cc.NEEDLE_WORDS
    runs = {run.policy: run for run in result.runs}
    layer, head = cc.RETRIEVAL_HEAD
    induction = {p: next(h for h in run.heads if (h.layer, h.kv_head) == (layer, head)) for p, run in runs.items()}
    assert induction["snapkv"].recall > 0.85 and induction["streaming"].recall < 0.1
    assert runs["snapkv"].changed is False and runs["snapkv"].answer.split() == cc.NEEDLE_WORDS
    assert runs["streaming"].changed is True  # the needle is gone: the answer changes exactly then
    assert {t for _, t, _ in induction["streaming"].dropped} & set(cc.NEEDLE_WORDS)  # named among the dropped
    assert runs["snapkv"].kl < runs["streaming"].kl


@pytest.mark.parametrize("engine", ["native", "fused"])
@pytest.mark.parametrize("which", ["circuit", "llama"])
def test_the_cut_cache_equals_eager_attention_with_the_evicted_keys_masked(request, which, engine):
    """StreamingLLM keeps the same keys in every head: transformers' eager attention over the whole sequence with
    those keys hidden from the future rows is an independent reference for the cut cache's distributions (GPT-2's
    learned positions and LLaMA's rotary ones, under grouped-query attention)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from attnviz.kv.evict import CacheRunner
    from attnviz.sources.causal import load_causal

    folder = request.getfixturevalue(which)
    context, question = _context_and_question() if which == "circuit" else (TEXT, QUESTION)
    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    ctx = tokenizer(context)["input_ids"]
    future = tokenizer(question, add_special_tokens=False)["input_ids"]
    kept = torch.zeros(len(ctx), dtype=torch.bool)
    kept[:4] = True
    kept[-(len(ctx) // 3):] = True  # sinks + a recent window
    n_kv = model.config.get_text_config().num_key_value_heads if which == "llama" else 2
    stepper = load_causal(folder, engine=engine).stepper  # the native engine's cut KVCache, or transformers'
    assert stepper.engine == engine
    runner = CacheRunner(stepper, ctx, [])
    cut = runner.run(runner.cut([kept.expand(n_kv, -1)] * model.config.num_hidden_layers), future, 0)
    total = len(ctx) + len(future)
    allowed = torch.tril(torch.ones(total, total, dtype=torch.bool))
    allowed[len(ctx):, : len(ctx)] &= kept  # the future rows do not see the evicted keys
    mask = torch.zeros(1, 1, total, total).masked_fill(~allowed, torch.finfo(torch.float32).min)
    with torch.no_grad():
        logits = model(torch.tensor([ctx + future]), attention_mask=mask).logits[0, len(ctx):]
    torch.testing.assert_close(cut.logprobs.float(), torch.log_softmax(logits.double(), -1).float(), atol=1e-4,
                               rtol=1e-4)
    full = runner.full(future, 0)
    assert (full.logprobs - cut.logprobs).abs().max() > 1e-3  # the cut matters: the check could fail


def test_the_continuation_is_the_future_when_asked(llama):
    result = kv(llama, TEXT, policies=["tova"], budgets=[1.0, 0.2], continue_tokens=6)
    assert result.future_mode == "continue" and len(result.future) == 6 and result.full_answer is None
    full = next(run for run in result.runs if run.budget == 1.0)
    assert full.kl == pytest.approx(0.0, abs=1e-9) and full.changed is False


@pytest.mark.parametrize(("kwargs", "says"), [
    ({"policies": ["lru"], "question": "q"}, "unknown"),
    ({"budgets": [0], "question": "q"}, "budget"),
    ({}, "future queries"),
    ({"question": "q", "continue_tokens": 3}, "not both"),
    ({"continue_tokens": 3, "question_window": True}, "question"),
])
def test_bad_requests_are_refused_before_the_model_runs(llama, kwargs, says):
    with pytest.raises((AttnvizError, ValueError), match=says):
        kv(llama, TEXT, **kwargs)


def test_the_command_prints_writes_and_refuses(run_cli, llama, tmp_path):
    paths = [tmp_path / f"kv.{kind}" for kind in ("json", "csv", "parquet", "png")]
    result = run_cli("kv", TEXT, "--model", llama, "--question", QUESTION, "--budget", "4,0.5", "--policy",
                     "streaming,oracle", "-n", "3", "--width", "80", "-q", *[x for p in paths for x in ("--out", str(p))])
    assert result.exit_code == 0, result.stderr
    wide = [line for line in result.stdout.splitlines() if len(line) > 80 and not line.startswith("wrote ")]
    assert wide == [], wide
    assert "oracle" in result.stdout and "the heads that lose most" in result.stdout
    document = json.loads(paths[0].read_text())
    assert document["schema"] == "attnviz.kv/1" and len(document["runs"]) == 4
    lines = paths[1].read_text().splitlines()
    assert lines[0].startswith("policy,budget,layer,kv_head") and len(lines) == 1 + 4 * 2 * 2
    assert paths[3].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    printed = run_cli("kv", TEXT, "--model", llama, "--question", QUESTION, "--budget", "0.5", "--policy", "h2o",
                      "-n", "2", "--format", "json")
    assert printed.exit_code == 0 and json.loads(printed.stdout)["runs"][0]["policy"] == "h2o"
    for args, says in ((["--policy", "lru", "--question", "q"], "lru"), (["--budget", "x", "--question", "q"], "budget"),
                       ([], "--question"), (["--question", "q", "--out", "x.docx"], "unknown extension")):
        bad = run_cli("kv", TEXT, "--model", llama, *args)
        assert bad.exit_code in (1, 2) and says in bad.stderr and "Traceback" not in bad.stderr, bad.stderr


def test_patterns_class_the_previous_token_head_streaming_and_export_both_forms(run_cli, circuit, tmp_path):
    from attnviz.kv.patterns import patterns

    text = " ".join(cc.haystack().split()[:700])
    result = patterns(circuit, text, budgets=[64], engine="native")
    heads = {(h.layer, h.head): h for h in result.heads[64]}
    previous = heads[cc.PREVIOUS_TOKEN_HEAD]
    assert previous.winner == "a_shape" and previous.recall["a_shape"] > 0.99 and previous.streaming_mass > 0.99
    layer, head = cc.PREVIOUS_TOKEN_HEAD
    assert result.full_attention[layer][head] is False  # streaming: sinks and a recent window keep it
    for z_layer, z_head in cc.ZEROED_HEADS:  # uniform attention over 700 keys: no window keeps it
        assert result.full_attention[z_layer][z_head] is True and heads[(z_layer, z_head)].streaming_mass < 0.9
    config, tsv = tmp_path / "best_pattern.json", tmp_path / "full_attention_heads.tsv"
    printed = run_cli("patterns", text, "--model", circuit, "--budget", "64", "--minference", str(config), "--duo",
                      str(tsv), "--format", "csv")
    assert printed.exit_code == 0, printed.stderr
    lines = printed.stdout.splitlines()
    assert lines[0].startswith("budget,layer,head,kv_head,recall_a_shape") and len(lines) == 1 + 4
    loaded = json.loads(config.read_text())
    assert len(loaded) == 2 and loaded[0]["0"][0] == "stream_llm" and set(loaded[1]) == {"0", "1"}
    rows = [[float(x) for x in line.split("\t")] for line in tsv.read_text().splitlines()]
    assert rows == [[0.0, 1.0], [1.0, 1.0]]  # L0H0 streams; the induction head and the zeroed heads retrieve


@pytest.mark.slow
def test_the_page_shows_the_needle_kept_by_snapkv_and_dropped_by_streaming(circuit, browser, tmp_path):
    from conftest import open_offline

    from attnviz.kv.page import check_document, page_document
    from attnviz.render.kv_page import render_kv_page

    context, question = _context_and_question()
    result = kv(circuit, context, policies=["streaming", "snapkv"], budgets=[32], question=question, answer_tokens=14,
                question_window=True, keep_sets=True)
    document = page_document(result, result.need)
    check_document(document)
    assert document["width"] == 1 and document["bins"] == result.n_context
    path = render_kv_page(document, tmp_path / "kv.html")
    requests, errors = [], []
    page = open_offline(browser, path, requests, errors, ready="body[data-drawn]")
    try:
        start = next(i for i, t in enumerate(result.tokens) if t == "n1")
        row = cc.RETRIEVAL_HEAD[0] * result.n_kv_heads + cc.RETRIEVAL_HEAD[1]

        def needle_colours(run: int) -> list[str]:
            page.click(f'tr[data-run="{run}"]')
            page.wait_for_function(f"document.body.dataset.drawn.startsWith('{run}:')")
            return page.evaluate(f"""() => {{
                const c = document.getElementById('matrix'), ctx = c.getContext('2d'), rowH = c.height / {result.n_layers * result.n_kv_heads};
                const out = [];
                for (let b = {start}; b < {start} + 12; b++) {{
                  const x = Math.floor((b + 0.5) / {result.n_context} * c.width), y = Math.floor(({row} + 0.5) * rowH);
                  out.push(Array.from(ctx.getImageData(x, y, 1, 1).data.slice(0, 3)).join(','));
                }}
                return out;
            }}""")
        assert all(c == "221,51,51" for c in needle_colours(0))  # streaming drops the needle the future needs: red
        assert not any(c == "221,51,51" for c in needle_colours(1))  # snapkv keeps it
        assert errors == [] and requests == [path.as_uri()]
    finally:
        page.close()


def test_the_json_holds_each_heads_kept_keys_as_ranges(llama):
    result = kv(llama, TEXT, policies=["streaming", "snapkv"], budgets=[8], question=QUESTION, answer_tokens=2,
                keep_sets=True)
    document = result.to_dict()
    streaming = next(run for run in document["runs"] if run["policy"] == "streaming")
    n = result.n_context
    for layer in streaming["kept"]:
        for ranges in layer:
            assert ranges == [[0, 4], [n - 4, n]]  # the 4 sinks and the 4 most recent keys
    for run, original in zip(document["runs"], result.runs, strict=True):
        for layer, heads in zip(run["kept"], original.kept, strict=True):
            for ranges, positions in zip(layer, heads, strict=True):
                assert [p for a, b in ranges for p in range(a, b)] == positions and len(positions) == 8
