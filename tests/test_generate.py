"""Attention during generation, on transformers and on the native engine's own key/value cache.
Tokens equal transformers' own generate; every row equals the attention transformers computed at
that step, and the whole matrix equals one full forward pass over the final sequence (causal rows
do not change)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import attnviz
from attnviz.result import AttentionResult

PROMPT = "the cat sat on the"


@pytest.fixture(scope="module")
def lm(tiny_hf, tmp_path_factory):
    """Causal language models (with their language-model heads) of the tiny families, seeded, and of the families
    only transformers runs (:data:`tiny_models.TRANSFORMERS_ONLY`)."""
    from tiny_models import TRANSFORMERS_ONLY, build_transformers_only, causal_lm

    root = tmp_path_factory.mktemp("tiny_lm")
    folders = {family: causal_lm(tiny_hf[family], root / family) for family in ("gpt2", "llama", "mistral", "qwen2")}
    folders |= build_transformers_only(root, tiny_hf["llama"], tuple(TRANSFORMERS_ONLY))
    return folders


def _reference(folder: str, n: int, **options):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()
    encoded = tokenizer(PROMPT, return_tensors="pt")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else model.generation_config.eos_token_id
    seed = options.pop("seed", None)
    with torch.no_grad():
        if seed is not None:
            torch.manual_seed(seed)
        out = model.generate(**encoded, max_new_tokens=n, min_new_tokens=n, output_attentions=True,
                             return_dict_in_generate=True, pad_token_id=pad, **options)
        full = model(input_ids=out.sequences, output_attentions=True)
    return out, torch.stack([a[0] for a in full.attentions]), encoded["input_ids"].shape[1]


@pytest.mark.parametrize("engine", ["hf", "fused", "native"])
@pytest.mark.parametrize("family", ["gpt2", "llama", "mistral", "qwen2"])
def test_greedy_generation_equals_transformers(lm, family, engine):
    """Native: RoPE positions continued on the cache, grouped-query keys, Mistral's window of 5 over 11 tokens."""
    folder = lm[family]
    result = attnviz.generate(PROMPT, model=folder, max_new_tokens=6, stop_at_eos=False, engine=engine)
    assert result.metadata["engine"] == engine
    out, full, prompt_length = _reference(folder, 6, do_sample=False)
    assert result.token_ids == out.sequences[0].tolist() and result.metadata["prompt_length"] == prompt_length
    assert result.causal and torch.equal(result.attentions.triu(1), torch.zeros_like(result.attentions))
    # The prompt's rows from the first step, each later row from the step that processed it.
    row = 0
    for step in out.attentions:
        for layer, weights in enumerate(step):
            rows, width = weights.shape[-2:]  # Mistral's sliding-window cache keeps only the last keys
            end = row + rows
            assert torch.allclose(result.attentions[layer, :, row:end, end - width : end], weights[0], atol=1e-5)
        row += step[0].shape[-2]
    assert torch.allclose(result.attentions, full, atol=1e-5)  # the last row too, and nothing else differs


@pytest.mark.parametrize("family", ["gemma2", "qwen3", "phi3", "olmo2", "gpt_oss"])
def test_fused_generation_equals_transformers_on_families_only_transformers_runs(lm, family):
    """Through attnviz's attention function (soft-capping, sliding windows on a growing cache, q/k norms,
    sinks): the tokens and every step's rows equal transformers' eager generate."""
    folder = lm[family]
    result = attnviz.generate(PROMPT, model=folder, max_new_tokens=6, stop_at_eos=False)
    assert result.metadata["engine"] == "fused"
    out, full, prompt_length = _reference(folder, 6, do_sample=False)
    assert result.token_ids == out.sequences[0].tolist() and result.metadata["prompt_length"] == prompt_length
    row = 0
    for step in out.attentions:
        for layer, weights in enumerate(step):
            rows, width = weights.shape[-2:]
            end = row + rows
            torch.testing.assert_close(result.attentions[layer, :, row:end, end - width : end], weights[0],
                                       rtol=0, atol=1e-5)
        row += step[0].shape[-2]
    torch.testing.assert_close(result.attentions, full, rtol=0, atol=1e-5)


@pytest.mark.parametrize("engine", ["hf", "fused", "native"])
def test_sampling_is_seeded_and_equals_transformers(lm, engine):
    folder = lm["gpt2"]
    options = dict(sample=True, temperature=0.8, top_k=50, top_p=0.95, seed=7, engine=engine)
    first = attnviz.generate(PROMPT, model=folder, max_new_tokens=8, stop_at_eos=False, **options)
    again = attnviz.generate(PROMPT, model=folder, max_new_tokens=8, stop_at_eos=False, **options)
    assert first.token_ids == again.token_ids
    out, _, _ = _reference(folder, 8, do_sample=True, temperature=0.8, top_k=50, top_p=0.95, seed=7)
    assert first.token_ids == out.sequences[0].tolist()
    other = attnviz.generate(PROMPT, model=folder, max_new_tokens=8, stop_at_eos=False, **{**options, "seed": 8})
    assert other.token_ids != first.token_ids  # the seed matters (8 draws from ~200 tokens)


def test_native_sampling_warpers_equal_transformers():
    """Temperature, top-k and top-p applied as transformers' warpers do, on random logits."""
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    from attnviz.generation import Sampling
    from attnviz.sources.decoding import choose_next

    gen = torch.Generator().manual_seed(0)
    for trial in range(20):
        logits = torch.randn(1, 300, generator=gen) * 3
        sampling = Sampling(True, temperature=0.5 + trial / 10, top_k=[None, 1, 5, 40][trial % 4],
                            top_p=[None, 0.3, 0.9, 0.99, 1.0][trial % 5], seed=trial)
        expected = TemperatureLogitsWarper(sampling.temperature)(None, logits.clone())
        if sampling.top_k:
            expected = TopKLogitsWarper(sampling.top_k)(None, expected)
        if sampling.top_p is not None and sampling.top_p < 1:
            expected = TopPLogitsWarper(sampling.top_p)(None, expected)
        torch.manual_seed(trial)
        want = int(torch.multinomial(expected.softmax(-1), 1))
        torch.manual_seed(trial)
        assert choose_next(logits[0], sampling) == want
    banned = torch.zeros(10)
    banned[3] = 5.0
    assert choose_next(banned, Sampling()) == 3 and choose_next(banned, Sampling(), banned=[3]) != 3


def test_generate_on_the_command_line(run_cli, lm, tmp_path):
    folder = lm["gpt2"]
    r = run_cli("generate", PROMPT, "--model", folder, "-n", "4", "--no-stop-at-eos", "--width", "100",
                "--out", str(tmp_path / "g.npz"))
    assert r.exit_code == 0, r.stderr
    saved = AttentionResult.load(tmp_path / "g.npz")
    start = saved.metadata["prompt_length"]
    lines = [line for line in r.stdout.splitlines() if "←" in line]
    assert len(lines) == len(saved.tokens) - start == 4
    weights = saved.attentions.double().mean(dim=(0, 1))[start]
    top = int(weights[: start + 1].argmax())
    assert lines[0].split("←")[1].strip().startswith(f"{saved.tokens[top]} ({top})")
    r = run_cli("generate", PROMPT, "--model", folder, "-n", "3", "--out", str(tmp_path / "g.png"))
    assert r.exit_code == 0 and (tmp_path / "g.png").read_bytes().startswith(b"\x89PNG"), r.stderr


def test_what_cannot_generate_is_refused(run_cli, tiny_hf, lm):
    from attnviz.sources.resolve import default_model_folder

    r = run_cli("generate", PROMPT, "--model", str(default_model_folder()))  # the embedded MiniLM is an encoder
    assert r.exit_code == 2 and "is not a causal language model" in r.stderr
    r = run_cli("generate", PROMPT, "-n", "2")  # without --model: a shipped causal config, offline
    assert r.exit_code == 0 and "generating with sample_configs/causal.toml" in r.stderr and "causal-tiny" in r.stdout
    r = run_cli("generate", PROMPT, "--model", tiny_hf["llama"])  # a bare LlamaModel: no lm_head weights
    assert r.exit_code == 1 and "has no language-model head" in r.stderr
    r = run_cli("generate", PROMPT, "--model", lm["gpt2"], "--temperature", "0.5")
    assert r.exit_code == 2 and "add --sample" in r.stderr
    r = run_cli("generate", PROMPT, "--model", "sample_configs/tiny.toml")
    assert r.exit_code == 2 and "no language-model head" in r.stderr
    r = run_cli("generate", PROMPT, "--model", tiny_hf["gpt2"], "-n", "100000")
    assert r.exit_code == 2 and "--max-new-tokens 100000 must be between 1 and 4096" in r.stderr
    r = run_cli("generate", PROMPT, "--model", tiny_hf["llama"], "--engine", "native")
    assert r.exit_code == 1 and "no language-model head" in r.stderr


CAUSAL = str(Path(__file__).resolve().parent.parent / "sample_configs" / "causal.toml")


@pytest.mark.parametrize("options", [{}, {"sample": True, "seed": 3, "temperature": 1.5, "top_k": 8}])
def test_config_model_generates_offline(options):
    """The causal config model decodes on a key/value cache: every row equals a full causal forward
    pass over the final sequence, and each greedy token is the argmax of the tied head computed by
    hand (torch's layer_norm, the embedding rows of the vocabulary, 1/√d)."""
    import math

    import torch.nn.functional as F

    from attnviz.config import load_config
    from attnviz.sources.own_model import OwnTransformer, sinusoidal_positions
    from attnviz.sources.words import word_id

    result = attnviz.generate(PROMPT, model=CAUSAL, max_new_tokens=7, stop_at_eos=False, **options)
    cfg = load_config(CAUSAL)
    assert result.metadata["engine"] == "config" and len(result.tokens) == 5 + 7
    assert result.tokens[:5] == PROMPT.split() and set(result.tokens[5:]) <= set(cfg.vocab)
    model = OwnTransformer(cfg).eval()
    ids = torch.tensor([result.token_ids])
    full = torch.stack([out.weights[0] for _, out in model(ids, causal=True)])
    assert torch.allclose(result.attentions, full, atol=1e-6)
    if options:
        again = attnviz.generate(PROMPT, model=CAUSAL, max_new_tokens=7, stop_at_eos=False, **options)
        assert again.token_ids == result.token_ids
        return
    words = torch.tensor([word_id(w, cfg.vocab_size) for w in cfg.vocab])
    for t in range(5, len(result.tokens)):
        x = model.embed(ids[:, :t]) + sinusoidal_positions(t, cfg.d_model)
        for block in model.blocks:  # the pre-LN block written out with torch's own attention
            h = block.ln_attn(x)
            attn = block.attn
            heads = F.scaled_dot_product_attention(
                attn.q_proj(h).view(1, t, cfg.n_heads, -1).transpose(1, 2),
                attn.k_proj(h).view(1, t, cfg.n_heads, -1).transpose(1, 2),
                attn.v_proj(h).view(1, t, cfg.n_heads, -1).transpose(1, 2), is_causal=True)
            x = x + attn.o_proj(heads.transpose(1, 2).reshape(1, t, -1))
            x = x + block.mlp(block.ln_mlp(x))
        logits = model.embed.weight[words] @ F.layer_norm(x[0, -1], (cfg.d_model,)) / math.sqrt(cfg.d_model)
        assert result.tokens[t] == cfg.vocab[int(logits.argmax())]


def test_config_model_stops_at_its_eos_and_is_refused_without_a_vocabulary(run_cli, tmp_path):
    from conftest import write_config

    text = Path(CAUSAL).read_text(encoding="utf-8")
    stopper = write_config(tmp_path, text.replace('eos = "."', 'eos = "under"'), "stop.toml")
    free = attnviz.generate(PROMPT, model=stopper, max_new_tokens=12, stop_at_eos=False)
    stopped = attnviz.generate(PROMPT, model=stopper, max_new_tokens=12)
    assert "under" not in free.tokens[5:]  # never chosen when generation must not stop at it
    first = next((i for i, t in enumerate(free.tokens) if i >= 5 and t == "under"), None)
    assert stopped.metadata["stopped_at_eos"] == (stopped.tokens[-1] == "under")
    assert first is None and (stopped.tokens[-1] == "under" or len(stopped.tokens) == 17)
    bad = write_config(tmp_path, text.replace("causal = true", "causal = false"), "bad.toml")
    r = run_cli("generate", PROMPT, "--model", bad)
    assert r.exit_code == 1 and "vocab is for generating, which needs causal = true" in r.stderr
    r = run_cli("generate", PROMPT, "--model", write_config(tmp_path, text.replace('eos = "."', 'eos = "zebra"'), "e.toml"))
    assert r.exit_code == 1 and "eos = 'zebra' is not in vocab" in r.stderr
    r = run_cli("generate", PROMPT, "--model", write_config(tmp_path, text.replace('"the", "a"', '"the", "the cat"'), "v.toml"))
    assert r.exit_code == 1 and "is not one token" in r.stderr
    r = run_cli("generate", PROMPT, "--model", CAUSAL, "-n", "200")
    assert r.exit_code == 1 and "pass the 128 positions" in r.stderr


def test_a_checkpoints_generation_config_changes_neither_engine(lm, tmp_path):
    """Beams, penalties and a forced end token in generation_config.json are not applied (transformers
    would run beam search, which has no one row per step): both engines pick the same tokens as a
    checkpoint without them, and --no-stop-at-eos never ends on the end token."""
    import json
    import shutil

    folder = tmp_path / "configured"
    shutil.copytree(lm["gpt2"], folder)
    plain = attnviz.generate(PROMPT, model=lm["gpt2"], max_new_tokens=6, stop_at_eos=False, engine="native")
    settings = {"num_beams": 3, "repetition_penalty": 3.0, "no_repeat_ngram_size": 1, "min_length": 12, "top_p": 0.5}
    config = json.loads((folder / "generation_config.json").read_text()) if (folder / "generation_config.json").exists() else {}
    (folder / "generation_config.json").write_text(json.dumps({**config, **settings}))
    for engine in ("hf", "native"):
        result = attnviz.generate(PROMPT, model=str(folder), max_new_tokens=6, stop_at_eos=False, engine=engine)
        assert result.token_ids == plain.token_ids and not result.metadata["stopped_at_eos"]
