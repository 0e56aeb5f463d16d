"""Whisper's attention over one clip as an :class:`~attnviz.result.AttentionResult`: the encoder's self-attention
over its positions (``attentions`` ``[encoder layers, heads, P, P]``, P = 1,500 for 30 s), the decoder's
self-attention over the tokens it reads (``decoder_attentions`` ``[decoder layers, heads, T, T]``) and its
cross-attention from each token over the encoder's positions (``cross_attentions`` ``[decoder layers, heads, T,
P]``), each transformers' eager attention (``output_attentions=True``), on the window the model hears: the clip,
then silence to 30 s.

The decoder reads the prompt, the transcript (given, or the model's greedy one) and end of text
(:mod:`.transcript`); row i of the decoder's attention is the step that reads token i and predicts token i + 1.
The encoder's positions are labelled by their start in seconds; those past the clip (the window's padding) are
marked special. ``metadata`` says what a reader of time needs: ``seconds_per_position`` (0.02), ``duration`` (the
clip's seconds), ``audio_positions`` (the positions that hold the clip), ``audio_frames`` (its mel frames),
``sample_rate``, ``language``, ``task``, ``prompt_length``, ``target_ids``, ``transcript`` and whether it was given
(``teacher_forced``) or the model ended its own (``ended``)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import NumericalError, ResourceError
from ..result import AttentionResult
from .hearing import Heard, hear
from .model import WhisperModel, whisper_model
from .transcript import MAX_NEW_TOKENS, Transcript, transcript


@dataclass
class Forward:
    """One teacher-forced pass over a clip: the transcript read, the encoder's output, and the weights asked for
    (``encoder`` ``[L_enc, H, P, P]`` or None, ``decoder`` ``[L_dec, H, T, T]``, ``cross`` ``[L_dec, H, T, P]``)
    with the decoder's ``logits`` ``[T, vocabulary]``; all float32 on the CPU."""

    heard: Heard
    read: Transcript
    encoder: Any
    decoder: Any
    cross: Any
    logits: Any


def encode(loaded: WhisperModel, heard: Heard, *, attentions: bool) -> tuple[Any, tuple[Any, ...] | None]:
    """The encoder's output ``[1, P, d_model]`` over ``heard``'s window, and each layer's weights where asked."""
    import torch

    with torch.no_grad():
        out = loaded.network.model.encoder(heard.features, output_attentions=attentions)
    return out.last_hidden_state, (tuple(out.attentions) if attentions else None)


def forward(audio: str | os.PathLike[str] | np.ndarray, loaded: WhisperModel, *, text: str | None,
            language: str | None, task: str, max_new_tokens: int = MAX_NEW_TOKENS, encoder: bool = True) -> Forward:
    """The clip heard, its transcript read (:mod:`.transcript`) and one teacher-forced pass over prompt +
    transcript + end of text, its weights kept (the encoder's where ``encoder``)."""
    import torch

    heard = hear(audio, loaded)
    if encoder:
        check_attention_memory(loaded, loaded.positions, int(loaded.config.max_target_positions))
    encoded, encoder_weights = encode(loaded, heard, attentions=encoder)
    read = transcript(loaded, encoded, text=text, language=language, task=task, max_new_tokens=max_new_tokens)
    ids = torch.tensor([read.ids], device=encoded.device)
    with torch.no_grad():
        out = loaded.network(encoder_outputs=(encoded,), decoder_input_ids=ids, output_attentions=True,
                             use_cache=False)

    def stack(layers: Any) -> Any:
        weights = torch.stack([layer[0] for layer in layers]).float().cpu()
        if not torch.isfinite(weights).all():
            raise NumericalError(f"{loaded.name} computed attention that is not finite (NaN or infinite) on "
                                 f"{heard.name}; its weights overflow in this precision")
        return weights

    return Forward(heard, read, stack(encoder_weights) if encoder_weights is not None else None,
                   stack(out.decoder_attentions), stack(out.cross_attentions), out.logits[0].float().cpu())


def whisper_attention(audio: str | os.PathLike[str] | np.ndarray, model: str | WhisperModel, *,
                      text: str | None = None, language: str | None = None, task: str = "transcribe",
                      max_new_tokens: int = MAX_NEW_TOKENS, device: str = "cpu",
                      revision: str | None = None) -> AttentionResult:
    """Whisper's encoder, decoder and cross-attention over ``audio`` (a sound file, or mono samples at the model's
    rate), with ``text`` teacher-forced or the model's own greedy transcript (see the module). ``model``: a
    Whisper folder or hub id, or one :func:`~attnviz.audio.model.load_whisper` loaded."""
    loaded = whisper_model(model, device=device, revision=revision)
    run = forward(audio, loaded, text=text, language=language, task=task, max_new_tokens=max_new_tokens)
    return as_result(loaded, run)


def as_result(loaded: WhisperModel, run: Forward) -> AttentionResult:
    """``run`` as a result (see the module for its fields)."""
    heard, read = run.heard, run.read
    step = loaded.seconds_per_position
    positions = loaded.positions
    ids = read.ids
    prompt = set(read.prompt) | {read.eot}
    labels = [_label(loaded, i) for i in ids]
    return AttentionResult(
        tokens=[f"{k * step:.2f}s" for k in range(positions)], attentions=run.encoder,
        special=[k >= heard.positions for k in range(positions)], causal=False, model_name=loaded.name,
        decoder_attentions=run.decoder, cross_attentions=run.cross, target_tokens=labels,
        target_special=[k < len(read.prompt) or k == len(ids) - 1 or i in prompt for k, i in enumerate(ids)],
        metadata={"engine": "hf", "family": "whisper", "device": loaded.device, "target_ids": ids,
                  "seconds_per_position": step, "duration": heard.seconds, "audio_positions": heard.positions,
                  "audio_frames": heard.frames, "sample_rate": heard.rate, "language": read.language,
                  "task": read.task, "prompt_length": len(read.prompt), "teacher_forced": read.given,
                  "ended": read.ended, "transcript": loaded.tokenizer.decode(list(read.text_ids))})


def check_attention_memory(loaded: WhisperModel, positions: int, tokens: int) -> None:
    """Refuse, before the model runs, a pass whose weights would not fit: the encoder's ``[L, H, P, P]`` and the
    decoder's and cross ``[L, H, T, T + P]``, each held about three times (the model's, the stack, a reader's copy)."""
    from ..limits import MEMORY_ENV, human, memory_budget

    config = loaded.config
    needed = 3 * 4 * (int(config.encoder_layers) * int(config.encoder_attention_heads) * positions * positions
                      + int(config.decoder_layers) * int(config.decoder_attention_heads) * tokens * (tokens + positions))
    if needed > memory_budget():
        raise ResourceError(f"the attention of {loaded.name} over a {loaded.window_seconds:g}-s window needs about "
                            f"{human(needed)}, more than the {human(memory_budget())} this machine has; read the "
                            f"cross-attention alone (the timings), or set {MEMORY_ENV} to try anyway")


def _label(loaded: WhisperModel, token: int) -> str:
    """What a token of the decoder shows: a special token's name (``<|en|>``), else the text it decodes to, a space
    shown as ``␣`` where it is all the token is, else stripped."""
    from ..labels import printable

    piece = str(loaded.tokenizer.convert_ids_to_tokens(token))
    if piece.startswith("<|") and piece.endswith("|>"):
        return piece
    text = loaded.tokenizer.decode([token], skip_special_tokens=False)
    return printable(text) if not text.strip() else text.strip()
