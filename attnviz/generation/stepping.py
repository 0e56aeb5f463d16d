"""Load a causal model to step (:mod:`attnviz.sources.stepping`), choosing the engine as ``attnviz generate``
does: the native engine where it runs the model, else transformers on attnviz's attention function where it
gives eager's weights, else eager attention. :func:`load_codec` reads the tokenizer and the config alone
(a driver that hands the model to Ray actors never loads it itself)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError, UsageError
from ..sources.stepping import Codec, NativeStepper, Stepper, TransformersStepper, codec_from_tokenizer


@dataclass(frozen=True)
class ModelFacts:
    """What a grid is planned with before a model loads: its name, positions, layers and heads."""

    name: str
    max_positions: int | None
    n_layers: int
    n_heads: int


@dataclass
class _Found:
    place: Any
    folder: Path
    config: dict[str, Any]
    ref: str
    local_only: bool
    tokenizer: Any


def _find(model: str | None, *, engine: str, revision: str | None, device: str, trust_remote_code: bool,
          dtype: str | None) -> _Found:
    from ..sources.files import read_config
    from ..sources.hub import fetch_config, hub_reachable
    from ..sources.resolve import check_dtype, check_run_options, locate

    check_run_options(engine, device)
    check_dtype(dtype)
    if model is not None and model.lower().endswith(".toml"):
        raise UsageError(f"{model} is a config model; a needle run needs a trained causal language model with a "
                         "tokenizer: a folder or a hub id such as gpt2")
    if dtype not in (None, "float32") and engine == "native":
        raise UsageError(f"the native engine computes in float32; [[dtype={dtype}]] is for [[engine=fused]] or hf")
    place = locate(model)
    folder = place.folder if place.folder is not None else fetch_config(str(place.hub_id), revision)
    config = read_config(folder)
    if model is None or config.get("is_encoder_decoder") or config.get("model_type") in (
            "bert", "roberta", "distilbert", "albert", "electra"):
        raise UsageError(f"{place.name} is not a causal language model ({config.get('model_type')}); give one such "
                         "as gpt2 or a LLaMA-family folder")
    if revision is not None and place.hub_id is None:
        raise UsageError(f"[[revision]] applies to hub ids; {place.name} is a folder")
    ref = str(place.folder) if place.folder is not None else str(place.hub_id)
    local_only = place.hub_id is not None and not hub_reachable()
    import transformers
    from transformers import AutoTokenizer

    transformers.logging.set_verbosity_error()
    try:
        tokenizer = AutoTokenizer.from_pretrained(ref, revision=revision, trust_remote_code=trust_remote_code,
                                                  local_files_only=local_only)
    except (OSError, ValueError, KeyError) as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise InputError(f"{place.name}: cannot load its tokenizer ({first})") from None
    return _Found(place, Path(folder), config, ref, local_only, tokenizer)


def _codec(found: _Found) -> Codec:
    from ..sources.native.generate import end_of_sequence_ids

    return codec_from_tokenizer(found.tokenizer, end_of_sequence_ids(found.folder, found.config))


def load_codec(model: str | None, *, engine: str = "auto", revision: str | None = None, device: str = "cpu",
               trust_remote_code: bool = False, dtype: str | None = None) -> tuple[Codec, ModelFacts]:
    """A causal model's codec and its facts, from its tokenizer and config alone (the checks of
    :func:`load_stepper`, without loading the weights)."""
    found = _find(model, engine=engine, revision=revision, device=device, trust_remote_code=trust_remote_code,
                  dtype=dtype)
    cfg = found.config.get("text_config") or found.config
    facts = ModelFacts(found.place.name, cfg.get("max_position_embeddings") or cfg.get("n_positions"),
                       int(cfg.get("num_hidden_layers") or cfg.get("n_layer") or 1),
                       int(cfg.get("num_attention_heads") or cfg.get("n_head") or 1))
    return _codec(found), facts


def load_stepper(model: str | None, *, engine: str = "auto", revision: str | None = None, device: str = "cpu",
                 trust_remote_code: bool = False, dtype: str | None = None) -> tuple[Stepper, Codec]:
    """A causal model (a folder or a hub id) ready to step, and its codec (``engine``: auto, native, fused or
    hf; ``dtype``: the transformers engines' precision)."""
    from ..sources.resolve import native_source

    found = _find(model, engine=engine, revision=revision, device=device, trust_remote_code=trust_remote_code,
                  dtype=dtype)
    if engine in ("auto", "native") and dtype in (None, "float32"):
        native = native_source(found.place, engine=engine, revision=revision, device=device)
        if native is not None:
            return NativeStepper(native), _codec(found)
    from .hf import load_for_generation

    _, loaded = load_for_generation(found.ref, name=found.place.name, revision=revision,
                                    trust_remote_code=trust_remote_code, local_files_only=found.local_only,
                                    device=device, attention={"hf": "eager", "fused": "fused"}.get(engine, "auto"),
                                    dtype=dtype)
    return TransformersStepper(loaded, found.place.name), _codec(found)
