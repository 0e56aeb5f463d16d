"""Speech encoder-decoders other than Whisper (issue 61 item 6: Speech2Text, Moonshine, SpeechT5, a
``SpeechEncoderDecoderModel`` and the other models of transformers' speech-to-text mapping): their cross-attention
over a clip's time, read by the same path as Whisper's (:mod:`attnviz.views.sound_heat` draws it, ``heatmap
--audio``, ``tui --audio``).

The family is transformers' own: a config whose ``model_type`` is in ``MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES``,
Whisper excepted (:mod:`.whisper` reads it with its prompt and window). The model is loaded with
``AutoModelForSpeechSeq2Seq`` on eager attention, with its feature extractor and tokenizer; the clip is read at the
extractor's rate (bounded as every clip) and handed to it whole: these models hear a clip of any length, not a fixed
window, so the encoder's positions cover the clip and each is ``duration / positions`` seconds. The decoder reads its
start token, then the text given (tokenized without special tokens: teacher-forced) or the model's own greedy
transcript (``generate`` with ``do_sample=False, num_beams=1``), then its end token; one pass with
``output_attentions=True`` gives transformers' own weights: the encoder's, the decoder's and the cross-attention.
Row i of the decoder's attention is the step that reads token i and predicts token i + 1, as Whisper's."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import InputError, ModelNotFoundError, NumericalError, ResourceError

MAX_SECONDS = 600.0
"""The longest clip a speech encoder-decoder reads whole (its encoder's attention grows with its square)."""
MAX_NEW_TOKENS = 224


def speech_seq2seq_types() -> set[str]:
    """The ``model_type`` of every speech encoder-decoder transformers knows, Whisper excepted."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES

    return set(MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES) - {"whisper"}


def is_speech_seq2seq(model: str) -> bool:
    """Whether ``model`` (a folder or hub id) is a speech encoder-decoder other than Whisper; unreadable: not one."""
    if model.lower().endswith((".toml", ".npz")):
        return False
    from .model import model_type

    return model_type(model) in speech_seq2seq_types()


def speech_seq2seq_attention(audio: str | os.PathLike[str], model: str, *, text: str | None = None,
                             max_new_tokens: int = MAX_NEW_TOKENS, device: str = "cpu",
                             revision: str | None = None) -> Any:
    """The encoder's, decoder's and cross-attention of the speech encoder-decoder ``model`` over the clip ``audio``,
    ``text`` teacher-forced or the model's own greedy transcript (see the module)."""
    import torch

    from ..limits import MEMORY_ENV, human, memory_budget
    from ..result import AttentionResult
    from .read import read_audio

    network, features, tokenizer, name = _load(model, device, revision)
    samples = read_audio(audio, rate=int(features.sampling_rate), max_seconds=MAX_SECONDS)
    inputs = features(samples, sampling_rate=int(features.sampling_rate), return_tensors="pt")
    inputs = {k: v.to(device) for k, v in inputs.items() if k in ("input_features", "input_values", "attention_mask")}
    config = network.config
    start = _token(network, "decoder_start_token_id", name)
    end = _token(network, "eos_token_id", name)
    # Before the encoder runs (its eager attention is positions² a head): its positions at most, one a feature frame
    # (a filter bank's 10 ms frames; raw samples, one a 20-ms hop at least, wav2vec2's 320 samples)
    given = inputs.get("input_features")
    bound = max(given.shape[1:]) if given is not None else max(1, len(samples) // 320)
    layers = sum(int(getattr(config, key, 0) or 0) for key in ("encoder_layers", "encoder_num_hidden_layers"))
    heads = max((int(getattr(config, key, 0) or 0) for key in ("encoder_attention_heads",
                                                                "encoder_num_attention_heads")), default=0)
    needed = 3 * 4 * max(1, layers) * max(1, heads) * bound * bound
    if needed > memory_budget():
        raise ResourceError(f"{name}'s attention over {Path(audio).name} (up to {bound:,} encoder positions) needs "
                            f"about {human(needed)}, more than the {human(memory_budget())} this machine has; give a "
                            f"shorter clip, or set {MEMORY_ENV} to try anyway")
    with torch.no_grad():
        if text is not None:
            if not text.strip():
                raise InputError("the text is empty; give the words spoken in the clip, or none for the model's own")
            ids = [start, *tokenizer(text, add_special_tokens=False)["input_ids"], end]
        else:
            found = network.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False, num_beams=1)
            ids = [int(i) for i in found[0].tolist()]
            ids = ids if ids[:1] == [start] else [start, *ids]
            ids = ids if ids[-1] == end else [*ids, end]
        limit = getattr(config, "max_target_positions", None) or getattr(config, "max_position_embeddings", None)
        if limit and len(ids) > int(limit):
            raise InputError(f"the text is {len(ids):,} tokens long but {name}'s decoder reads at most {limit}; give "
                             "a shorter text")
        out = network(**inputs, decoder_input_ids=torch.tensor([ids], device=device), output_attentions=True)
    cross = torch.stack([a[0] for a in out.cross_attentions]).float().cpu()
    decoder = torch.stack([a[0] for a in out.decoder_attentions]).float().cpu()
    positions = int(cross.shape[-1])
    encoder = (torch.stack([a[0] for a in out.encoder_attentions]).float().cpu() if out.encoder_attentions
               else torch.zeros((0, int(cross.shape[1]), positions, positions)))
    if not all(torch.isfinite(t).all() for t in (cross, decoder, encoder)):
        raise NumericalError(f"{name} computed attention that is not finite (NaN or infinite) on {Path(audio).name}")
    duration = len(samples) / int(features.sampling_rate)
    step = duration / positions
    labels = [_label(tokenizer, i) for i in ids]
    return AttentionResult(
        tokens=[f"{k * step:.2f}s" for k in range(positions)], attentions=encoder, special=[False] * positions,
        causal=False, model_name=name, decoder_attentions=decoder, cross_attentions=cross, target_tokens=labels,
        target_special=[i in (start, end) for i in ids],
        metadata={"engine": "hf", "family": str(config.model_type), "device": device, "target_ids": ids,
                  "seconds_per_position": step, "duration": duration, "audio_positions": positions,
                  "sample_rate": int(features.sampling_rate), "prompt_length": 1, "teacher_forced": text is not None,
                  "transcript": tokenizer.decode(ids[1:-1], skip_special_tokens=True)})


def _load(model: str, device: str, revision: str | None) -> tuple[Any, Any, Any, str]:
    import torch
    import transformers

    from ..sources.hub import hub_errors, hub_reachable
    from ..sources.resolve import check_device, locate

    check_device(device)
    place = locate(model)
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    options: dict[str, Any] = {"revision": revision,
                               "local_files_only": place.hub_id is not None and not hub_reachable()}
    offline = "a speech encoder-decoder's folder saved with its processor (save_pretrained)"
    try:
        with hub_errors(place.ref, revision, offline):
            auto: Any = transformers.AutoModelForSpeechSeq2Seq
            network = auto.from_pretrained(place.ref, attn_implementation="eager", dtype=torch.float32, **options)
            features = transformers.AutoFeatureExtractor.from_pretrained(place.ref, **options)
            tokenizer = transformers.AutoTokenizer.from_pretrained(place.ref, **options)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise ModelNotFoundError(f"{place.name}: cannot load its speech encoder-decoder, feature extractor and "
                                 f"tokenizer ({first})") from None
    return network.to(device).eval(), features, tokenizer, place.name


def _token(network: Any, name: str, model: str) -> int:
    """A special token id the decoder needs, from the generation config, else the model's config."""
    found = getattr(network.generation_config, name, None)
    if found is None:
        found = getattr(network.config, name, None)
    if isinstance(found, list):
        found = found[0] if found else None
    if found is None:
        raise ModelNotFoundError(f"{model}: its config names no {name}; the decoder cannot be started")
    return int(found)


def _label(tokenizer: Any, token: int) -> str:
    """What a decoder token shows: its text, a space alone as ``␣``, else stripped."""
    from ..labels import printable

    text = tokenizer.decode([token], skip_special_tokens=False)
    return printable(text) if not text.strip() else text.strip()
