"""Attention during generation by encoder-decoder models (T5, BART; issue 14). Tokens equal
transformers' own generate; each decoder self- and cross-attention row equals the one transformers
computed at the step that processed that token, and the whole result equals one teacher-forced
forward pass over the final target (the decoder is causal, so earlier rows do not change)."""

from __future__ import annotations

import pytest
import torch

import attnviz
from attnviz.errors import ModelNotFoundError, UsageError
from attnviz.generation import Sampling, generated_summary
from attnviz.generation.seq2seq import generate_seq2seq_hf
from attnviz.labels import printable
from attnviz.result import AttentionResult

SOURCE = "Der Hund jagt die Katze."
N = 6


@pytest.fixture(scope="module")
def s2s(tiny_hf, tmp_path_factory):
    """The tiny T5 and BART folders with seeded ...ForConditionalGeneration weights (language-model heads)."""
    import shutil

    from transformers import AutoConfig, AutoModelForSeq2SeqLM

    root = tmp_path_factory.mktemp("tiny_s2s")
    folders = {}
    # BART's wider initialisation makes its greedy tokens vary (the default repeats one token).
    for family, options in (("t5", {}), ("bart", {"init_std": 0.2})):
        folder = root / family
        shutil.copytree(tiny_hf[family], folder)
        torch.manual_seed(0)
        AutoModelForSeq2SeqLM.from_config(AutoConfig.from_pretrained(folder, **options)).save_pretrained(folder)
        folders[family] = str(folder)
    return folders


def _transformers(folder: str):
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()
    return model, tokenizer(SOURCE, return_tensors="pt")["input_ids"]


def _stack(layers) -> torch.Tensor:
    return torch.stack([a[0] for a in layers])


def _ours(folder: str, n: int = N, **sampling) -> AttentionResult:
    return generate_seq2seq_hf(folder, SOURCE, name="tiny", max_new_tokens=n, sampling=Sampling(**sampling),
                               stop_at_eos=False)


@pytest.mark.parametrize("family", ["t5", "bart"])
def test_greedy_generation_equals_transformers(s2s, family, tmp_path):
    result = _ours(s2s[family])
    model, src = _transformers(s2s[family])
    with torch.no_grad():
        # Not stopping at the end token: never it, and none forced at the length limit (BART's forced_eos_token_id).
        out = model.generate(input_ids=src, max_new_tokens=N, min_new_tokens=N, do_sample=False, forced_eos_token_id=None,
                             output_attentions=True, return_dict_in_generate=True)
        full = model(input_ids=src, decoder_input_ids=out.sequences, output_attentions=True)
    sequence = out.sequences[0].tolist()
    assert result.metadata["target_ids"] == sequence and len(sequence) == N + 1
    assert result.token_ids == src[0].tolist() and len(result.target_tokens) == N + 1
    assert sequence[0] == model.config.decoder_start_token_id and result.metadata["target_start"] == 1
    assert result.metadata["encoder_decoder"] and result.metadata["generation"] and result.metadata["engine"] == "fused"
    assert result.decoder_attentions.shape == (2, 4, N + 1, N + 1) and result.cross_attentions.shape == (2, 4, N + 1, src.shape[1])
    # Each target token's rows from the step that processed it (transformers keeps no row for the last token).
    assert len(out.decoder_attentions) == len(out.cross_attentions) == N
    for t, (own, cross) in enumerate(zip(out.decoder_attentions, out.cross_attentions, strict=True)):
        for layer in range(2):
            assert own[layer].shape[-2:] == (1, t + 1)
            assert torch.allclose(result.decoder_attentions[layer, :, t, : t + 1], own[layer][0, :, 0], atol=1e-5)
            assert torch.allclose(result.cross_attentions[layer, :, t], cross[layer][0, :, 0], atol=1e-5)
    # One teacher-forced pass over the final target: every row, the last one too, and zeros above the diagonal.
    assert torch.allclose(result.decoder_attentions, _stack(full.decoder_attentions), atol=1e-5)
    assert torch.allclose(result.cross_attentions, _stack(full.cross_attentions), atol=1e-5)
    assert torch.allclose(result.attentions, _stack(full.encoder_attentions), atol=1e-5)
    assert torch.equal(result.decoder_attentions.triu(1), torch.zeros_like(result.decoder_attentions))
    assert torch.allclose(result.attentions, _stack(out.encoder_attentions), atol=1e-5)
    # It saves and loads like any result, metadata included.
    saved = AttentionResult.load(result.save(tmp_path / "g.npz"))
    assert saved.metadata == result.metadata and saved.target_tokens == result.target_tokens
    assert saved.tokens == result.tokens and saved.target_special == result.target_special
    for name in ("attentions", "decoder_attentions", "cross_attentions"):
        assert torch.equal(getattr(saved, name), getattr(result, name)), name


def test_bart_greedy_tokens_vary(s2s):
    """The BART fixture's greedy tokens are not one token repeated, so the token check above means something."""
    generated = _ours(s2s["bart"]).metadata["target_ids"][1:]
    assert len(set(generated)) > 1


def test_it_stops_at_the_end_of_sequence_token(s2s, tmp_path):
    import json
    import shutil

    first = _ours(s2s["t5"], 2).metadata["target_ids"][1]
    folder = tmp_path / "t5"  # the same model, whose end-of-sequence token is the one it generates first
    shutil.copytree(s2s["t5"], folder)
    settings = json.loads((folder / "generation_config.json").read_text())
    (folder / "generation_config.json").write_text(json.dumps({**settings, "eos_token_id": first}))
    result = generate_seq2seq_hf(str(folder), SOURCE, name="tiny", max_new_tokens=N, sampling=Sampling(),
                                 stop_at_eos=True)
    model, src = _transformers(str(folder))
    with torch.no_grad():
        out = model.generate(input_ids=src, max_new_tokens=N, do_sample=False)
        full = model(input_ids=src, decoder_input_ids=out, output_attentions=True)
    assert result.metadata["target_ids"] == out[0].tolist() == [model.config.decoder_start_token_id, first]
    assert result.metadata["stopped_at_eos"]
    assert torch.allclose(result.decoder_attentions, _stack(full.decoder_attentions), atol=1e-5)
    assert torch.allclose(result.cross_attentions, _stack(full.cross_attentions), atol=1e-5)


def test_sampling_is_seeded_and_equals_transformers(s2s):
    options = dict(sample=True, temperature=0.8, top_k=50, top_p=0.95, seed=7)
    first, again = _ours(s2s["bart"], 8, **options), _ours(s2s["bart"], 8, **options)
    assert first.metadata["target_ids"] == again.metadata["target_ids"]
    assert first.metadata["sampling"] == options
    model, src = _transformers(s2s["bart"])
    with torch.no_grad():
        torch.manual_seed(7)
        out = model.generate(input_ids=src, max_new_tokens=8, min_new_tokens=8, do_sample=True, temperature=0.8,
                             top_k=50, top_p=0.95, forced_eos_token_id=None)
    assert first.metadata["target_ids"] == out[0].tolist()
    other = _ours(s2s["bart"], 8, **{**options, "seed": 8})
    assert other.metadata["target_ids"] != first.metadata["target_ids"]  # the seed is what fixed them


def test_generated_summary_reads_the_decoder_side(s2s):
    result = _ours(s2s["t5"], 4)
    model, src = _transformers(s2s["t5"])
    with torch.no_grad():
        full = model(input_ids=src, decoder_input_ids=torch.tensor([result.metadata["target_ids"]]),
                     output_attentions=True)
    cross = generated_summary(result, layer=1, head=2, top=2, kind="cross")
    own = generated_summary(result, top=2)  # "self": the decoder's, mean of layers and heads
    assert [t for t, _, _ in cross] == [t for t, _, _ in own] == [1, 2, 3, 4]
    expected_cross = full.cross_attentions[1][0, 2].double()
    expected_self = _stack(full.decoder_attentions).double().mean(dim=(0, 1))
    for (t, label, in_source), (_, _, in_target) in zip(cross, own, strict=True):
        assert label == result.target_tokens[t]
        best = expected_cross[t].topk(2)
        assert [k for k, _, _ in in_source] == best.indices.tolist()
        assert [w for _, _, w in in_source] == pytest.approx(best.values.tolist(), abs=1e-5)
        assert [lab for _, lab, _ in in_source] == [result.tokens[k] for k in best.indices.tolist()]
        best = expected_self[t, : t + 1].topk(2)
        assert [k for k, _, _ in in_target] == best.indices.tolist()
        assert [lab for _, lab, _ in in_target] == [result.target_tokens[k] for k in best.indices.tolist()]
    with pytest.raises(UsageError, match="layer=2 is out of range"):
        generated_summary(result, layer=2, kind="cross")
    decoder_only = AttentionResult(tokens=["a", "b"], attentions=torch.tensor([[[[1.0, 0.0], [0.5, 0.5]]]]),
                                   metadata={"prompt_length": 1})
    with pytest.raises(UsageError, match="needs an encoder-decoder result"):
        generated_summary(decoder_only, kind="cross")


def test_generate_on_the_command_line(run_cli, s2s, tmp_path):
    r = run_cli("generate", SOURCE, "--model", s2s["bart"], "-n", "4", "--no-stop-at-eos", "--width", "200",
                "--out", str(tmp_path / "g.npz"))
    assert r.exit_code == 0, r.stderr
    saved = AttentionResult.load(tmp_path / "g.npz")
    start = saved.metadata["target_start"]
    assert saved.metadata["encoder_decoder"] and len(saved.target_tokens) - start == 4
    sources = [line.split("source ←")[1].strip() for line in r.stdout.splitlines() if "source ←" in line]
    targets = [line.split("target ←")[1].strip() for line in r.stdout.splitlines() if "target ←" in line]
    assert len(sources) == len(targets) == 4
    cross = saved.cross_attentions.double().mean(dim=(0, 1))
    own = saved.decoder_attentions.double().mean(dim=(0, 1))
    for i, t in enumerate(range(start, len(saved.target_tokens))):
        k = int(cross[t].argmax())
        assert sources[i].startswith(f"{printable(saved.tokens[k])} ({k}) {float(cross[t, k]):.2f}")
        k = int(own[t, : t + 1].argmax())
        assert targets[i].startswith(f"{printable(saved.target_tokens[k])} ({k}) {float(own[t, k]):.2f}")
    r = run_cli("generate", SOURCE, "--model", s2s["t5"], "-n", "3", "--out", str(tmp_path / "g.png"))
    assert r.exit_code == 0 and (tmp_path / "g.png").read_bytes().startswith(b"\x89PNG"), r.stderr
    r = run_cli("generate", SOURCE, "--model", s2s["t5"], "-n", "3", "--out", str(tmp_path / "g.html"))
    assert r.exit_code == 0, r.stderr
    page = (tmp_path / "g.html").read_text(encoding="utf-8")
    assert '"cross"' in page and '"decoder"' in page
    r = run_cli("generate", SOURCE, "--model", s2s["t5"], "-n", "2", "--width", "120")  # the terminal heatmap
    assert r.exit_code == 0 and "generated tokens' cross-attention" in r.stdout, r.stderr
    r = run_cli("generate", SOURCE, "--model", s2s["bart"], "-n", "64")  # BART's decoder has 64 positions
    assert r.exit_code == 2 and "--max-new-tokens 64 and the decoder start token pass the 64 positions" in r.stderr


def test_what_cannot_generate_is_refused(s2s, tiny_hf, tmp_path):
    import shutil
    from pathlib import Path

    from transformers import BartConfig, BartModel

    folder = tmp_path / "untied"  # a head not tied to the embeddings, saved as a bare BartModel: no lm_head weights
    BartModel(BartConfig.from_pretrained(tiny_hf["bart"], tie_word_embeddings=False)).save_pretrained(folder)
    for tokenizer_file in Path(tiny_hf["bart"]).glob("*token*"):
        shutil.copy(tokenizer_file, folder)
    with pytest.raises(ModelNotFoundError, match=r"has no language-model head .*ForConditionalGeneration"):
        generate_seq2seq_hf(str(folder), SOURCE, name="untied", max_new_tokens=2, sampling=Sampling(),
                            stop_at_eos=True)
    with pytest.raises(ModelNotFoundError, match="is not an encoder-decoder language model"):
        generate_seq2seq_hf(tiny_hf["gpt2"], SOURCE, name="gpt2", max_new_tokens=2, sampling=Sampling(),
                            stop_at_eos=True)
    with pytest.raises(UsageError, match=r"max_new_tokens=64 and the decoder start token pass the 64 .* at most 63"):
        _ours(s2s["bart"], 64)
    with pytest.raises(UsageError, match="add sample=True"):  # checked by generate, before any model loads
        attnviz.generate(SOURCE, model=s2s["bart"], max_new_tokens=2, seed=1)
