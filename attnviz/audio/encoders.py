"""Speech encoders (wav2vec2, HuBERT, WavLM and the other models transformers reads raw sound with for CTC or audio
classification; issue 61 item 6): their self-attention over the clip's frames, as an
:class:`~attnviz.result.AttentionResult` whose tokens are the frames' start times, so every command that reads a
result draws it (``attnviz heatmap --audio clip.wav --model facebook/hubert-base-ls960``, ``heads``, ``view``, or
``--out x.npz`` and any command on the file).

The family is transformers' own: a config whose ``model_type`` is in transformers' CTC or audio-classification model
mappings (``MODEL_FOR_CTC_MAPPING_NAMES``, ``MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES``), Whisper excepted (its
decoder is read by :mod:`.whisper`). The model is loaded with ``AutoModel`` on eager attention, the clip read at its
feature extractor's rate (:func:`attnviz.audio.read.read_audio`, bounded as every clip), the extractor's features
handed to it whole, and ``output_attentions=True``'s weights kept: transformers' own numbers. A frame's time is its
index × the feature encoder's hop (the product of ``conv_stride``: 320 samples, 20 ms at 16 kHz, for wav2vec2);
the attention of every layer is ``frames²`` a head, refused before the model runs when it would not fit."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ModelNotFoundError, NumericalError, ResourceError, UsageError

MAX_SECONDS = 600.0
"""The longest clip a speech encoder reads whole (its attention grows with the square of its frames)."""


def speech_encoder_types() -> set[str]:
    """The ``model_type`` of every speech encoder transformers knows (see the module)."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES,
        MODEL_FOR_CTC_MAPPING_NAMES,
    )

    return (set(MODEL_FOR_CTC_MAPPING_NAMES) | set(MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES)) - {"whisper"}


def is_speech_encoder(model: str) -> bool:
    """Whether ``model`` (a folder or hub id) is a speech encoder (see the module); unreadable: not one."""
    if model.lower().endswith((".toml", ".npz")):
        return False
    from .model import model_type

    return model_type(model) in speech_encoder_types()


@dataclass
class SpeechEncoder:
    """A loaded speech encoder: the network (eager attention, float32, eval), its feature extractor, its name."""

    name: str
    network: Any
    features: Any
    device: str = "cpu"

    @property
    def sampling_rate(self) -> int:
        return int(self.features.sampling_rate)

    @property
    def hop(self) -> int:
        """Samples per frame: the product of the feature encoder's convolution strides (320 for wav2vec2)."""
        strides = getattr(self.network.config, "conv_stride", None)
        if strides:
            return int(math.prod(int(s) for s in strides))
        raise ModelNotFoundError(f"{self.name}: its config has no conv_stride, so its frames' times are unknown; "
                                 "attnviz reads speech encoders that take raw samples (wav2vec2, HuBERT, WavLM)")


def load_speech_encoder(model: str, *, device: str = "cpu", revision: str | None = None) -> SpeechEncoder:
    """The speech encoder ``model`` (a folder or hub id) with its feature extractor, on eager attention."""
    import torch
    import transformers

    from ..sources.hub import hub_errors, hub_reachable
    from ..sources.resolve import check_device, locate

    check_device(device)
    place = locate(model)
    offline = "a speech encoder's folder saved with its feature extractor (save_pretrained)"
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    options: dict[str, Any] = {"revision": revision,
                               "local_files_only": place.hub_id is not None and not hub_reachable()}
    try:
        with hub_errors(place.ref, revision, offline):
            auto: Any = transformers.AutoModel
            network = auto.from_pretrained(place.ref, attn_implementation="eager", dtype=torch.float32, **options)
            features = transformers.AutoFeatureExtractor.from_pretrained(place.ref, **options)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise ModelNotFoundError(f"{place.name}: cannot load its speech encoder and feature extractor ({first})") from None
    return SpeechEncoder(place.name, network.to(device).eval(), features, device)


def speech_encoder_attention(audio: str | os.PathLike[str], model: str | SpeechEncoder, *, device: str = "cpu",
                             revision: str | None = None) -> Any:
    """The self-attention of the speech encoder ``model`` over the clip ``audio`` (see the module)."""
    import torch

    from ..limits import MEMORY_ENV, human, memory_budget
    from ..result import AttentionResult
    from .read import read_audio

    loaded = model if isinstance(model, SpeechEncoder) else load_speech_encoder(model, device=device,
                                                                                  revision=revision)
    samples = read_audio(audio, rate=loaded.sampling_rate, max_seconds=MAX_SECONDS)
    config = loaded.network.config
    frames = max(1, len(samples) // loaded.hop)
    layers, heads = int(config.num_hidden_layers), int(config.num_attention_heads)
    needed = 3 * 4 * layers * heads * frames * frames
    if needed > memory_budget():
        raise ResourceError(f"{loaded.name}'s attention over {Path(audio).name}'s {frames:,} frames needs about "
                            f"{human(needed)}, more than the {human(memory_budget())} this machine has; give a "
                            f"shorter clip, or set {MEMORY_ENV} to try anyway")
    inputs = loaded.features(samples, sampling_rate=loaded.sampling_rate, return_tensors="pt")
    inputs = {k: v.to(loaded.device) for k, v in inputs.items() if k in ("input_values", "input_features")}
    with torch.no_grad():
        out = loaded.network(**inputs, output_attentions=True)
    if not out.attentions:
        raise UsageError(f"{loaded.name} returns no attention weights; it is not a transformer over frames")
    weights = torch.stack([a[0] for a in out.attentions]).float().cpu()
    if not torch.isfinite(weights).all():
        raise NumericalError(f"{loaded.name} computed attention that is not finite (NaN or infinite) on "
                             f"{Path(audio).name}")
    count = int(weights.shape[-1])
    step = loaded.hop / loaded.sampling_rate
    return AttentionResult(
        tokens=[f"{k * step:.2f}s" for k in range(count)], attentions=weights, special=[False] * count, causal=False,
        model_name=loaded.name,
        metadata={"engine": "hf", "family": str(config.model_type), "device": loaded.device,
                  "seconds_per_position": step, "duration": len(samples) / loaded.sampling_rate,
                  "sample_rate": loaded.sampling_rate, "audio": Path(audio).name})


def hearing_kind(model: str | None) -> str:
    """``whisper``, ``seq2seq`` (another speech encoder-decoder: :mod:`.seq2seq`) or ``encoder``: how ``model``
    hears a clip; anything else refused in one line (the one refusal)."""
    from .model import hears_sound
    from .seq2seq import is_speech_seq2seq

    if model is not None and hears_sound(model):
        return "whisper"
    if model is not None and is_speech_seq2seq(model):
        return "seq2seq"
    if model is not None and is_speech_encoder(model):
        return "encoder"
    raise UsageError(f"[[audio]] is heard by a speech model: {model or 'no model'} is not a Whisper nor a speech "
                     "encoder (wav2vec2, HuBERT, WavLM) nor a speech encoder-decoder (Speech2Text, Moonshine); give "
                     "one as [[model]]")
