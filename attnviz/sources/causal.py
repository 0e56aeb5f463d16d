"""One way to load a causal language model, for every command that decodes or cuts a cache (generate, needle, kv):
one list of what is refused, one reading of the config (a multimodal model's text config included), the model
loaded once.

:func:`load_causal` returns a :class:`CausalModel`: the source extraction runs (the native engine's, or
transformers' base model on the fused or eager engine; a causal config model's), the
:class:`~attnviz.sources.stepping.Stepper` every decoding loop runs on (:func:`attnviz.sources.decoding.decode`),
and the ids that end generation. On transformers the checkpoint loads once with its language-model head
(``...ForCausalLM``) and extraction runs its base model, so nothing is held twice.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import ModelNotFoundError, UsageError
from .generated import end_of_sequence_ids
from .stepping import CausalModel


def is_encoder(config: dict[str, Any]) -> bool:
    """Whether a config is an encoder's (no causal mask, no cache to decode on), by transformers' own records of
    its family: a family with a masked-language-model head (BERT, RoBERTa, ModernBERT, …) whose config does not
    ask to decode (``is_decoder``, XLM's ``causal``), or an image classifier's (ViT, CLIP, SigLIP, DINOv2). A family
    transformers does not list (a hub model's own code) is left to its loading. A family the native engine runs
    causally (GPT-2, LLaMA, …) is told from its record, without importing transformers (about 1 s)."""
    from .native import FAMILIES

    kind = config.get("model_type")
    if config.get("is_encoder_decoder"):
        return False  # said as an encoder-decoder (or generated on transformers' own generate)
    if kind in FAMILIES and FAMILIES[str(kind)].causal:
        return False
    from transformers.models.auto import modeling_auto

    if kind in modeling_auto.MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES:
        return kind not in modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    return (kind in modeling_auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES
            and not config.get("is_decoder") and not config.get("causal"))


EXAMPLES = "gpt2, a LLaMA-family folder, or a causal config model such as sample_configs/causal.toml"


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The language model's part of a config (``text_config`` in a multimodal one, else the config itself)."""
    inner = config.get("text_config")
    return inner if isinstance(inner, dict) else config


def facts_of(config: dict[str, Any]) -> tuple[int | None, int, int]:
    """A causal model's positions, layers and heads, from its config (the text config of a multimodal one)."""
    cfg = text_config(config)
    return (cfg.get("max_position_embeddings") or cfg.get("n_positions"),
            int(cfg.get("num_hidden_layers") or cfg.get("n_layer") or 1),
            int(cfg.get("num_attention_heads") or cfg.get("n_head") or 1))


def refuse_non_causal(config: dict[str, Any], name: str, *, embedded: bool = False, seq2seq: bool = False) -> None:
    """Refuse, in one line, what cannot decode: the embedded encoder, encoders, and encoder-decoders (unless
    ``seq2seq``: generate runs those on transformers)."""
    kind = config.get("model_type")
    if embedded:
        raise UsageError(f"the embedded default ({name}) is an encoder, which does not decode; give a causal language "
                         f"model: {EXAMPLES}")
    if config.get("is_encoder_decoder") and not seq2seq:
        raise UsageError(f"{name} is an encoder-decoder model ({kind}); this needs a causal language model: {EXAMPLES}")
    if is_encoder(config) or is_encoder(text_config(config)):
        raise UsageError(f"{name} is not a causal language model ({kind}); give one such as {EXAMPLES}")


def causal_place(model: str | None, *, engine: str, revision: str | None, dtype: str | None,
                 seq2seq: bool = False) -> tuple[Any, Path, dict[str, Any]]:
    """Where a trained causal model is, its folder (a hub id's fetched config) and its config, each refusal said
    once: half precision on the native engine, a model that does not decode (an encoder-decoder unless ``seq2seq``:
    generate runs those on transformers), a revision of a folder."""
    from .files import read_config
    from .hub import fetch_config
    from .resolve import locate

    if dtype not in (None, "float32") and engine == "native":
        raise UsageError(f"the native engine computes in float32; [[dtype={dtype}]] is for [[engine=fused]] or hf")
    place = locate(model)
    folder = place.folder if place.folder is not None else fetch_config(str(place.hub_id), revision)
    config = read_config(folder)
    refuse_non_causal(config, place.name, embedded=model is None, seq2seq=seq2seq)
    if revision is not None and place.hub_id is None:
        raise UsageError(f"[[revision]] applies to hub ids; {place.name} is a folder")
    return place, Path(folder), config


def load_causal(model: str | None, *, engine: str = "auto", revision: str | None = None, device: str = "cpu",
                trust_remote_code: bool = False, dtype: str | None = None, cut: bool = False,
                located: tuple[Any, Path, dict[str, Any]] | None = None) -> CausalModel:
    """Load ``model`` (a folder, a hub id, a causal config model) to extract and decode (see the module).
    ``engine``: ``auto`` runs the native engine where it supports the model, else transformers on attnviz's
    attention function where it gives eager's weights, else eager attention; ``native``, ``fused`` or ``hf``
    insist on one. ``cut``: the stepper must hold a cache a policy can cut (kv's end-to-end check: the native
    engine's or transformers', not a config model's). ``located``: what :func:`causal_place` gave a caller that
    looked already (the needle, which reads the tokenizer beside it), so the config is not read again."""
    from .resolve import (
        check_dtype,
        check_run_options,
        checked_engine,
        hf_source,
        is_config_model,
        load_source,
        native_source,
    )

    check_run_options(engine, device)
    check_dtype(dtype)
    if is_config_model(model):
        if cut:
            raise UsageError(f"{model} is a config model; kv's end-to-end check cuts the cache of a checkpoint (the "
                             "native engine's or transformers'): pass [[end_to_end=False]]")
        source: Any = load_source(model, engine=checked_engine(engine), revision=revision, device=device, dtype=dtype)
        from .own import ConfigSource

        assert isinstance(source, ConfigSource)  # a .toml model's source
        return source.causal_model()
    place, folder, config = located or causal_place(model, engine=engine, revision=revision, dtype=dtype)
    eos = end_of_sequence_ids(Path(folder), config)
    if engine in ("auto", "native") and dtype in (None, "float32"):
        native = native_source(place, engine=engine, revision=revision, device=device)
        if native is not None:
            from .native.generate import native_causal

            return native_causal(native)
    why = None
    if engine == "auto":
        why = (f"[[dtype={dtype}]] runs on the transformers engines" if dtype not in (None, "float32")
               else "the native engine does not run this family")
    loaded: Any = hf_source(place, revision=revision, device=device, device_map=None,
                            trust_remote_code=trust_remote_code, attention={"hf": "eager"}.get(engine, engine),
                            why=why, dtype=dtype, head="causal-lm")
    if loaded.lm is None:  # pragma: no cover - head="causal-lm" loads it or raises
        raise ModelNotFoundError(f"{place.name} has no language-model head")
    from .stepping import TransformersStepper

    generation = getattr(loaded.lm.generation_config, "eos_token_id", None)
    if generation is not None:
        eos = [int(i) for i in (generation if isinstance(generation, list) else [generation]) if i is not None]
    return CausalModel(loaded, TransformersStepper(loaded.lm, place.name), eos, Path(folder))

