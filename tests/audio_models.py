"""Tiny random Whisper checkpoints for the sound tests, built offline: a byte-level BPE tokenizer made from a short
vocabulary (every special token of Whisper's in its order: end of text, start of transcript, the 100 languages, the
tasks, no-timestamps and the 1,501 timestamps), transformers' own feature extractor (its mel filters computed, not
downloaded), a ``WhisperForConditionalGeneration`` of a given shape with random weights, and a generation config
holding what transformers' ``generate`` reads (languages, tasks, suppressed tokens, alignment heads).

And short synthetic clips: a tone, or noise, written by soundfile."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from attnviz.audio.organism import byte_tokenizer

ROOT = Path(__file__).resolve().parent.parent
ORGANISM = str(ROOT / "sample_configs" / "organism_whisper.toml")
"""The sound organism (a tiny Whisper whose alignment head L1H0 reads each word at its declared time)."""
CLIP = str(ROOT / "examples" / "organism_whisper.flac")
"""Its clip: 2 s of six tone bursts, one a word."""
TEXT = "the cat sat on the mat"
"""What it says."""


def one_error_line(result, *words: str) -> None:
    """A command refused in one line on stderr, no traceback, a non-zero exit, ``words`` in it."""
    assert result.exit_code != 0, (result.exit_code, result.stderr)
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("attnviz: error: "), result.stderr
    assert "Traceback" not in result.stderr and all(w in result.stderr for w in words), result.stderr

WORDS = ("hello", "world", "the", "cat", "sat", "on", "mat", "a", "dog", "ran", "far", "away", "and", "then",
         "is", "it", "good", "you", "said")
"""Words the tiny vocabulary has whole, with and without a space before them (``Ġhello``, ``hello``)."""




def tiny_tokenizer():
    """A WhisperTokenizer in which each of :data:`WORDS`, alone and after a space, is one token, and Whisper's special
    tokens come after them (the sound organism's own tokenizer maker, attnviz.audio.organism.byte_tokenizer)."""
    return byte_tokenizer([form for word in WORDS for form in (" " + word, word)])


def tiny_whisper(folder: Path, *, mels: int = 80, layers: tuple[int, int] = (2, 2), heads: tuple[int, int] = (4, 4),
                 d_model: int = 64, seed: int = 0, alignment_heads: list[list[int]] | None = None,
                 init_std: float = 0.02, generation: dict | None = None) -> Path:
    """A random ``WhisperForConditionalGeneration`` with its processor, saved in ``folder`` (made), and the folder.
    ``generation``: more fields of its generation_config.json (a checkpoint's own decoding settings)."""
    import torch
    from transformers import GenerationConfig, WhisperConfig, WhisperFeatureExtractor, WhisperForConditionalGeneration

    tokenizer = tiny_tokenizer()
    ids = tokenizer.convert_tokens_to_ids
    eot, sot = ids("<|endoftext|>"), ids("<|startoftranscript|>")
    config = WhisperConfig(vocab_size=len(tokenizer), num_mel_bins=mels, encoder_layers=layers[0],
                           decoder_layers=layers[1], encoder_attention_heads=heads[0], decoder_attention_heads=heads[1],
                           d_model=d_model, encoder_ffn_dim=2 * d_model, decoder_ffn_dim=2 * d_model,
                           decoder_start_token_id=sot, pad_token_id=eot, bos_token_id=eot, eos_token_id=eot,
                           suppress_tokens=[], begin_suppress_tokens=[ids("Ġ"), eot], init_std=init_std)
    torch.manual_seed(seed)
    model = WhisperForConditionalGeneration(config).eval()
    from transformers.models.whisper.tokenization_whisper import LANGUAGES

    settings = dict(
        decoder_start_token_id=sot, eos_token_id=eot, pad_token_id=eot, bos_token_id=eot, max_length=448,
        is_multilingual=True, lang_to_id={f"<|{code}|>": ids(f"<|{code}|>") for code in LANGUAGES},
        task_to_id={"transcribe": ids("<|transcribe|>"), "translate": ids("<|translate|>")},
        no_timestamps_token_id=ids("<|notimestamps|>"), prev_sot_token_id=ids("<|startofprev|>"),
        # "!" and "?", and every timestamp: a random model's timestamps would cut transformers' window into segments
        suppress_tokens=[ids("!"), ids("?"), *range(ids("<|0.00|>"), len(tokenizer))],
        begin_suppress_tokens=[ids("Ġ"), eot],
        alignment_heads=alignment_heads if alignment_heads is not None
        else [[layers[1] - 1, h] for h in range(heads[1])], return_timestamps=False,
    )
    settings.update(generation or {})
    model.generation_config = GenerationConfig(**settings)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    WhisperFeatureExtractor(feature_size=mels).save_pretrained(folder)
    return folder


def clip(path: Path, seconds: float = 1.5, *, rate: int = 16_000, channels: int = 1, seed: int = 0,
         subtype: str | None = None, format: str | None = None) -> Path:
    """A clip of ``seconds`` written to ``path``: a chirp from 200 to 2,000 Hz under a little noise, the same in each
    channel up to a gain."""
    import soundfile

    t = np.arange(round(seconds * rate)) / rate
    wave = 0.3 * np.sin(2 * np.pi * (200 * t + 600 * t**2 / max(seconds, 1e-9)))
    wave += 0.02 * np.random.default_rng(seed).standard_normal(len(t))
    samples = np.stack([wave * (1 - 0.1 * c) for c in range(channels)], axis=1).astype(np.float32)
    soundfile.write(path, samples, rate, subtype=subtype, format=format)
    return path


# openai-whisper's parameter names → transformers' (openai-whisper's model.py and transformers' modeling_whisper.py,
# side by side: transformers 5.x no longer ships its conversion script)
_BLOCK_PARTS = (("cross_attn_ln.", "encoder_attn_layer_norm."), ("cross_attn.query.", "encoder_attn.q_proj."),
                ("cross_attn.key.", "encoder_attn.k_proj."), ("cross_attn.value.", "encoder_attn.v_proj."),
                ("cross_attn.out.", "encoder_attn.out_proj."), ("attn_ln.", "self_attn_layer_norm."),
                ("attn.query.", "self_attn.q_proj."), ("attn.key.", "self_attn.k_proj."),
                ("attn.value.", "self_attn.v_proj."), ("attn.out.", "self_attn.out_proj."), ("mlp_ln.", "final_layer_norm."),
                ("mlp.0.", "fc1."), ("mlp.2.", "fc2."))
_WHOLE = {"encoder.positional_embedding": "model.encoder.embed_positions.weight",
          "decoder.positional_embedding": "model.decoder.embed_positions.weight",
          "decoder.token_embedding.weight": "model.decoder.embed_tokens.weight"}
_PREFIXES = (("encoder.conv1.", "model.encoder.conv1."), ("encoder.conv2.", "model.encoder.conv2."),
             ("encoder.ln_post.", "model.encoder.layer_norm."), ("decoder.ln.", "model.decoder.layer_norm."))


def openai_name(name: str) -> str:
    """The transformers name of an openai-whisper parameter."""
    import re

    if name in _WHOLE:
        return _WHOLE[name]
    for old, new in _PREFIXES:
        if name.startswith(old):
            return new + name[len(old):]
    found = re.fullmatch(r"(encoder|decoder)\.blocks\.(\d+)\.(.+)", name)
    if found is None:
        raise KeyError(name)
    side, layer, rest = found.groups()
    for old, new in _BLOCK_PARTS:
        if rest.startswith(old):
            return f"model.{side}.layers.{layer}.{new}{rest[len(old):]}"
    raise KeyError(name)


def openai_tokenizer():
    """openai-whisper's multilingual tokenizer (its tiktoken file, shipped in the package) as a transformers
    WhisperTokenizer: the same 50,257 byte-level tokens (merges read from the ranks by transformers' own
    TikTokenConverter) and the same special tokens at the same ids."""
    import os

    import whisper
    from tokenizers import AddedToken
    from transformers import WhisperTokenizer
    from transformers.convert_slow_tokenizer import TikTokenConverter
    from whisper.tokenizer import get_encoding

    path = os.path.join(os.path.dirname(whisper.__file__), "assets", "multilingual.tiktoken")
    vocab, merges = TikTokenConverter(path).extract_vocab_merges_from_model(path)
    encoding = get_encoding("multilingual", num_languages=99)
    specials = sorted(encoding._special_tokens.items(), key=lambda item: item[1])
    assert [i for _, i in specials] == list(range(len(vocab), len(vocab) + len(specials)))
    for token, i in specials:
        vocab[token] = i
    tokenizer = WhisperTokenizer(vocab=vocab, merges=merges)
    tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t, _ in specials], special_tokens=True)
    return tokenizer


def openai_whisper_pair(folder: Path, *, seed: int = 0, std: float = 0.2, layers: tuple[int, int] = (2, 2),
                        heads: tuple[int, int] = (2, 4), d_model: int = 64):
    """A random openai-whisper ``Whisper`` (multilingual, 51,865 tokens, 80 mels) and the same weights as a
    transformers checkpoint with openai's tokenizer, saved in ``folder``: (the openai model, the folder)."""
    import torch
    from transformers import WhisperConfig, WhisperFeatureExtractor, WhisperForConditionalGeneration
    from whisper.model import ModelDimensions, Whisper

    dims = ModelDimensions(n_mels=80, n_audio_ctx=1500, n_audio_state=d_model, n_audio_head=heads[0],
                           n_audio_layer=layers[0], n_vocab=51865, n_text_ctx=448, n_text_state=d_model,
                           n_text_head=heads[1], n_text_layer=layers[1])
    torch.manual_seed(seed)
    theirs = Whisper(dims).eval()
    with torch.no_grad():
        for name, value in theirs.named_parameters():  # the decoder's positions are left empty by openai: all drawn
            if name.endswith("ln.weight") or name.endswith("ln_post.weight"):
                value.copy_(1 + 0.1 * torch.randn_like(value))
            elif name.endswith("bias"):
                value.copy_(0.1 * torch.randn_like(value))
            else:
                value.copy_(std * torch.randn_like(value))
    config = WhisperConfig(vocab_size=51865, num_mel_bins=80, encoder_layers=layers[0], decoder_layers=layers[1],
                           encoder_attention_heads=heads[0], decoder_attention_heads=heads[1], d_model=d_model,
                           encoder_ffn_dim=4 * d_model, decoder_ffn_dim=4 * d_model, decoder_start_token_id=50258,
                           pad_token_id=50257, bos_token_id=50257, eos_token_id=50257, suppress_tokens=[],
                           begin_suppress_tokens=[220, 50257])
    ours = WhisperForConditionalGeneration(config).eval()
    state = {openai_name(name): value for name, value in theirs.state_dict().items()}
    missing, unexpected = ours.load_state_dict(state, strict=False)
    assert set(missing) <= {"proj_out.weight"} and not unexpected, (missing, unexpected)  # proj_out: tied
    ours.generation_config.is_multilingual = True
    folder.mkdir(parents=True, exist_ok=True)
    ours.save_pretrained(folder)
    openai_tokenizer().save_pretrained(folder)
    WhisperFeatureExtractor(feature_size=80).save_pretrained(folder)
    return theirs, folder
