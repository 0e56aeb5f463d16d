"""What an encoder-decoder's generation on transformers' own ``generate`` (:mod:`.seq2seq`) is built with: the model
loaded with its head (:func:`load_for_generation`), each step's rows laid into one matrix (:func:`rows_by_step`), the
engine it ran on (:func:`engine_of`). Causal models generate on their stepper instead
(:func:`attnviz.sources.generated.generate_on`)."""

from __future__ import annotations

from typing import Any

from ..errors import ModelNotFoundError


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


def engine_of(model: Any) -> str:
    """``"fused"`` for a model on attnviz's attention function, ``"hf"`` for eager attention."""
    from ..sources.hf_attention import is_fused

    return "fused" if is_fused(model) else "hf"


def load_for_generation(ref: str, *, name: str, revision: str | None, trust_remote_code: bool, local_files_only: bool,
                        device: str, attention: str = "auto", dtype: str | None = None) -> tuple[Any, Any]:
    """The tokenizer and an encoder-decoder model with its language-model head (``...ForConditionalGeneration``: T5,
    BART; causal models load through :func:`attnviz.sources.causal.load_causal`), on attnviz's attention function
    (``attention`` ``"auto"`` where it gives eager's weights on a probe, ``"fused"`` or an error), else eager."""
    import torch
    import transformers
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    kwargs = {"revision": revision, "trust_remote_code": trust_remote_code, "local_files_only": local_files_only}
    precision = {"dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype":
                 getattr(torch, dtype or "float32")}
    try:
        tokenizer = AutoTokenizer.from_pretrained(ref, **kwargs)
        model, info = AutoModelForSeq2SeqLM.from_pretrained(
            ref, attn_implementation="eager", output_loading_info=True, **precision, **kwargs)
    except (OSError, ValueError, KeyError) as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise ModelNotFoundError(f"{name} cannot generate: it is not an encoder-decoder language model transformers "
                                 f"can load ({first})") from None
    missing = [key for key in info.get("missing_keys", []) if "lm_head" in key]
    if missing:  # transformers would fill it with random numbers: every token would be noise
        raise ModelNotFoundError(f"{name} has no language-model head ({missing[0]} is not in its weights), so it "
                                 "cannot generate; give the checkpoint of a ...ForConditionalGeneration model")
    model = model.to(device).eval()
    if attention != "eager":
        from ..sources.hf_attention import probe_inputs, switch_to_fused

        vocab = model.get_input_embeddings().num_embeddings
        reason = switch_to_fused(model, probe_inputs(vocab, model.device, encoder_decoder=True),
                                 family=model.config.model_type, encoder_decoder=True, folder=str(ref))
        if reason is not None and attention == "fused":
            raise ModelNotFoundError(f"the fused engine cannot generate with {name}: {reason}; use [[engine=hf]] or auto")
    return tokenizer, model
