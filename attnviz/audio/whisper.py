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
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import NumericalError, ResourceError
from ..result import AttentionResult
from .hearing import Heard, hear
from .model import WhisperModel, whisper_model
from .transcript import MAX_NEW_TOKENS, Transcript, transcript


@dataclass
class Forward:
    """One teacher-forced pass over a clip: the transcript read, the weights asked for (``encoder`` ``[L_enc, H, P,
    P]``, ``decoder`` ``[L_dec, H, T, T]``, ``cross`` ``[L_dec, H, T, P]``, each None where not asked), the
    cross-attention's scores before the softmax of the layers asked (``scores``: layer → ``[H, T, P]``) and the
    decoder's ``logits`` ``[T, vocabulary]``; all float32 on the CPU."""

    heard: Heard
    read: Transcript
    encoder: Any
    decoder: Any
    cross: Any
    logits: Any
    scores: dict[int, Any] = field(default_factory=dict)


def encode(loaded: WhisperModel, heard: Heard, *, attentions: bool) -> tuple[Any, tuple[Any, ...] | None]:
    """The encoder's output ``[1, P, d_model]`` over ``heard``'s window, and each layer's weights where asked. The
    output of the last clips heard without weights is kept on ``loaded`` (:data:`KEPT_ENCODINGS`, keyed by the
    features' bytes): a second pass over one clip (a served page's next transcript, a typed text in the terminal
    app, align after heatmap in one script) does not run the encoder again."""
    import hashlib

    import torch

    kept = loaded.__dict__.setdefault("_encoded", {})
    key = hashlib.sha1(heard.features.detach().cpu().numpy().tobytes()).hexdigest()
    if not attentions and key in kept:
        return kept[key], None
    with torch.no_grad():
        out = loaded.network.model.encoder(heard.features, output_attentions=attentions)
    if len(kept) >= KEPT_ENCODINGS:
        kept.pop(next(iter(kept)))
    kept[key] = out.last_hidden_state
    return out.last_hidden_state, (tuple(out.attentions) if attentions else None)


KEPT_ENCODINGS = 4
"""Encoder outputs a loaded Whisper keeps (a 30-s window of whisper-large: 1,500 × 1,280 numbers, 7.7 MB)."""


def forward(audio: str | os.PathLike[str] | np.ndarray, loaded: WhisperModel, *, text: str | None,
            language: str | None, task: str, max_new_tokens: int = MAX_NEW_TOKENS, encoder: bool = True,
            weights: bool = True, scores: Sequence[int] = (), text_only: bool = False) -> Forward:
    """The clip heard, its transcript read (:mod:`.transcript`) and one teacher-forced pass over prompt +
    transcript + end of text: the encoder's weights where ``encoder``, the decoder's and cross weights where
    ``weights``, and the cross-attention's scores of the decoder layers ``scores`` (see :func:`cross_scores`).
    ``text_only``: a greedy transcript's special tokens dropped, as timings read it (:func:`.transcript.transcript`)."""
    import torch

    heard = hear(audio, loaded)
    if encoder:
        check_attention_memory(loaded, loaded.positions, int(loaded.config.max_target_positions))
    encoded, encoder_weights = encode(loaded, heard, attentions=encoder)
    read = transcript(loaded, encoded, text=text, language=language, task=task, max_new_tokens=max_new_tokens,
                      text_only=text_only)
    ids = torch.tensor([read.ids], device=encoded.device)
    with torch.no_grad(), cross_scores(loaded, scores) as captured:
        out = loaded.network(encoder_outputs=(encoded,), decoder_input_ids=ids, output_attentions=weights,
                             use_cache=False)

    def stack(layers: Any) -> Any:
        found = torch.stack([layer[0] for layer in layers]).float().cpu()
        if not torch.isfinite(found).all():
            raise NumericalError(f"{loaded.name} computed attention that is not finite (NaN or infinite) on "
                                 f"{heard.name}; its weights overflow in this precision")
        return found

    return Forward(heard, read, stack(encoder_weights) if encoder_weights is not None else None,
                   stack(out.decoder_attentions) if weights else None, stack(out.cross_attentions) if weights else None,
                   out.logits[0].float().cpu(), {layer: found[0].float().cpu() for layer, found in captured.items()})


@contextmanager
def cross_scores(loaded: WhisperModel, layers: Sequence[int]) -> Iterator[dict[int, Any]]:
    """While the decoder runs, each of ``layers``' cross-attention scores before the softmax, ``[1, H, T, P]``:
    ``(q_proj(h) · scaling) @ k_proj(encoder)ᵀ``, the operations transformers' eager attention makes, in its order
    (``WhisperAttention.forward``, then ``eager_attention_forward`` with a scaling of 1), so its softmax is the
    layer's weights bit for bit. Read from the hidden state entering the layer's cross-attention (a forward
    pre-hook), the layer itself untouched."""
    found: dict[int, Any] = {}
    hooks = []

    def keep(layer: int) -> Any:
        def hook(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            hidden: Any = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
            memory: Any = kwargs["key_value_states"] if "key_value_states" in kwargs else args[1]
            heads, size = module.num_heads, module.head_dim
            query = (module.q_proj(hidden) * module.scaling).view(*hidden.shape[:-1], heads, size).transpose(1, 2)
            key = module.k_proj(memory).view(memory.shape[0], -1, heads, size).transpose(1, 2)
            found[layer] = query.contiguous() @ key.contiguous().transpose(2, 3)

        return hook

    blocks = loaded.network.model.decoder.layers
    try:
        for layer in sorted(set(layers)):
            hooks.append(blocks[layer].encoder_attn.register_forward_pre_hook(keep(layer), with_kwargs=True))
        yield found
    finally:
        for hook in hooks:
            hook.remove()


def whisper_attention(audio: str | os.PathLike[str] | np.ndarray, model: str | WhisperModel, *,
                      text: str | None = None, language: str | None = None, task: str = "transcribe",
                      max_new_tokens: int = MAX_NEW_TOKENS, device: str = "cpu",
                      revision: str | None = None) -> AttentionResult:
    """Whisper's encoder, decoder and cross-attention over ``audio`` (a sound file, or mono samples at the model's
    rate), with ``text`` teacher-forced or the model's own greedy transcript (see the module). ``model``: a
    Whisper folder or hub id, or one :func:`~attnviz.audio.model.load_whisper` loaded."""
    loaded = whisper_model(model, device=device, revision=revision)
    run = forward(audio, loaded, text=text, language=language, task=task, max_new_tokens=max_new_tokens,
                  text_only=False)  # every token the model wrote, as transformers' generate returns them
    return as_result(loaded, run)


def as_result(loaded: WhisperModel, run: Forward) -> AttentionResult:
    """``run`` as a result (see the module for its fields); without the encoder's weights (``forward(...,
    encoder=False)``), a result of the cross-attention and the decoder's (``attentions`` ``[0, H, P, P]``: its
    :attr:`~attnviz.result.AttentionResult.cross_only`)."""
    heard, read = run.heard, run.read
    step = loaded.seconds_per_position
    positions = loaded.positions
    ids = read.ids
    labels = [_label(loaded, i) for i in ids]
    encoder = run.encoder
    if encoder is None:  # the encoder's weights not asked: a result of the decoder's side (cross_only)
        import torch

        heads = int(loaded.config.encoder_attention_heads)
        encoder = torch.zeros((0, heads, positions, positions))
    return AttentionResult(
        tokens=[f"{k * step:.2f}s" for k in range(positions)], attentions=encoder,
        special=[k >= heard.positions for k in range(positions)], causal=False, model_name=loaded.name,
        decoder_attentions=run.decoder, cross_attentions=run.cross, target_tokens=labels,
        target_special=[i >= read.eot for i in ids],  # openai-whisper's rule: every special token from end of text on
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


def clip_only(result: Any) -> Any:
    """``result`` (:func:`~attnviz.audio.whisper.whisper_attention`'s) without the window's positions after the clip:
    the encoder's weights among the clip's positions, the cross-attention's on them; the model's numbers, not
    renormalised (``metadata["cropped_to_clip"]`` says so)."""
    from dataclasses import replace

    kept = int(result.metadata["audio_positions"])
    cross = None if result.cross_attentions is None else result.cross_attentions[..., :kept]
    return replace(result, tokens=result.tokens[:kept], attentions=result.attentions[:, :, :kept, :kept],
                   token_ids=result.token_ids[:kept], special=result.special[:kept],
                   attention_mask=result.attention_mask[:kept], word_ids=result.word_ids[:kept],
                   segment_ids=result.segment_ids[:kept], cross_attentions=cross,
                   metadata={**result.metadata, "cropped_to_clip": True})
