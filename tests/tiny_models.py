"""Tiny random Hugging Face models, built on the spot: configs + save_pretrained + tokenizers trained here.

Nothing is downloaded. Each family gets a folder with config.json, model.safetensors and a
tokenizer.json (with tokenizer_config.json so transformers' AutoTokenizer reads it too).
"""

from __future__ import annotations

from pathlib import Path

import torch

CORPUS = [
    "The cat sat on the mat.",
    "The dog chased the cat around the garden.",
    "Attention is all you need, they said.",
    "Tokenization splits unbelievably long words into pieces.",
    "A quick brown fox jumps over the lazy dog.\nNew lines matter too.",
    "Der Hund jagt die Katze. Das Haus ist klein.",
] * 3


def _wordpiece():
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok.train_from_iterator(CORPUS, trainers.WordPieceTrainer(vocab_size=120, special_tokens=special))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    from tokenizers import decoders

    tok.decoder = decoders.WordPiece()
    return tok, {"unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                 "mask_token": "[MASK]"}


def _byte_bpe(bos: str | None = None, eos: str | None = None, specials: tuple[str, ...] = ("<|endoftext|>",)):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=list(specials),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    if bos or eos:
        single = " ".join(x for x in (f"{bos}:0" if bos else None, "$A:0", f"{eos}:0" if eos else None) if x)
        pair = single + " " + " ".join(x for x in (f"{bos}:1" if bos else None, "$B:1", f"{eos}:1" if eos else None) if x)
        marks = [(t, tok.token_to_id(t)) for t in (bos, eos) if t]
        tok.post_processor = processors.TemplateProcessing(single=single, pair=pair, special_tokens=marks)
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def _save(folder: Path, model, tok, **special: str) -> Path:
    from transformers import PreTrainedTokenizerFast

    model.save_pretrained(folder, safe_serialization=True)
    PreTrainedTokenizerFast(tokenizer_object=tok, **special).save_pretrained(folder)
    return folder


def build_bert(folder: Path) -> Path:
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    tok, special = _wordpiece()
    cfg = BertConfig(vocab_size=tok.get_vocab_size(), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=64, type_vocab_size=2)
    return _save(folder, BertModel(cfg), tok, **special)


def build_gpt2(folder: Path, positions: int = 64, seed: int = 1) -> Path:
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(seed)
    tok = _byte_bpe()
    end = tok.token_to_id("<|endoftext|>")
    cfg = GPT2Config(vocab_size=tok.get_vocab_size(), n_embd=32, n_layer=2, n_head=4, n_positions=positions,
                     bos_token_id=end, eos_token_id=end)
    return _save(folder, GPT2Model(cfg), tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                 unk_token="<|endoftext|>")


def build_gpt2_long(folder: Path) -> Path:
    """A tiny GPT-2 with the real one's 1,024 positions: the README's stand-in for the hub's gpt2 (enough for the
    induction probe and the README's needle grid)."""
    return build_gpt2(folder, positions=1024, seed=11)


def build_llama(folder: Path, kind: str = "llama") -> Path:
    import transformers

    torch.manual_seed(2)
    tok = _byte_bpe(bos="<s>", specials=("<s>", "</s>", "<unk>"))
    common = dict(vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, rope_theta=500.0,
                  bos_token_id=tok.token_to_id("<s>"), eos_token_id=tok.token_to_id("</s>"))
    config_cls, model_cls = {
        "llama": (transformers.LlamaConfig, transformers.LlamaModel),
        "mistral": (transformers.MistralConfig, transformers.MistralModel),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2Model),
    }[kind]
    extra = {"sliding_window": 5} if kind == "mistral" else {}
    model = model_cls(config_cls(**common, **extra))
    return _save(folder, model, tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def build_t5(folder: Path) -> Path:
    from transformers import T5Config, T5Model

    torch.manual_seed(3)
    tok = _byte_bpe(eos="</s>", specials=("<pad>", "</s>", "<unk>"))
    cfg = T5Config(vocab_size=tok.get_vocab_size(), d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,
                   num_heads=4, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    return _save(folder, T5Model(cfg), tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")


def build_bart(folder: Path) -> Path:
    from transformers import BartConfig, BartModel

    torch.manual_seed(5)
    tok = _byte_bpe(bos="<s>", eos="</s>", specials=("<s>", "<pad>", "</s>", "<unk>"))
    cfg = BartConfig(vocab_size=tok.get_vocab_size(), d_model=32, encoder_layers=2, decoder_layers=2,
                     encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                     max_position_embeddings=64, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                     decoder_start_token_id=2)
    return _save(folder, BartModel(cfg), tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>")


def build_gpt2_fp16(folder: Path) -> Path:
    """GPT-2 whose checkpoint is stored in float16."""
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(6)
    tok = _byte_bpe()
    end = tok.token_to_id("<|endoftext|>")
    cfg = GPT2Config(vocab_size=tok.get_vocab_size(), n_embd=32, n_layer=2, n_head=4, n_positions=64,
                     bos_token_id=end, eos_token_id=end)
    return _save(folder, GPT2Model(cfg).half(), tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>")


def build_llama_rope_scaled(folder: Path) -> Path:
    """A LLaMA with linear RoPE scaling, which the native engine leaves to transformers."""
    import json

    build_llama(folder)
    config = json.loads((folder / "config.json").read_text())
    config["rope_parameters"] = {"rope_type": "linear", "factor": 2.0, "rope_theta": 500.0}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def build_sentencepiece_style(folder: Path) -> Path:
    """LLaMA with an older SentencePiece-style tokenizer.json: no pre-tokenizer, spaces become ▁."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import LlamaConfig, LlamaModel

    torch.manual_seed(7)
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True))
    # Trained with a ▁-splitting pre-tokenizer (as SentencePiece keeps pieces inside words), which
    # is then removed: the file has only the normalizer, like LLaMA-2's converted tokenizer.json.
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=150, special_tokens=["<unk>", "<s>", "</s>"]))
    tok.pre_tokenizer = None
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.Strip(" ", 1, 0)])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    cfg = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    return _save(folder, LlamaModel(cfg), tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def causal_lm(source: str | Path, folder: Path, *, positions: int | None = None, seed: int = 0) -> str:
    """A copy of a tiny_hf model folder as a language model (its ``…ForCausalLM``, weights drawn again from
    ``seed``), with ``positions`` positions where given."""
    import shutil

    from transformers import AutoConfig, AutoModelForCausalLM

    shutil.copytree(source, folder)
    config = AutoConfig.from_pretrained(folder)
    if positions is not None:
        config.max_position_embeddings = positions
    torch.manual_seed(seed)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    return str(folder)


TRANSFORMERS_ONLY = {
    # Families only transformers runs: soft-capping and alternating sliding windows (Gemma 2), q/k norms (Qwen3,
    # OLMo 2), a fused qkv projection (Phi-3), learned sinks with local and global layers (gpt-oss).
    "gemma2": ("Gemma2Config", {"head_dim": 8, "sliding_window": 4, "attn_logit_softcapping": 5.0,
                                "final_logit_softcapping": 3.0}),
    "qwen3": ("Qwen3Config", {"head_dim": 8}),
    "phi3": ("Phi3Config", {"pad_token_id": 0}),
    "olmo2": ("Olmo2Config", {}),
    "gpt_oss": ("GptOssConfig", {"head_dim": 8, "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 4,
                                 "layer_types": ["sliding_attention", "full_attention"]}),
}


def build_transformers_only(root: Path, llama: str | Path, families: tuple[str, ...], *,
                            positions: int = 64) -> dict[str, str]:
    """Tiny language models of :data:`TRANSFORMERS_ONLY`'s ``families`` in ``root``, on the LLaMA folder's tokenizer
    (2 layers, 4 query heads over 2 key/value heads, seeded)."""
    import shutil

    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM

    common = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "max_position_embeddings": positions}
    folders = {}
    for family in families:
        config_name, options = TRANSFORMERS_ONLY[family]
        folder = root / family
        shutil.copytree(llama, folder)
        base = AutoConfig.from_pretrained(folder)
        config = getattr(transformers, config_name)(vocab_size=base.vocab_size, bos_token_id=base.bos_token_id,
                                                    eos_token_id=base.eos_token_id, **common, **options)
        torch.manual_seed(0)
        (folder / "config.json").unlink()
        AutoModelForCausalLM.from_config(config).save_pretrained(folder)
        folders[family] = str(folder)
    return folders


BUILDERS = {
    "bert": build_bert,
    "gpt2": build_gpt2,
    "gpt2_long": build_gpt2_long,
    "llama": build_llama,
    "mistral": lambda f: build_llama(f, "mistral"),
    "qwen2": lambda f: build_llama(f, "qwen2"),
    "t5": build_t5,
    "bart": build_bart,
    "gpt2_fp16": build_gpt2_fp16,
    "llama_rope_scaled": build_llama_rope_scaled,
    "sentencepiece": build_sentencepiece_style,
}
