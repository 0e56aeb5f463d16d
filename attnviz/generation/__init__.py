"""Attention during generation: a causal language model continues a prompt, and every token's
attention row is kept as it was computed, at the step that processed it.

The result is an ordinary :class:`~attnviz.result.AttentionResult`: ``tokens`` are the prompt
followed by the generated tokens, ``attentions`` ``[layers, heads, T, T]`` are lower-triangular
(row t is token t's attention over tokens 0..t), and ``metadata["prompt_length"]`` says where the
prompt ends. It saves, loads and draws like any result.

One way runs it for every causal model: :func:`attnviz.sources.causal.load_causal` loads it once with its
:class:`~attnviz.sources.stepping.Stepper` (the native engine for GPT-2 and the LLaMA family: attnviz's own attention
on a key/value cache; a causal config model with a vocabulary, ``sample_configs/causal.toml``, offline; transformers
for every other causal model, on attnviz's attention function or eager attention), and
:func:`attnviz.sources.generated.generate_on` encodes the prompt as that engine reads it, decodes on that stepper
(:func:`attnviz.sources.decoding.decode`, every row kept) and builds the result. Encoder-decoder models run on
transformers' own ``generate`` (:mod:`attnviz.generation.seq2seq`); a vision-language model answers on the same
loop (:mod:`attnviz.images.answer`).

Greedy by default; ``sample=True`` with ``temperature``, ``top_k``, ``top_p`` and ``seed`` (the same
seed gives the same tokens, on every engine: they sample as transformers does).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from ..errors import ModelNotFoundError, UsageError
from ..result import AttentionResult
from ..sources.sampling import MAX_NEW_TOKENS, Sampling

if TYPE_CHECKING:  # pragma: no cover
    from ..sources.resolve import Engine

__all__ = ["MAX_NEW_TOKENS", "Sampling", "generate", "generated_summary"]


def generate(prompt: str, model: str | None = None, *, max_new_tokens: int = 20, sample: bool = False,
             temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None, seed: int | None = None,
             stop_at_eos: bool = True, engine: Engine = "auto", revision: str | None = None, device: str = "cpu",
             trust_remote_code: bool = False, dtype: str | None = None) -> AttentionResult:
    """Continue ``prompt`` with a causal language model (a folder, a hub id such as ``gpt2``, or a
    causal config model with a vocabulary) and return every token's attention at the step that
    processed it (see the module's docs).

    ``engine``: ``auto`` runs attnviz's own attention with a key/value cache where the native engine
    supports the model (GPT-2, the LLaMA family), else transformers' ``generate`` on attnviz's attention
    function (``fused``) where the family routes attention through transformers' registry, else on eager
    attention (``hf``); ``native``, ``fused`` or ``hf`` insist on one. ``dtype``: the model's precision on
    transformers (``bfloat16``, ``float16``; default float32 on the CPU), the weights computed in float32.
    """
    from ..sources.resolve import check_dtype, check_run_options

    check_run_options(engine, device)
    check_dtype(dtype)
    if dtype not in (None, "float32") and engine == "native":
        raise UsageError(f"the native engine computes in float32; [[dtype={dtype}]] is for [[engine=fused]] or hf")
    if not 1 <= max_new_tokens <= MAX_NEW_TOKENS:
        raise UsageError(f"[[max_new_tokens={max_new_tokens}]] must be between 1 and {MAX_NEW_TOKENS}")
    sampling = Sampling(sample, temperature, top_k, top_p, seed)
    sampling.check()
    if not prompt or not prompt.strip():
        raise UsageError("the prompt is empty; give the text to continue")
    options: dict[str, Any] = {"max_new_tokens": max_new_tokens, "sampling": sampling, "stop_at_eos": stop_at_eos}
    from ..sources.causal import causal_place, load_causal
    from ..sources.generated import generate_on
    from ..sources.resolve import is_config_model

    # where the model is and its config, read once (an encoder-decoder's too: it generates on transformers' generate)
    located = None if is_config_model(model) else causal_place(model, engine=engine, revision=revision, dtype=dtype,
                                                               seq2seq=True)
    if located is not None and located[2].get("is_encoder_decoder"):
        place = located[0]
        if engine == "native":
            raise ModelNotFoundError(f"the native engine cannot generate with {place.name}: encoder-decoder models "
                                     "run on transformers; use [[engine=hf]] or auto")
        from ..sources.hub import hub_reachable
        from .seq2seq import generate_seq2seq_hf

        return generate_seq2seq_hf(place.ref, prompt, name=place.name, **options, revision=revision,
                                   trust_remote_code=trust_remote_code, device=device,
                                   local_files_only=place.hub_id is not None and not hub_reachable(),
                                   attention={"hf": "eager", "fused": "fused"}.get(engine, "auto"), dtype=dtype)
    causal = load_causal(model, engine=engine, revision=revision, device=device,
                         trust_remote_code=trust_remote_code, dtype=dtype, located=located)
    return generate_on(causal, prompt, **options)


def generated_summary(result: AttentionResult, *, layer: int | None = None, head: int | None = None,
                      top: int = 3, kind: Literal["self", "cross"] = "self",
                      ) -> list[tuple[int, str, list[tuple[int, str, float]]]]:
    """For each generated token: its position, label, and the ``top`` tokens it attended to most,
    with their weights, in one layer (or the mean over layers) and one head (or the mean of heads).

    An encoder-decoder result (:mod:`attnviz.generation.seq2seq`) is read on the decoder's side:
    positions are in ``target_tokens`` from ``metadata["target_start"]``; ``kind="self"`` reads the
    decoder's self-attention over the target, ``kind="cross"`` its cross-attention over the source."""
    seq2seq = result.decoder_attentions is not None and result.cross_attentions is not None
    if kind not in ("self", "cross"):
        raise UsageError(f"[[kind={kind!r}]] is unknown; use self or cross")
    if kind == "cross" and not seq2seq:
        raise UsageError("[[kind=cross]] needs an encoder-decoder result (T5, BART); this one has only self-attention")
    if seq2seq:
        queries: list[str] = result.target_tokens or []
        keys, causal = (queries, True) if kind == "self" else (result.tokens, False)
        tensor = result.decoder_attentions if kind == "self" else result.cross_attentions
        start = int(result.metadata.get("target_start", 0))
    else:
        queries, keys, causal, tensor = result.tokens, result.tokens, True, result.attentions
        start = int(result.metadata.get("prompt_length", 0))
    from ..attention import built

    attn = built(tensor, "decoder or cross attentions").double()  # an encoder-decoder result has both
    n_layers, n_heads = attn.shape[:2]
    if layer is not None:
        from ..layer_range import check_layer

        check_layer(layer, owner=result.model_name, count=n_layers)
        attn = attn[layer : layer + 1]
    if head is not None:
        if not 0 <= head < n_heads:
            raise UsageError(f"[[head={head}]] is out of range; {result.model_name} has heads 0 to {n_heads - 1}")
        attn = attn[:, head : head + 1]
    mean = attn.mean(dim=(0, 1))  # [queries, keys]
    out = []
    for t in range(start, len(queries)):
        weights = mean[t, : t + 1] if causal else mean[t]
        best = weights.topk(min(top, len(weights)))
        out.append((t, queries[t], [(int(k), keys[int(k)], float(w))
                                    for w, k in zip(best.values, best.indices, strict=True)]))
    return out
