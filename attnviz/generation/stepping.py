"""Load a causal model to step (:mod:`attnviz.sources.stepping`), choosing the engine as ``attnviz generate``
does: the native engine where it runs the model, else transformers on attnviz's attention function where it
gives eager's weights, else eager attention."""

from __future__ import annotations

from ..errors import InputError, UsageError
from ..sources.stepping import Codec, NativeStepper, Stepper, TransformersStepper, codec_from_tokenizer


def load_stepper(model: str | None, *, engine: str = "auto", revision: str | None = None, device: str = "cpu",
                 trust_remote_code: bool = False, dtype: str | None = None) -> tuple[Stepper, Codec]:
    """A causal model (a folder or a hub id) ready to step, and its codec (``engine``: auto, native, fused or
    hf; ``dtype``: the transformers engines' precision)."""
    from ..sources.files import read_config
    from ..sources.hub import fetch_config, hub_reachable
    from ..sources.resolve import check_dtype, check_run_options, locate, native_source

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
    if engine in ("auto", "native") and dtype in (None, "float32"):
        native = native_source(place, engine=engine, revision=revision, device=device)
        if native is not None:
            from ..sources.native.generate import end_of_sequence_ids

            folder_of_weights = getattr(native, "folder", folder)  # a hub model's: its downloaded folder
            return NativeStepper(native), codec_from_tokenizer(tokenizer, end_of_sequence_ids(folder_of_weights, config))
    from .hf import load_for_generation

    _, loaded = load_for_generation(ref, name=place.name, revision=revision, trust_remote_code=trust_remote_code,
                                    local_files_only=local_only, device=device,
                                    attention={"hf": "eager", "fused": "fused"}.get(engine, "auto"), dtype=dtype)
    eos = loaded.generation_config.eos_token_id
    eos_ids = [int(i) for i in (eos if isinstance(eos, list) else [eos]) if i is not None]
    return TransformersStepper(loaded, place.name), codec_from_tokenizer(tokenizer, eos_ids)
