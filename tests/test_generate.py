"""Attention during generation (issue 14, first step: on transformers). Tokens equal transformers'
own generate; every row equals the attention transformers computed at that step, and the whole
matrix equals one full forward pass over the final sequence (causal rows do not change)."""

from __future__ import annotations

import pytest
import torch

import attnviz
from attnviz.result import AttentionResult

PROMPT = "the cat sat on the"


@pytest.fixture(scope="module")
def lm(tiny_hf, tmp_path_factory):
    """Causal language models (with their language-model heads) of the tiny families, seeded."""
    import shutil

    from transformers import AutoConfig, AutoModelForCausalLM

    root = tmp_path_factory.mktemp("tiny_lm")
    folders = {}
    for family in ("gpt2", "llama", "mistral", "qwen2"):
        folder = root / family
        shutil.copytree(tiny_hf[family], folder)
        torch.manual_seed(0)
        AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder)).save_pretrained(folder)
        folders[family] = str(folder)
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


@pytest.mark.parametrize("family", ["gpt2", "llama", "mistral", "qwen2"])
def test_greedy_generation_equals_transformers(lm, family):
    folder = lm[family]
    result = attnviz.generate(PROMPT, model=folder, max_new_tokens=6, stop_at_eos=False)
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


def test_sampling_is_seeded_and_equals_transformers(lm):
    folder = lm["gpt2"]
    options = dict(sample=True, temperature=0.8, top_k=50, top_p=0.95, seed=7)
    first = attnviz.generate(PROMPT, model=folder, max_new_tokens=8, stop_at_eos=False, **options)
    again = attnviz.generate(PROMPT, model=folder, max_new_tokens=8, stop_at_eos=False, **options)
    assert first.token_ids == again.token_ids
    out, _, _ = _reference(folder, 8, do_sample=True, temperature=0.8, top_k=50, top_p=0.95, seed=7)
    assert first.token_ids == out.sequences[0].tolist()


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
    r = run_cli("generate", PROMPT)  # the embedded MiniLM is an encoder
    assert r.exit_code == 2 and "is not a causal language model" in r.stderr
    r = run_cli("generate", PROMPT, "--model", tiny_hf["llama"])  # a bare LlamaModel: no lm_head weights
    assert r.exit_code == 1 and "has no language-model head" in r.stderr
    r = run_cli("generate", PROMPT, "--model", lm["gpt2"], "--temperature", "0.5")
    assert r.exit_code == 2 and "add --sample" in r.stderr
    r = run_cli("generate", PROMPT, "--model", "sample_configs/tiny.toml")
    assert r.exit_code == 2 and "no language-model head" in r.stderr
    r = run_cli("generate", PROMPT, "--model", tiny_hf["gpt2"], "-n", "100000")
    assert r.exit_code == 2 and "--max-new-tokens 100000 must be between 1 and 4096" in r.stderr
    with pytest.raises(attnviz.AttnvizError, match="engine=hf"):
        attnviz.generate(PROMPT, model=tiny_hf["gpt2"], engine="native")
