"""Tiny random Whisper checkpoints for the sound tests, built offline: a byte-level BPE tokenizer made from a short
vocabulary (every special token of Whisper's in its order: end of text, start of transcript, the 100 languages, the
tasks, no-timestamps and the 1,501 timestamps), transformers' own feature extractor (its mel filters computed, not
downloaded), a ``WhisperForConditionalGeneration`` of a given shape with random weights, and a generation config
holding what transformers' ``generate`` reads (languages, tasks, suppressed tokens, alignment heads).

And short synthetic clips: a tone, or noise, written by soundfile."""

from __future__ import annotations

from pathlib import Path

import numpy as np

WORDS = ("hello", "world", "the", "cat", "sat", "on", "mat", "a", "dog", "ran", "far", "away", "and", "then",
         "is", "it", "good", "you", "said")
"""Words the tiny vocabulary has whole, with and without a space before them (``Ġhello``, ``hello``)."""


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte-to-character map (byte-level BPE's alphabet: printable bytes as themselves, others shifted)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars, n = keep[:], 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + n)
            n += 1
    return dict(zip(keep, (chr(c) for c in chars), strict=True))


def specials() -> list[str]:
    """Whisper's special tokens in the order its vocabulary holds them (openai-whisper's tokenizer.py)."""
    from transformers.models.whisper.tokenization_whisper import LANGUAGES

    return ["<|endoftext|>", "<|startoftranscript|>", *[f"<|{code}|>" for code in LANGUAGES], "<|translate|>",
            "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nocaptions|>", "<|notimestamps|>",
            *[f"<|{i * 0.02:.2f}|>" for i in range(1501)]]


def tiny_tokenizer():
    """A WhisperTokenizer over the 256 bytes, the merges that make each of :data:`WORDS` (alone and after a space)
    one token, and Whisper's special tokens after them."""
    from tokenizers import AddedToken
    from transformers import WhisperTokenizer

    alphabet = bytes_to_unicode()
    vocab = {ch: i for i, ch in enumerate(alphabet[b] for b in range(256))}
    merges: list[tuple[str, str]] = []
    for word in WORDS:
        for form in (alphabet[ord(" ")] + word, word):
            pieces = list(form)
            while len(pieces) > 1:
                pair = (pieces[0], pieces[1])
                if pair not in merges:
                    merges.append(pair)
                pieces = [pieces[0] + pieces[1], *pieces[2:]]
                vocab.setdefault(pieces[0], len(vocab))
    for token in specials():
        vocab[token] = len(vocab)
    tokenizer = WhisperTokenizer(vocab=vocab, merges=merges)
    tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in specials()], special_tokens=True)
    return tokenizer


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
