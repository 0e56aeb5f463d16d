"""A Whisper checkpoint loaded once for attnviz: transformers' ``WhisperForConditionalGeneration`` on its eager
attention (the weights every layer hands back with ``output_attentions=True``), its feature extractor (raw samples to
log-mel frames) and its tokenizer, from a local folder (offline) or a hub id (online, through the usual cache).

What the sound commands need of it, read once from the three (never from a checkpoint's decoding settings): the
special tokens (start of transcript, each language, the tasks, no-timestamps, end of text), whether the model is
multilingual, the sample rate and window it hears, and how many seconds one encoder position covers
(``hop_length × conv strides / sampling_rate``: 160 × 2 / 16,000 = 0.02 s for Whisper)."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from ..errors import AttnvizError, ModelNotFoundError, UsageError

MODEL_TYPES = ("whisper",)
"""The ``model_type`` of the checkpoints read here (distil-whisper's too: its config says ``whisper``)."""


@dataclass
class WhisperModel:
    """A loaded Whisper: the network (eval mode, float32), its feature extractor and tokenizer, and its name."""

    name: str
    network: Any
    features: Any
    tokenizer: Any
    device: str = "cpu"

    @property
    def config(self) -> Any:
        return self.network.config

    @property
    def sampling_rate(self) -> int:
        return int(self.features.sampling_rate)

    @property
    def window_samples(self) -> int:
        """Samples the encoder hears at once (30 s × 16 kHz for Whisper): ``n_samples`` of the feature extractor."""
        return int(self.features.n_samples)

    @property
    def window_seconds(self) -> float:
        return self.window_samples / self.sampling_rate

    @property
    def hop_length(self) -> int:
        return int(self.features.hop_length)

    @property
    def stride(self) -> int:
        """Mel frames per encoder position: the product of the encoder's convolution strides (2 for Whisper)."""
        encoder = self.network.model.encoder
        return int(encoder.conv1.stride[0]) * int(encoder.conv2.stride[0])

    @property
    def seconds_per_position(self) -> float:
        """Seconds of sound one encoder position covers (0.02 for Whisper)."""
        return self.hop_length * self.stride / self.sampling_rate

    @property
    def positions(self) -> int:
        """Encoder positions of the window (1,500 for Whisper)."""
        return int(self.config.max_source_positions)

    def token(self, text: str) -> int | None:
        """The id of the special token ``text`` (``<|en|>``), or None where the vocabulary lacks it."""
        found = self.tokenizer.convert_tokens_to_ids(text)
        unknown = self.tokenizer.unk_token_id
        return None if found is None or (found == unknown and text != self.tokenizer.unk_token) else int(found)

    def special(self, text: str) -> int:
        """The id of a special token the model must have; its absence is one line naming the checkpoint."""
        found = self.token(text)
        if found is None:
            raise ModelNotFoundError(f"{self.name}: its tokenizer has no {text} token, which Whisper's prompt needs; "
                                     "give a Whisper checkpoint with its tokenizer")
        return found

    @cached_property
    def languages(self) -> dict[str, int]:
        """Each language code the vocabulary has a token for (``en`` → id of ``<|en|>``), in openai-whisper's order."""
        from transformers.models.whisper.tokenization_whisper import LANGUAGES

        found = {code: self.token(f"<|{code}|>") for code in LANGUAGES}
        return {code: i for code, i in found.items() if i is not None}

    @property
    def multilingual(self) -> bool:
        """Whether the prompt names a language and a task: the generation config's ``is_multilingual`` where it says,
        else openai-whisper's rule (a vocabulary of 51,865 tokens or more)."""
        said = getattr(self.network.generation_config, "is_multilingual", None)
        return bool(said) if said is not None else int(self.config.vocab_size) >= 51865

    @property
    def eot(self) -> int:
        return self.special("<|endoftext|>")


def load_whisper(model: str, *, device: str = "cpu", revision: str | None = None) -> WhisperModel:
    """The Whisper checkpoint ``model`` (a folder, a hub id, or a sound organism's TOML, built once:
    :mod:`.organism`) loaded on ``device``; anything else (another kind of model, a config, a saved result) refused
    in one line."""
    import torch
    import transformers

    from ..sources.files import folder_stamp, read_config
    from ..sources.hub import fetch_config, hub_errors, hub_reachable
    from ..sources.resolve import check_device, locate

    check_device(device)
    organism = None
    if model.lower().endswith(".toml"):
        from .organism import sound_organism_folder
        from .organism_spec import is_sound_organism

        if is_sound_organism(model):
            folder, spec = sound_organism_folder(model)
            model, organism = str(folder), spec.name
    if model.lower().endswith((".toml", ".npz")):
        raise UsageError(f"{model} is not a Whisper checkpoint; sound is heard by a folder or hub id of "
                         "WhisperForConditionalGeneration (e.g. openai/whisper-tiny), or a sound organism's TOML "
                         "(sample_configs/organism_whisper.toml)")
    place = locate(model)
    offline = "a Whisper checkpoint folder saved with its processor (save_pretrained)"
    folder = place.folder if place.folder is not None else fetch_config(str(place.hub_id), revision, offline)
    kind = read_config(folder).get("model_type")
    if kind not in MODEL_TYPES:
        raise UsageError(f"{place.name} is a {kind or 'model of unknown type'} model; attnviz hears sound with "
                         "Whisper checkpoints (WhisperForConditionalGeneration), e.g. openai/whisper-tiny")
    key = (str(Path(folder).resolve()), folder_stamp(Path(folder)) or (), device, revision, organism)
    if key in _LOADED:  # loaded before in this process, its files unchanged since
        _LOADED.move_to_end(key)
        return _LOADED[key]
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    options: dict[str, Any] = {"revision": revision,
                               "local_files_only": place.hub_id is not None and not hub_reachable()}
    try:
        with hub_errors(place.ref, revision, offline):
            whisper: Any = transformers.WhisperForConditionalGeneration
            network = whisper.from_pretrained(
                place.ref, attn_implementation="eager", dtype=torch.float32, **options)
            features = transformers.WhisperFeatureExtractor.from_pretrained(place.ref, **options)
            tokenizer = transformers.WhisperTokenizer.from_pretrained(place.ref, **options)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise ModelNotFoundError(f"{place.name}: cannot load its Whisper model and processor ({first})") from None
    loaded = WhisperModel(organism or place.name, network.to(device).eval(), features, tokenizer, device)
    _LOADED[key] = loaded
    while len(_LOADED) > KEPT_MODELS:
        _LOADED.popitem(last=False)
    return loaded


KEPT_MODELS = 2
"""Whispers a process keeps loaded, the least recently used let go first: a script, a server or a test suite that
asks for the same model again gets it at once (a model is read-only once loaded; its files' sizes and times are part
of the key, so a checkpoint written again is loaded again)."""
_LOADED: OrderedDict[tuple[Any, ...], WhisperModel] = OrderedDict()


def whisper_model(model: str | WhisperModel, *, device: str = "cpu", revision: str | None = None) -> WhisperModel:
    """``model`` itself where it is loaded already, else :func:`load_whisper` of it."""
    if isinstance(model, WhisperModel):
        return model
    return load_whisper(model, device=device, revision=revision)


def model_type(model: str) -> str | None:
    """The ``model_type`` of the folder or hub id ``model`` (a hub id's config read from the cache or the hub);
    None where it cannot be read."""
    try:
        from ..sources.files import read_config
        from ..sources.hub import fetch_config
        from ..sources.resolve import locate

        place = locate(model)
        folder = place.folder if place.folder is not None else fetch_config(str(place.hub_id), None, "")
        found = read_config(folder).get("model_type")
    except (AttnvizError, OSError, ValueError):  # not found, not readable: the other paths say why
        return None
    return str(found) if found is not None else None


def hears_sound(model: str) -> bool:
    """Whether ``model`` names a Whisper: a sound organism's TOML, or a folder or hub id whose config says
    ``whisper``."""
    if model.lower().endswith(".toml"):
        from .organism_spec import is_sound_organism

        return is_sound_organism(model)
    if model.lower().endswith(".npz"):
        return False
    return model_type(model) in MODEL_TYPES
