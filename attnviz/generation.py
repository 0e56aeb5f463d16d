"""Attention during generation: a causal language model continues a prompt, and every token's
attention row is kept as it was computed, at the step that processed it.

The result is an ordinary :class:`~attnviz.result.AttentionResult`: ``tokens`` are the prompt
followed by the generated tokens, ``attentions`` ``[layers, heads, T, T]`` are lower-triangular
(row t is token t's attention over tokens 0..t), and ``metadata["prompt_length"]`` says where the
prompt ends. It saves, loads and draws like any result.

This first step runs on transformers (``generate(output_attentions=True,
return_dict_in_generate=True)``): the prompt's rows come from the first step, each generated
token's row from the step that fed it back, and the last token's row from one more step on the
cache. Greedy by default; ``sample=True`` with ``temperature``, ``top_k``, ``top_p`` and ``seed``
(the same seed gives the same tokens).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import ModelNotFoundError, UsageError
from .result import AttentionResult

MAX_NEW_TOKENS = 4096
"""New tokens one call may ask for (the attention of T tokens costs layers × heads × T² floats)."""


@dataclass(frozen=True)
class Sampling:
    """How the next token is chosen: greedily (the default), or sampled."""

    sample: bool = False
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None

    def check(self) -> None:
        if not self.sample and (self.temperature != 1.0 or self.top_k is not None or self.top_p is not None
                                or self.seed is not None):
            raise UsageError("[[temperature]], [[top_k]], [[top_p]] and [[seed]] choose how to sample; add "
                             "[[sample=True]] (greedy decoding ignores them)")
        if not self.temperature > 0 or self.temperature == float("inf"):
            raise UsageError(f"[[temperature={self.temperature}]] must be a positive number")
        if self.top_k is not None and self.top_k < 1:
            raise UsageError(f"[[top_k={self.top_k}]] must be at least 1")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise UsageError(f"[[top_p={self.top_p}]] must be in (0, 1]")

    def options(self) -> dict[str, Any]:
        """The keyword arguments of transformers' ``generate`` for this choice."""
        if not self.sample:
            return {"do_sample": False}
        chosen: dict[str, Any] = {"do_sample": True, "temperature": self.temperature, "top_k": self.top_k or 0}
        if self.top_p is not None:
            chosen["top_p"] = self.top_p
        return chosen


def generate_hf(ref: str, prompt: str, *, name: str, max_new_tokens: int, sampling: Sampling, stop_at_eos: bool,
                revision: str | None = None, trust_remote_code: bool = False, local_files_only: bool = False,
                device: str = "cpu") -> AttentionResult:
    """Generate with transformers from ``ref`` (a folder or hub id) and keep every attention row."""
    import torch

    if not 1 <= max_new_tokens <= MAX_NEW_TOKENS:
        raise UsageError(f"[[max_new_tokens={max_new_tokens}]] must be between 1 and {MAX_NEW_TOKENS}")
    sampling.check()
    tokenizer, model = _load(ref, name=name, revision=revision, trust_remote_code=trust_remote_code,
                             local_files_only=local_files_only, device=device)
    if not prompt or not prompt.strip():
        raise UsageError("the prompt is empty; give the text to continue")
    encoded = tokenizer(prompt, return_tensors="pt").to(model.device)
    if encoded["input_ids"].shape[1] == 0:
        raise UsageError("the tokenizer produced no tokens for the prompt")
    limit = getattr(model.config, "max_position_embeddings", None) or getattr(model.config, "n_positions", None)
    if limit is not None and encoded["input_ids"].shape[1] + max_new_tokens > limit:
        raise UsageError(f"the prompt ({encoded['input_ids'].shape[1]} tokens) and [[max_new_tokens={max_new_tokens}]] "
                         f"pass the {limit} positions {name} takes; ask for fewer tokens")
    eos = model.generation_config.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (eos[0] if isinstance(eos, list) else eos)
    extra: dict[str, Any] = {} if stop_at_eos else {"min_new_tokens": max_new_tokens}
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        if sampling.seed is not None:
            torch.manual_seed(sampling.seed)
        out = model.generate(**encoded, max_new_tokens=max_new_tokens, output_attentions=True,
                             return_dict_in_generate=True, pad_token_id=pad, **sampling.options(), **extra)
        sequence = out.sequences[0]
        # The last token was chosen but never fed back: one more step on the cache gives its row.
        last = model(input_ids=sequence[-1:][None], past_key_values=out.past_key_values, output_attentions=True,
                     use_cache=True)
    steps = [*out.attentions, last.attentions]
    total = sequence.shape[0]
    layers, heads = len(steps[0]), steps[0][0].shape[1]
    attentions = torch.zeros(layers, heads, total, total)
    row = 0
    for step in steps:
        rows, width = step[0].shape[-2:]
        end = row + rows  # a step's keys end at its last row; a sliding-window cache keeps only the last ``width``
        for layer, weights in enumerate(step):
            attentions[layer, :, row:end, end - width : end] = weights[0].float().cpu()
        row = end
    ids = [int(i) for i in sequence]
    labels = _labels(tokenizer, ids)
    special = set(tokenizer.all_special_ids)
    prompt_length = int(encoded["input_ids"].shape[1])
    return AttentionResult(
        tokens=labels, attentions=attentions, token_ids=ids, special=[i in special for i in ids], causal=True,
        model_name=name,
        metadata={"engine": "hf", "generation": True, "prompt_length": prompt_length,
                  "sampling": {"sample": sampling.sample, "temperature": sampling.temperature, "top_k": sampling.top_k,
                               "top_p": sampling.top_p, "seed": sampling.seed},
                  "stopped_at_eos": bool(eos is not None and ids[-1] in (eos if isinstance(eos, list) else [eos]))},
    )


def _labels(tokenizer: Any, ids: list[int]) -> list[str]:
    """Readable labels, as the other commands write them (byte-level pieces decoded)."""
    from .sources.tokens import label_from_piece

    return [label_from_piece(piece) for piece in tokenizer.convert_ids_to_tokens(ids)]


def _load(ref: str, *, name: str, revision: str | None, trust_remote_code: bool, local_files_only: bool,
          device: str) -> tuple[Any, Any]:
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    kwargs = {"revision": revision, "trust_remote_code": trust_remote_code, "local_files_only": local_files_only}
    dtype = {"dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype": torch.float32}
    try:
        tokenizer = AutoTokenizer.from_pretrained(ref, **kwargs)
        model, info = AutoModelForCausalLM.from_pretrained(ref, attn_implementation="eager", output_loading_info=True,
                                                           **dtype, **kwargs)
    except (OSError, ValueError, KeyError) as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise ModelNotFoundError(f"{name} cannot generate: it is not a causal language model transformers can load "
                                 f"({first})") from None
    missing = [key for key in info.get("missing_keys", []) if "lm_head" in key]
    if missing:  # transformers would fill it with random numbers: every token would be noise
        raise ModelNotFoundError(f"{name} has no language-model head ({missing[0]} is not in its weights), so it "
                                 "cannot generate; give the checkpoint of a ...ForCausalLM model")
    return tokenizer, model.to(device).eval()


def generate(prompt: str, model: str | None = None, *, max_new_tokens: int = 20, sample: bool = False,
             temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None, seed: int | None = None,
             stop_at_eos: bool = True, engine: str = "auto", revision: str | None = None, device: str = "cpu",
             trust_remote_code: bool = False) -> AttentionResult:
    """Continue ``prompt`` with a causal language model (a folder or hub id such as ``gpt2``) and
    return every token's attention at the step that processed it (see the module's docs).

    ``engine``: ``auto`` or ``hf`` (transformers' ``generate``); the native engine's own cached
    decoding is not built yet, and asking for it is an error rather than a silent substitute.
    """
    from .sources.files import read_config
    from .sources.hub import fetch_config, hub_reachable
    from .sources.resolve import _check_run_options, locate

    _check_run_options(engine, device)
    if engine == "native":
        raise UsageError("generation runs on transformers for now ([[engine=hf]] or auto); the native engine's own "
                         "cached decoding is not built yet")
    if model is not None and model.lower().endswith(".toml"):
        raise UsageError(f"{model} is a config model: its random weights have no language-model head to generate "
                         "with; give a causal model folder or hub id (e.g. gpt2)")
    place = locate(model)
    folder = place.folder if place.folder is not None else fetch_config(place.hub_id, revision)  # type: ignore[arg-type]
    config = read_config(folder)
    if model is None or config.get("is_encoder_decoder") or config.get("model_type") in ("bert", "roberta", "distilbert"):
        raise UsageError(f"{place.name} is not a causal language model ({config.get('model_type')}); give one such as "
                         "gpt2, or a LLaMA-family folder")
    if revision is not None and place.hub_id is None:
        raise UsageError(f"[[revision]] applies to hub ids; {place.name} is a folder")
    ref = str(place.folder) if place.folder is not None else place.hub_id
    return generate_hf(ref, prompt, name=place.name, max_new_tokens=max_new_tokens,  # type: ignore[arg-type]
                       sampling=Sampling(sample, temperature, top_k, top_p, seed), stop_at_eos=stop_at_eos,
                       revision=revision, trust_remote_code=trust_remote_code,
                       local_files_only=place.hub_id is not None and not hub_reachable(), device=device)


def generated_summary(result: AttentionResult, *, layer: int | None = None, head: int | None = None,
                      top: int = 3) -> list[tuple[int, str, list[tuple[int, str, float]]]]:
    """For each generated token: its position, label, and the ``top`` tokens it attended to most,
    with their weights, in one layer (or the mean over layers) and one head (or the mean of heads)."""
    attn = result.attentions.double()
    if layer is not None:
        if not 0 <= layer < result.n_layers:
            raise UsageError(f"[[layer={layer}]] is out of range; {result.model_name} has layers 0 to {result.n_layers - 1}")
        attn = attn[layer : layer + 1]
    if head is not None:
        if not 0 <= head < result.n_heads:
            raise UsageError(f"[[head={head}]] is out of range; {result.model_name} has heads 0 to {result.n_heads - 1}")
        attn = attn[:, head : head + 1]
    mean = attn.mean(dim=(0, 1))  # [T, T]
    start = int(result.metadata.get("prompt_length", 0))
    out = []
    for t in range(start, len(result.tokens)):
        weights = mean[t, : t + 1]
        best = weights.topk(min(top, t + 1))
        out.append((t, result.tokens[t], [(int(k), result.tokens[int(k)], float(w))
                                         for w, k in zip(best.values, best.indices, strict=True)]))
    return out
