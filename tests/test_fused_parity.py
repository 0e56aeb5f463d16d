"""The fused engine (issue 30): attnviz's attention function in transformers' registry gives every layer's
weights equal to eager attention's ``output_attentions``, on tiny random models of 30 architectures built
from transformers' own config classes (encoders, decoders, encoder-decoders; grouped-query attention,
sliding windows alternating per layer, chunked attention, soft-capping, learned sinks, partial rotary,
q/k norms, mixtures of experts, relative position biases), for a padded batch of two texts of different
lengths: with transformers' own masks, with the masks described (evaluated a block of rows at a time),
and as row blocks made on demand. The layers' outputs equal eager's too. Families that do not route
attention through the registry (ALiBi's Bloom and Falcon) keep eager, and say why."""

from __future__ import annotations

import pytest
import torch

from attnviz.sources import hf_attention
from attnviz.sources.hf_attention import switch_to_fused, weights_mode

SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, vocab_size=99,
             max_position_embeddings=128)
GQA = dict(SMALL, num_key_value_heads=2)
GPT = dict(n_embd=32, n_layer=2, n_head=4, vocab_size=99, n_positions=128)
SEQ2SEQ = dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
               encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=99, max_position_embeddings=128)

# name: (config class, options, what it exercises)
ZOO = {
    "bert": ("BertConfig", SMALL, "encoder, absolute positions"),
    "roberta": ("RobertaConfig", dict(SMALL, pad_token_id=1), "encoder, padding-offset positions"),
    "distilbert": ("DistilBertConfig", dict(dim=32, n_layers=2, n_heads=4, hidden_dim=64, vocab_size=99), "encoder"),
    "albert": ("AlbertConfig", dict(SMALL, embedding_size=16), "encoder, one layer's weights shared"),
    "electra": ("ElectraConfig", dict(SMALL, embedding_size=16), "encoder"),
    "modernbert": ("ModernBertConfig", dict(SMALL, global_attn_every_n_layers=2, local_attention=4, pad_token_id=0,
                                            bos_token_id=2, eos_token_id=3, cls_token_id=2, sep_token_id=3),
                   "encoder, local and global layers, rotary"),
    "gpt2": ("GPT2Config", dict(GPT, bos_token_id=0, eos_token_id=0), "decoder, absolute positions"),
    "gpt_neox": ("GPTNeoXConfig", dict(SMALL, rotary_pct=0.5), "decoder, partial rotary"),
    "gptj": ("GPTJConfig", dict(GPT, rotary_dim=4), "decoder, partial rotary, parallel blocks"),
    "codegen": ("CodeGenConfig", dict(GPT, rotary_dim=4), "decoder, fused qkv"),
    "opt": ("OPTConfig", dict(SMALL, ffn_dim=64, word_embed_proj_dim=32), "decoder, learned positions"),
    "llama": ("LlamaConfig", GQA, "decoder, grouped-query attention"),
    "mistral": ("MistralConfig", dict(GQA, sliding_window=3), "decoder, sliding window"),
    "mixtral": ("MixtralConfig", dict(GQA, num_local_experts=4, num_experts_per_tok=2), "mixture of experts"),
    "qwen2": ("Qwen2Config", GQA, "decoder, qkv biases"),
    "qwen3": ("Qwen3Config", dict(GQA, head_dim=8), "decoder, q/k norms"),
    "qwen3_moe": ("Qwen3MoeConfig", dict(GQA, head_dim=8, num_experts=4, num_experts_per_tok=2,
                                         moe_intermediate_size=16), "q/k norms, mixture of experts"),
    "gemma": ("GemmaConfig", dict(GQA, head_dim=8), "decoder"),
    "gemma2": ("Gemma2Config", dict(GQA, head_dim=8, sliding_window=3, attn_logit_softcapping=5.0,
                                    final_logit_softcapping=3.0), "soft-capping, sliding windows alternating"),
    "gemma3": ("Gemma3TextConfig", dict(GQA, head_dim=8, sliding_window=3), "q/k norms, local and global layers"),
    "phi": ("PhiConfig", dict(SMALL, partial_rotary_factor=0.5), "partial rotary"),
    "phi3": ("Phi3Config", dict(GQA, pad_token_id=0, bos_token_id=1, eos_token_id=2), "fused qkv"),
    "olmo2": ("Olmo2Config", dict(GQA, pad_token_id=0, bos_token_id=1, eos_token_id=2), "q/k norms over all heads"),
    "stablelm": ("StableLmConfig", dict(GQA, partial_rotary_factor=0.25), "partial rotary"),
    "persimmon": ("PersimmonConfig", SMALL, "q/k layer norms, partial rotary"),
    "starcoder2": ("Starcoder2Config", dict(GQA, sliding_window=3), "sliding window, biases"),
    "cohere": ("CohereConfig", dict(GQA, pad_token_id=0, bos_token_id=1, eos_token_id=2), "parallel blocks"),
    "gpt_oss": ("GptOssConfig", dict(GQA, head_dim=8, num_local_experts=4, num_experts_per_tok=2, sliding_window=3,
                                     layer_types=["sliding_attention", "full_attention"]),
                "learned sinks, sliding window, mixture of experts"),
    "llama4": ("Llama4TextConfig", dict(GQA, head_dim=8, attention_chunk_size=3, intermediate_size_mlp=64,
                                        num_local_experts=2, no_rope_layers=[1, 0]), "chunked attention, no-RoPE layers"),
    "bart": ("BartConfig", SEQ2SEQ, "encoder-decoder, cross-attention"),
    "t5": ("T5Config", dict(d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, vocab_size=99),
           "encoder-decoder, relative position bias"),
}
LENGTHS = (9, 6)  # the second text padded on the right


def _model(name: str):
    import transformers

    config_name, options, _ = ZOO[name]
    torch.manual_seed(0)
    config = getattr(transformers, config_name)(**options)
    return transformers.AutoModel.from_config(config, attn_implementation="eager").eval()


def _inputs(model) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(4, 99, (2, LENGTHS[0]), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, LENGTHS[1]:] = 0
    inputs = {"input_ids": ids, "attention_mask": mask}
    if model.config.is_encoder_decoder:
        inputs["decoder_input_ids"] = ids[:, :5]
    return inputs


def _attentions(out, encoder_decoder: bool) -> list[tuple[str, torch.Tensor]]:
    names = ("encoder_attentions", "decoder_attentions", "cross_attentions") if encoder_decoder else ("attentions",)
    return [(name, a) for name in names for a in getattr(out, name)]


def _check(reference, got, encoder_decoder: bool) -> None:
    want_all, got_all = _attentions(reference, encoder_decoder), _attentions(got, encoder_decoder)
    assert len(want_all) == len(got_all) and len(want_all) >= 2
    for (name, want), (_, have) in zip(want_all, got_all, strict=True):
        if not isinstance(have, torch.Tensor):  # row blocks: made whole per text
            have = torch.stack([have.dense(b) for b in range(want.shape[0])])
        assert have.shape == want.shape, name
        for b, n in enumerate(LENGTHS):
            rows = n if name != "decoder_attentions" and name != "cross_attentions" else want.shape[-2]
            keys = n if name != "decoder_attentions" else want.shape[-1]
            torch.testing.assert_close(have[b, :, :rows, :keys].float(), want[b, :, :rows, :keys].float(),
                                       rtol=0, atol=1e-5, msg=lambda m, name=name, b=b: f"{name}, text {b}: {m}")
    hidden_want, hidden_got = reference[0], got[0]
    for b, n in enumerate(LENGTHS):
        rows = n if not encoder_decoder else hidden_want.shape[1]
        torch.testing.assert_close(hidden_got[b, :rows], hidden_want[b, :rows], rtol=0, atol=1e-4)


@pytest.mark.parametrize("name", sorted(ZOO))
def test_every_layer_equals_eager_attention(name, monkeypatch):
    model = _model(name)
    inputs = _inputs(model)
    encoder_decoder = bool(model.config.is_encoder_decoder)
    with torch.no_grad():
        reference = model(**inputs, output_attentions=True)
        assert switch_to_fused(model, inputs, family=name, encoder_decoder=encoder_decoder) is None
        assert hf_attention.is_fused(model)
        with weights_mode("whole"):  # transformers' own masks (sdpa_mask), weights made whole
            _check(reference, model(**inputs, output_attentions=True), encoder_decoder)
        with weights_mode("rows"):  # row blocks on demand
            _check(reference, model(**inputs, output_attentions=True), encoder_decoder)
        monkeypatch.setattr(hf_attention, "DESCRIBE_FROM", 0)  # every mask described, as for a long text
        with weights_mode("rows"):
            _check(reference, model(**inputs, output_attentions=True), encoder_decoder)
        plain = model(**inputs)  # no weights asked: the fused kernel alone, the same outputs
        torch.testing.assert_close(plain[0][0], reference[0][0], rtol=0, atol=1e-4)


def test_the_zoo_covers_what_the_issue_names():
    covered = " ".join(what for _, _, what in ZOO.values())
    for feature in ("encoder", "decoder", "encoder-decoder", "grouped-query", "sliding window", "soft-capping",
                    "partial rotary", "q/k norms", "mixture of experts", "sinks", "chunked"):
        assert feature in covered, feature
    assert len(ZOO) >= 20


@pytest.mark.parametrize("name", ["bloom", "falcon"])
def test_families_outside_the_registry_keep_eager_attention(name):
    """ALiBi's Bloom and Falcon compute attention themselves: the probe finds it, and the model stays on eager."""
    import transformers

    config = {"bloom": transformers.BloomConfig(hidden_size=32, n_layer=2, n_head=4, vocab_size=99),
              "falcon": transformers.FalconConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                                  vocab_size=99, alibi=True)}[name]
    torch.manual_seed(0)
    model = transformers.AutoModel.from_config(config, attn_implementation="eager").eval()
    inputs = _inputs(model)
    with torch.no_grad():
        before = model(**inputs, output_attentions=True).attentions
        reason = switch_to_fused(model, inputs, family=name, encoder_decoder=False)
        assert reason is not None and name in reason and "registry" in reason
        assert not hf_attention.is_fused(model)
        after = model(**inputs, output_attentions=True).attentions  # eager again, the same weights
    for want, have in zip(before, after, strict=True):
        torch.testing.assert_close(have, want, rtol=0, atol=0)


def test_half_precision_runs_the_model_in_it_and_the_weights_in_float32(tiny_hf):
    """``dtype="bfloat16"``: the model in bfloat16 (auto leaves the native engine for fused), the weights computed
    in float32 from its queries and keys: rows sum to 1 to float32 rounding, and near the float32 run's."""
    import attnviz
    from attnviz.errors import UsageError

    text = "The cat sat on the mat because it was tired."
    full = attnviz.extract(text, model=tiny_hf["llama"])
    half = attnviz.extract(text, model=tiny_hf["llama"], dtype="bfloat16")
    assert full.metadata["engine"] == "native" and half.metadata["engine"] == "fused"
    assert half.attentions.dtype == torch.float32
    torch.testing.assert_close(half.attentions.sum(-1), torch.ones(half.attentions.shape[:-1]), rtol=0, atol=1e-5)
    assert float((half.attentions - full.attentions).abs().max()) < 0.05
    with pytest.raises(UsageError, match="native engine computes in float32"):
        attnviz.extract(text, model=tiny_hf["llama"], engine="native", dtype="float16")
    with pytest.raises(UsageError, match="unknown"):
        attnviz.extract(text, model=tiny_hf["llama"], dtype="float8")


@pytest.fixture(scope="module")
def folders(tiny_hf, tmp_path_factory):
    """Saved models with the tiny LLaMA's tokenizer: a Gemma 2 (soft-capping, windows of 64 on every other
    layer, 1,024 positions) and a Bloom (ALiBi, outside the registry)."""
    import shutil

    import transformers
    from transformers import AutoConfig

    root = tmp_path_factory.mktemp("fused")
    vocab = AutoConfig.from_pretrained(tiny_hf["llama"]).vocab_size
    configs = {
        "gemma2": transformers.Gemma2Config(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                            num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                            max_position_embeddings=1024, sliding_window=64, attn_logit_softcapping=5.0),
        "bloom": transformers.BloomConfig(vocab_size=vocab, hidden_size=32, n_layer=2, n_head=4),
    }
    out = {}
    for name, config in configs.items():
        folder = root / name
        shutil.copytree(tiny_hf["llama"], folder)
        (folder / "config.json").unlink()
        torch.manual_seed(0)
        transformers.AutoModel.from_config(config).save_pretrained(folder)
        out[name] = str(folder)
    return out


def test_a_family_outside_the_registry_runs_eager_and_says_why(folders, run_cli):
    from attnviz.errors import ModelNotFoundError
    from attnviz.sources.resolve import load_source

    source = load_source(folders["bloom"])
    assert source.engine == "hf" and "does not route its attention" in source.describe()
    with pytest.raises(ModelNotFoundError, match=r"the fused engine cannot run .*use engine=hf or auto"):
        load_source(folders["bloom"], engine="fused")
    result = run_cli("heads", "The cat sat on the mat.", "--model", folders["bloom"], "--verbose")
    assert result.exit_code == 0, result.output
    assert "engine hf (bloom)" in result.stderr and "eager: bloom does not route" in result.stderr
    fused = run_cli("heads", "The cat sat on the mat.", "--model", folders["gemma2"], "--verbose")
    assert fused.exit_code == 0 and "engine fused (gemma2)" in fused.stderr


def test_a_checkpoint_loaded_again_is_not_probed_again_unless_its_files_changed(folders, monkeypatch, tmp_path):
    """The load check's verdict is kept for the process, by the folder and its files' sizes and times (and the
    class, config, precision and device): a second load of the same folder switches without running the probe,
    to the same engine; a folder whose files changed, or another folder, is probed."""
    import os
    import shutil

    from attnviz.sources.resolve import load_source

    probes = []
    real = hf_attention._compare
    monkeypatch.setattr(hf_attention, "_compare", lambda *a, **k: probes.append(1) or real(*a, **k))
    copy = tmp_path / "gemma2"
    shutil.copytree(folders["gemma2"], copy)
    first = load_source(str(copy), engine="fused")
    probed = len(probes)
    assert probed > 0 and first.engine == "fused"
    again = load_source(str(copy), engine="fused")
    assert len(probes) == probed and again.engine == "fused" and again.model is not first.model
    torch.testing.assert_close(again.extract("The cat sat.").attentions, first.extract("The cat sat.").attentions)
    weights = next(copy.glob("*.safetensors"))
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))
    load_source(str(copy), engine="fused")
    assert len(probes) > probed  # changed files: probed again
    bloom = load_source(folders["bloom"])
    probed = len(probes)
    assert bloom.engine == "hf" and load_source(folders["bloom"]).engine == "hf"  # an eager verdict is kept too
    assert len(probes) == probed


def test_a_long_text_through_described_masks_and_row_blocks_equals_eager(folders, monkeypatch):
    """728 tokens: each layer comes as row blocks (past 512 tokens), a window's mask described as transformers'
    function (64 keys on layer 0), soft-capping on both, and the weights equal the eager engine's."""
    import attnviz
    from attnviz.sources.resolve import load_source

    monkeypatch.setattr(hf_attention, "DESCRIBE_FROM", 100_000)  # 700 × 700 masks are described
    text = " ".join(["the cat sat on the mat and the dog ran after it"] * 33)
    fused_source = load_source(folders["gemma2"])
    assert fused_source.engine == "fused"
    stream = fused_source.stream_batch([text])
    masks = []
    for _, parts in stream:
        assert parts[0].made_from is not None  # row blocks, never the whole layer
        masks.append(type(parts[0].made_from[0].mask).__name__)
        del parts
    # the sliding layer's mask is transformers' function, described; the global one is plainly causal (no mask)
    assert len(stream.results[0].tokens) > 512 and masks == ["FunctionMask", "RowMask"]
    fused = attnviz.extract(text, model=folders["gemma2"])
    eager = attnviz.extract(text, model=folders["gemma2"], engine="hf")
    torch.testing.assert_close(fused.attentions, eager.attentions, rtol=0, atol=1e-5)
    row = fused.attentions[:, :, 600]  # layer 0 slides a window of 64: query 600 sees keys 537 to 600
    assert bool((row[0, :, :537] == 0).all()) and bool((row[0, :, 537:601] > 0).all())
    assert bool((row[1, :, :601] > 0).all())  # layer 1 sees every key before it


def test_the_load_check_catches_what_a_padded_probe_alone_would_miss():
    """Splinter's attention modules name no ``is_causal``: on an unpadded text (no mask handed over) attnviz would
    read it as causal; Doge reads its mask as a tensor, which a long text's described mask is not. Both are
    found at load (an unpadded text, and the masks described) and stay on eager attention."""
    import transformers

    for name, config in (
        ("splinter", transformers.SplinterConfig(**SMALL)),
        ("doge", transformers.DogeConfig(**GQA)),
    ):
        torch.manual_seed(0)
        model = transformers.AutoModel.from_config(config, attn_implementation="eager").eval()
        reason = switch_to_fused(model, _inputs(model), family=name, encoder_decoder=False)
        assert reason is not None and not hf_attention.is_fused(model), name
        assert ("described" in reason) == (name == "doge"), reason
        if name == "splinter":  # an encoder, on eager attention again: its first token sees the later ones
            with torch.no_grad():
                out = model(input_ids=_inputs(model)["input_ids"][:1], output_attentions=True).attentions
            assert bool((out[0][0, :, 0, 1:] > 0).all())


def test_a_mask_shared_by_every_query_is_read_row_block_by_row_block(monkeypatch):
    """Switch Transformers' encoder builds a ``[B, 1, 1, T]`` additive mask: past one block of rows (300 tokens)
    each block must still see it."""
    import transformers

    torch.manual_seed(0)
    config = transformers.SwitchTransformersConfig(d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,
                                                   num_heads=4, vocab_size=99, num_experts=2)
    model = transformers.SwitchTransformersEncoderModel(config).eval()
    model.set_attn_implementation("eager")
    ids = torch.randint(4, 99, (2, 300), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(ids)
    mask[1, 250:] = 0
    with torch.no_grad():
        reference = model(input_ids=ids, attention_mask=mask, output_attentions=True).attentions
        assert switch_to_fused(model, _inputs(model), family="switch", encoder_decoder=False) is None
        monkeypatch.setattr("attnviz.attention.rows.BLOCK_ELEMENTS", 4 * 32 * 300)  # blocks of 32 rows
        with weights_mode("rows"):
            got = model(input_ids=ids, attention_mask=mask, output_attentions=True).attentions
    for want, have in zip(reference, got, strict=True):
        for b, n in enumerate((300, 250)):
            torch.testing.assert_close(have.dense(b)[:, :n, :n], want[b, :, :n, :n], rtol=0, atol=1e-5)
