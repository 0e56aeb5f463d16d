"""Generation with transformers' ``generate``: the prompt's rows from the first step, each generated
token's row from the step that fed it back, and the last token's row from one more step on the cache."""

from __future__ import annotations

from typing import Any

from ..errors import ModelNotFoundError, UsageError
from ..result import AttentionResult
from ..sources.cache import cache_of, with_cache
from ..sources.decoding import sampling_metadata
from ..sources.sampling import Sampling


def generate_hf(ref: str, prompt: str, *, name: str, max_new_tokens: int, sampling: Sampling, stop_at_eos: bool,
                revision: str | None = None, trust_remote_code: bool = False, local_files_only: bool = False,
                device: str = "cpu", attention: str = "auto", dtype: str | None = None) -> AttentionResult:
    """Generate with transformers from ``ref`` (a folder or hub id) and keep every attention row; with
    ``attention`` ``"auto"`` through attnviz's attention function where it gives eager's weights."""
    import torch

    tokenizer, model = load_for_generation(ref, name=name, revision=revision, trust_remote_code=trust_remote_code,
                             local_files_only=local_files_only, device=device, attention=attention, dtype=dtype)
    encoded = tokenizer(prompt, return_tensors="pt").to(model.device)
    if encoded["input_ids"].shape[1] == 0:
        raise UsageError("the tokenizer produced no tokens for the prompt")
    limit = getattr(model.config, "max_position_embeddings", None) or getattr(model.config, "n_positions", None)
    if limit is not None and encoded["input_ids"].shape[1] + max_new_tokens > limit:
        raise UsageError(f"the prompt ({encoded['input_ids'].shape[1]} tokens) and [[max_new_tokens={max_new_tokens}]] "
                         f"pass the {limit} positions {name} takes; ask for fewer tokens")
    from ..sources.decoding import check_generation_memory

    cfg = getattr(model.config, "get_text_config", lambda: model.config)()
    layers = getattr(cfg, "num_hidden_layers", 0) or getattr(cfg, "n_layer", 1)
    heads = getattr(cfg, "num_attention_heads", 0) or getattr(cfg, "n_head", 1)
    check_generation_memory(int(layers), int(heads), encoded["input_ids"].shape[1] + max_new_tokens)
    eos = model.generation_config.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (eos[0] if isinstance(eos, list) else eos)
    extra: dict[str, Any] = {} if stop_at_eos else {"min_new_tokens": max_new_tokens}
    from ..sources.hf_attention import whole_weights

    with torch.random.fork_rng(devices=[]), torch.no_grad(), whole_weights(model):
        if sampling.seed is not None:
            torch.manual_seed(sampling.seed)
        out = sampling.generate(model, **encoded, max_new_tokens=max_new_tokens, output_attentions=True,
                                return_dict_in_generate=True, pad_token_id=pad, stop_at_eos=stop_at_eos, **extra)
        sequence = out.sequences[0]
        # The last token was chosen but never fed back: one more step on the cache gives its row.
        last = model(input_ids=sequence[-1:][None], output_attentions=True, use_cache=True,
                     **with_cache(model, cache_of(out)))
    attentions = rows_by_step([*out.attentions, last.attentions], sequence.shape[0], None)
    ids = [int(i) for i in sequence]
    labels = generated_labels(tokenizer, ids)
    special = set(tokenizer.all_special_ids)
    prompt_length = int(encoded["input_ids"].shape[1])
    return AttentionResult(
        tokens=labels, attentions=attentions, token_ids=ids, special=[i in special for i in ids], causal=True,
        model_name=name,
        metadata={"engine": engine_of(model), "generation": True, "prompt_length": prompt_length,
                  "sampling": sampling_metadata(sampling),
                  "stopped_at_eos": bool(stop_at_eos and eos is not None
                                         and ids[-1] in (eos if isinstance(eos, list) else [eos]))},
    )


def rows_by_step(steps: list[tuple[Any, ...]], total: int, keys: int | None) -> Any:
    """``[layers, heads, total, keys or total]`` from each step's per-layer ``[1, heads, rows, width]``
    weights: a step's rows follow the previous step's, and its keys end at its last row (self-attention;
    a layer's sliding-window cache keeps only its last ``width``) or are the whole source (cross-attention,
    ``keys`` given)."""
    import torch

    layers, heads = len(steps[0]), steps[0][0].shape[1]
    out = torch.zeros(layers, heads, total, total if keys is None else keys)
    row = 0
    for step in steps:
        end = row + step[0].shape[-2]
        for layer, weights in enumerate(step):
            width = weights.shape[-1]  # per layer: sliding-window layers (Gemma 2's every other) keep fewer keys
            first = 0 if keys is not None else end - width
            out[layer, :, row:end, first : first + width] = weights[0].float().cpu()
        row = end
    return out


def generated_labels(tokenizer: Any, ids: list[int]) -> list[str]:
    """Readable labels, as the other commands write them (byte-level pieces decoded); an id the
    vocabulary has no piece for (a model whose embedding has more rows than its tokenizer) is ``<id>``."""
    from ..sources.tokens import label_from_piece

    pieces = tokenizer.convert_ids_to_tokens(ids)
    return [label_from_piece(piece) if piece is not None else f"<{i}>" for piece, i in zip(pieces, ids, strict=True)]


def engine_of(model: Any) -> str:
    """``"fused"`` for a model on attnviz's attention function, ``"hf"`` for eager attention."""
    from ..sources.hf_attention import is_fused

    return "fused" if is_fused(model) else "hf"


def load_for_generation(ref: str, *, name: str, revision: str | None, trust_remote_code: bool, local_files_only: bool,
          device: str, seq2seq: bool = False, attention: str = "auto", dtype: str | None = None) -> tuple[Any, Any]:
    """The tokenizer and the float32 model, with its language-model head: ``...ForCausalLM``, or
    ``...ForConditionalGeneration`` when ``seq2seq`` (an encoder-decoder such as T5 or BART); on attnviz's
    attention function (``attention`` ``"auto"`` where it gives eager's weights on a probe, ``"fused"`` or an
    error), else eager attention."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    auto, what, example = ((AutoModelForSeq2SeqLM, "an encoder-decoder language model", "...ForConditionalGeneration")
                           if seq2seq else (AutoModelForCausalLM, "a causal language model", "...ForCausalLM"))
    kwargs = {"revision": revision, "trust_remote_code": trust_remote_code, "local_files_only": local_files_only}
    precision = {"dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype":
                 getattr(torch, dtype or "float32")}
    try:
        tokenizer = AutoTokenizer.from_pretrained(ref, **kwargs)
        # transformers types from_pretrained as returning the model, also with output_loading_info=True (a pair)
        model, info = auto.from_pretrained(  # type: ignore[misc]  # transformers' stub: no (model, info) overload
            ref, attn_implementation="eager", output_loading_info=True, **precision, **kwargs)
    except (OSError, ValueError, KeyError) as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise ModelNotFoundError(f"{name} cannot generate: it is not {what} transformers can load ({first})") from None
    missing = [key for key in info.get("missing_keys", []) if "lm_head" in key]
    if missing:  # transformers would fill it with random numbers: every token would be noise
        raise ModelNotFoundError(f"{name} has no language-model head ({missing[0]} is not in its weights), so it "
                                 f"cannot generate; give the checkpoint of a {example} model")
    model = model.to(device).eval()
    if attention != "eager":
        from ..sources.hf_attention import probe_inputs, switch_to_fused

        vocab = model.get_input_embeddings().num_embeddings
        reason = switch_to_fused(model, probe_inputs(vocab, model.device, encoder_decoder=seq2seq),
                                 family=model.config.model_type, encoder_decoder=seq2seq)
        if reason is not None and attention == "fused":
            raise ModelNotFoundError(f"the fused engine cannot generate with {name}: {reason}; use [[engine=hf]] or auto")
    return tokenizer, model
