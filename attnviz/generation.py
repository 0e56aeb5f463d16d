"""Attention during generation: a causal language model continues a prompt, and every token's
attention row is kept as it was computed, at the step that processed it.

The result is an ordinary :class:`~attnviz.result.AttentionResult`: ``tokens`` are the prompt
followed by the generated tokens, ``attentions`` ``[layers, heads, T, T]`` are lower-triangular
(row t is token t's attention over tokens 0..t), and ``metadata["prompt_length"]`` says where the
prompt ends. It saves, loads and draws like any result.

Three ways run it, chosen by :func:`generate`:

- the native engine (GPT-2, the LLaMA family): attnviz's own attention with a key/value cache
  (:mod:`attnviz.sources.native.generate`, :mod:`attnviz.decoding`);
- a causal config model with a vocabulary (``sample_configs/causal.toml``), offline;
- transformers (``generate(output_attentions=True, return_dict_in_generate=True)``), for every other
  causal model and for encoder-decoder models (:mod:`attnviz.generation_seq2seq`): the prompt's rows
  come from the first step, each generated token's row from the step that fed it back, and the
  last token's row from one more step on the cache.

Greedy by default; ``sample=True`` with ``temperature``, ``top_k``, ``top_p`` and ``seed`` (the same
seed gives the same tokens, on every engine: they sample as transformers does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from .decoding import sampling_metadata
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
        from .config import MAX_SEED

        if self.seed is not None and not 0 <= self.seed <= MAX_SEED:
            raise UsageError(f"[[seed={self.seed}]] must be a whole number from 0 to {MAX_SEED:,} (2⁶³ − 1)")

    def overflow(self) -> UsageError:
        """The error for logits that overflow once divided by the temperature (1e-300: ±inf, a NaN softmax)."""
        return UsageError(f"[[temperature={self.temperature}]] is so small that the logits divided by it overflow; "
                          "use a temperature of 1e-3 or more, or greedy decoding (leave out [[sample=True]])")

    def generate(self, model: Any, **kwargs: Any) -> Any:
        """transformers' ``model.generate(**kwargs)`` sampling this way: its NaN probabilities from an
        overflowing temperature are this error, not a crash."""
        options = self.options(stop_at_eos=kwargs.pop("stop_at_eos", True))
        try:
            return model.generate(**kwargs, **options)
        except RuntimeError as exc:
            if self.sample and "probability tensor contains" in str(exc):
                raise self.overflow() from None
            raise

    def options(self, *, stop_at_eos: bool = True) -> dict[str, Any]:
        """The keyword arguments of transformers' ``generate`` for this choice. Every setting is said
        explicitly, so a checkpoint's own ``generation_config.json`` (beams, penalties, a forced end
        token, top-p) cannot add what the native engine would not do: the engines pick the same tokens."""
        neutral: dict[str, Any] = {"num_beams": 1, "repetition_penalty": 1.0, "no_repeat_ngram_size": 0,
                                   "encoder_no_repeat_ngram_size": 0, "min_length": 0, "bad_words_ids": None,
                                   "suppress_tokens": None, "begin_suppress_tokens": None}
        if not stop_at_eos:  # never the end token, as transformers' min_new_tokens; and none forced at the end
            neutral["forced_eos_token_id"] = None
        if not self.sample:
            return {**neutral, "do_sample": False}
        # 0 and 1.0 switch top-k and top-p off.
        return {**neutral, "do_sample": True, "temperature": self.temperature, "top_k": self.top_k or 0,
                "top_p": 1.0 if self.top_p is None else self.top_p, "min_p": None, "typical_p": 1.0}


def generate_hf(ref: str, prompt: str, *, name: str, max_new_tokens: int, sampling: Sampling, stop_at_eos: bool,
                revision: str | None = None, trust_remote_code: bool = False, local_files_only: bool = False,
                device: str = "cpu") -> AttentionResult:
    """Generate with transformers from ``ref`` (a folder or hub id) and keep every attention row."""
    import torch

    tokenizer, model = load_for_generation(ref, name=name, revision=revision, trust_remote_code=trust_remote_code,
                             local_files_only=local_files_only, device=device)
    encoded = tokenizer(prompt, return_tensors="pt").to(model.device)
    if encoded["input_ids"].shape[1] == 0:
        raise UsageError("the tokenizer produced no tokens for the prompt")
    limit = getattr(model.config, "max_position_embeddings", None) or getattr(model.config, "n_positions", None)
    if limit is not None and encoded["input_ids"].shape[1] + max_new_tokens > limit:
        raise UsageError(f"the prompt ({encoded['input_ids'].shape[1]} tokens) and [[max_new_tokens={max_new_tokens}]] "
                         f"pass the {limit} positions {name} takes; ask for fewer tokens")
    from .decoding import check_generation_memory

    cfg = getattr(model.config, "get_text_config", lambda: model.config)()
    layers = getattr(cfg, "num_hidden_layers", None) or getattr(cfg, "n_layer", 1)
    heads = getattr(cfg, "num_attention_heads", None) or getattr(cfg, "n_head", 1)
    check_generation_memory(int(layers), int(heads), encoded["input_ids"].shape[1] + max_new_tokens)
    eos = model.generation_config.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (eos[0] if isinstance(eos, list) else eos)
    extra: dict[str, Any] = {} if stop_at_eos else {"min_new_tokens": max_new_tokens}
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        if sampling.seed is not None:
            torch.manual_seed(sampling.seed)
        out = sampling.generate(model, **encoded, max_new_tokens=max_new_tokens, output_attentions=True,
                                return_dict_in_generate=True, pad_token_id=pad, stop_at_eos=stop_at_eos, **extra)
        sequence = out.sequences[0]
        # The last token was chosen but never fed back: one more step on the cache gives its row.
        last = model(input_ids=sequence[-1:][None], past_key_values=out.past_key_values, output_attentions=True,
                     use_cache=True)
    attentions = rows_by_step([*out.attentions, last.attentions], sequence.shape[0], None)
    ids = [int(i) for i in sequence]
    labels = generated_labels(tokenizer, ids)
    special = set(tokenizer.all_special_ids)
    prompt_length = int(encoded["input_ids"].shape[1])
    return AttentionResult(
        tokens=labels, attentions=attentions, token_ids=ids, special=[i in special for i in ids], causal=True,
        model_name=name,
        metadata={"engine": "hf", "generation": True, "prompt_length": prompt_length,
                  "sampling": sampling_metadata(sampling),
                  "stopped_at_eos": bool(stop_at_eos and eos is not None
                                         and ids[-1] in (eos if isinstance(eos, list) else [eos]))},
    )


def rows_by_step(steps: list[tuple[Any, ...]], total: int, keys: int | None) -> Any:
    """``[layers, heads, total, keys or total]`` from each step's per-layer ``[1, heads, rows, width]``
    weights: a step's rows follow the previous step's, and its keys end at its last row (self-attention;
    a sliding-window cache keeps only the last ``width``) or are the whole source (cross-attention,
    ``keys`` given)."""
    import torch

    layers, heads = len(steps[0]), steps[0][0].shape[1]
    out = torch.zeros(layers, heads, total, total if keys is None else keys)
    row = 0
    for step in steps:
        rows, width = step[0].shape[-2:]
        end = row + rows
        first = 0 if keys is not None else end - width
        for layer, weights in enumerate(step):
            out[layer, :, row:end, first : first + width] = weights[0].float().cpu()
        row = end
    return out


def generated_labels(tokenizer: Any, ids: list[int]) -> list[str]:
    """Readable labels, as the other commands write them (byte-level pieces decoded); an id the
    vocabulary has no piece for (a model whose embedding has more rows than its tokenizer) is ``<id>``."""
    from .sources.tokens import label_from_piece

    pieces = tokenizer.convert_ids_to_tokens(ids)
    return [label_from_piece(piece) if piece is not None else f"<{i}>" for piece, i in zip(pieces, ids, strict=True)]


def load_for_generation(ref: str, *, name: str, revision: str | None, trust_remote_code: bool, local_files_only: bool,
          device: str, seq2seq: bool = False) -> tuple[Any, Any]:
    """The tokenizer and the float32 eager model, with its language-model head: ``...ForCausalLM``, or
    ``...ForConditionalGeneration`` when ``seq2seq`` (an encoder-decoder such as T5 or BART)."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    auto, what, example = ((AutoModelForSeq2SeqLM, "an encoder-decoder language model", "...ForConditionalGeneration")
                           if seq2seq else (AutoModelForCausalLM, "a causal language model", "...ForCausalLM"))
    kwargs = {"revision": revision, "trust_remote_code": trust_remote_code, "local_files_only": local_files_only}
    dtype = {"dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype": torch.float32}
    try:
        tokenizer = AutoTokenizer.from_pretrained(ref, **kwargs)
        model, info = auto.from_pretrained(ref, attn_implementation="eager", output_loading_info=True, **dtype, **kwargs)
    except (OSError, ValueError, KeyError) as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise ModelNotFoundError(f"{name} cannot generate: it is not {what} transformers can load ({first})") from None
    missing = [key for key in info.get("missing_keys", []) if "lm_head" in key]
    if missing:  # transformers would fill it with random numbers: every token would be noise
        raise ModelNotFoundError(f"{name} has no language-model head ({missing[0]} is not in its weights), so it "
                                 f"cannot generate; give the checkpoint of a {example} model")
    return tokenizer, model.to(device).eval()


def generate(prompt: str, model: str | None = None, *, max_new_tokens: int = 20, sample: bool = False,
             temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None, seed: int | None = None,
             stop_at_eos: bool = True, engine: str = "auto", revision: str | None = None, device: str = "cpu",
             trust_remote_code: bool = False) -> AttentionResult:
    """Continue ``prompt`` with a causal language model (a folder, a hub id such as ``gpt2``, or a
    causal config model with a vocabulary) and return every token's attention at the step that
    processed it (see the module's docs).

    ``engine``: ``auto`` runs attnviz's own attention with a key/value cache where the native engine
    supports the model (GPT-2, the LLaMA family), else transformers' ``generate``; ``native`` or
    ``hf`` insist on one.
    """
    from .sources.files import read_config
    from .sources.hub import fetch_config, hub_reachable
    from .sources.resolve import check_run_options, locate, native_source

    check_run_options(engine, device)
    if not 1 <= max_new_tokens <= MAX_NEW_TOKENS:
        raise UsageError(f"[[max_new_tokens={max_new_tokens}]] must be between 1 and {MAX_NEW_TOKENS}")
    sampling = Sampling(sample, temperature, top_k, top_p, seed)
    sampling.check()
    if not prompt or not prompt.strip():
        raise UsageError("the prompt is empty; give the text to continue")
    if model is not None and model.lower().endswith(".toml"):
        from .sources.resolve import load_source

        source = load_source(model, engine=engine, revision=revision, device=device)  # type: ignore[arg-type]
        return source.generate(prompt, max_new_tokens=max_new_tokens, sampling=sampling,  # type: ignore[attr-defined]
                               stop_at_eos=stop_at_eos)
    place = locate(model)
    folder = place.folder if place.folder is not None else fetch_config(place.hub_id, revision)  # type: ignore[arg-type]
    config = read_config(folder)
    if model is None or config.get("model_type") in ("bert", "roberta", "distilbert"):
        raise UsageError(f"{place.name} is not a causal language model ({config.get('model_type')}); give one such as "
                         "gpt2, a LLaMA-family folder, or sample_configs/causal.toml")
    if revision is not None and place.hub_id is None:
        raise UsageError(f"[[revision]] applies to hub ids; {place.name} is a folder")
    ref = str(place.folder) if place.folder is not None else place.hub_id
    options: dict[str, Any] = {"name": place.name, "max_new_tokens": max_new_tokens, "sampling": sampling,
                               "stop_at_eos": stop_at_eos}
    hf_options: dict[str, Any] = {"revision": revision, "trust_remote_code": trust_remote_code, "device": device,
                                  "local_files_only": place.hub_id is not None and not hub_reachable()}
    if config.get("is_encoder_decoder"):
        if engine == "native":
            raise ModelNotFoundError(f"the native engine cannot generate with {place.name}: encoder-decoder models "
                                     "run on transformers; use [[engine=hf]] or auto")
        from .generation_seq2seq import generate_seq2seq_hf

        return generate_seq2seq_hf(ref, prompt, **options, **hf_options)  # type: ignore[arg-type]
    if engine != "hf":
        native = native_source(place, engine=engine, revision=revision, device=device)
        if native is not None:
            del options["name"]
            return native.generate(prompt, **options)  # type: ignore[attr-defined]
    return generate_hf(ref, prompt, **options, **hf_options)  # type: ignore[arg-type]


def generated_summary(result: AttentionResult, *, layer: int | None = None, head: int | None = None,
                      top: int = 3, kind: Literal["self", "cross"] = "self",
                      ) -> list[tuple[int, str, list[tuple[int, str, float]]]]:
    """For each generated token: its position, label, and the ``top`` tokens it attended to most,
    with their weights, in one layer (or the mean over layers) and one head (or the mean of heads).

    An encoder-decoder result (:mod:`attnviz.generation_seq2seq`) is read on the decoder's side:
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
    attn = tensor.double()  # type: ignore[union-attr]
    n_layers, n_heads = attn.shape[:2]
    if layer is not None:
        if not 0 <= layer < n_layers:
            raise UsageError(f"[[layer={layer}]] is out of range; {result.model_name} has layers 0 to {n_layers - 1}")
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
