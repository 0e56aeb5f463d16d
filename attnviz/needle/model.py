"""A needle run's model: its stepper from the one loader (:func:`attnviz.sources.causal.load_causal`), and its
codec (the tokenizer, its chat template and end tokens), the config read once and the tokenizer loaded once;
:func:`load_codec` reads the tokenizer and the config alone (a driver that hands the model to Ray actors never
loads it itself)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError, UsageError
from ..sources.stepping import Codec, Stepper, codec_from_tokenizer


@dataclass(frozen=True)
class ModelFacts:
    """What a grid is planned with before a model loads: its name, positions, layers and heads."""

    name: str
    max_positions: int | None
    n_layers: int
    n_heads: int


@dataclass
class _Found:
    """Where the model is, its folder and its config (read once), and how its tokenizer loads."""

    place: Any
    folder: Path
    config: dict[str, Any]
    revision: str | None
    trust_remote_code: bool


def _find(model: str | None, *, engine: str, revision: str | None, device: str, trust_remote_code: bool,
          dtype: str | None) -> _Found:
    from ..sources.causal import causal_place
    from ..sources.resolve import check_dtype, check_run_options, is_config_model

    check_run_options(engine, device)
    check_dtype(dtype)
    if is_config_model(model):
        raise UsageError(f"{model} is a config model; a needle run needs a causal language model with a tokenizer: "
                         "a model organism (sample_configs/organism_needle.toml), a folder or a hub id such as gpt2")
    place, folder, config = causal_place(model, engine=engine, revision=revision, dtype=dtype)
    return _Found(place, Path(folder), config, revision, trust_remote_code)


def _tokenizer(found: _Found) -> Any:
    """The model's transformers tokenizer (its chat template, special tokens and pieces: the codec's)."""
    import transformers
    from transformers import AutoTokenizer

    from ..sources.hub import hub_reachable

    place = found.place
    ref = str(place.folder) if place.folder is not None else str(place.hub_id)
    transformers.logging.set_verbosity_error()
    try:
        return AutoTokenizer.from_pretrained(ref, revision=found.revision, trust_remote_code=found.trust_remote_code,
                                             local_files_only=place.hub_id is not None and not hub_reachable())
    except (OSError, ValueError, KeyError) as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise InputError(f"{place.name}: cannot load its tokenizer ({first})") from None


def _codec(found: _Found, tokenizer: Any) -> Codec:
    from ..sources.generated import end_of_sequence_ids

    return codec_from_tokenizer(tokenizer, end_of_sequence_ids(found.folder, found.config))


def load_codec(model: str | None, *, engine: str = "auto", revision: str | None = None, device: str = "cpu",
               trust_remote_code: bool = False, dtype: str | None = None) -> tuple[Codec, ModelFacts]:
    """A causal model's codec and its facts, from its tokenizer and config alone (the checks of
    :func:`load_stepper`, without loading the weights)."""
    found = _find(model, engine=engine, revision=revision, device=device, trust_remote_code=trust_remote_code,
                  dtype=dtype)
    from ..sources.causal import facts_of

    positions, layers, heads = facts_of(found.config)
    return _codec(found, _tokenizer(found)), ModelFacts(found.place.name, positions, layers, heads)


def load_stepper(model: str | None, *, engine: str = "auto", revision: str | None = None, device: str = "cpu",
                 trust_remote_code: bool = False, dtype: str | None = None) -> tuple[Stepper, Codec]:
    """A causal model (a folder or a hub id) ready to step, and its codec (``engine``: auto, native, fused or
    hf; ``dtype``: the transformers engines' precision). The config found here is the one the model loads with; on
    transformers the codec reads the tokenizer the model loaded (the native engine runs its own ``tokenizers``
    tokenizer, which holds no chat template: the codec's is loaded beside it)."""
    from ..sources.causal import load_causal

    found = _find(model, engine=engine, revision=revision, device=device, trust_remote_code=trust_remote_code,
                  dtype=dtype)
    causal = load_causal(model, engine=engine, revision=revision, device=device, trust_remote_code=trust_remote_code,
                         dtype=dtype, located=(found.place, found.folder, found.config))
    loaded = getattr(causal.source, "hf_tokenizer", None)
    return causal.stepper, _codec(found, loaded if loaded is not None else _tokenizer(found))
