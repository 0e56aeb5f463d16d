"""Attention during generation by an encoder-decoder model (T5, BART, any ``...ForConditionalGeneration``
transformers loads): the encoder reads the source once, the decoder writes one token per step, and
each target token's self- and cross-attention rows are kept as they were computed at the step that
processed it.

The result is an ordinary :class:`~attnviz.result.AttentionResult`, laid out as extraction lays out
an encoder-decoder result (:mod:`attnviz.sources.hf`):

- ``tokens``, ``attentions`` ``[layers, heads, S, S]``: the source and the encoder's self-attention;
- ``target_tokens``: the decoder start token, then the generated tokens (``metadata["target_ids"]``
  holds their ids, ``metadata["target_start"]`` the index of the first generated one);
- ``decoder_attentions`` ``[layers, heads, T, T]``, lower-triangular: row t is target token t's
  self-attention over target tokens 0..t;
- ``cross_attentions`` ``[layers, heads, T, S]``: row t is target token t's attention over the source.

It runs on transformers (``generate(output_attentions=True, return_dict_in_generate=True)``): row t
of both comes from the step that fed token t to the decoder, and the last token's rows from one more
decoder step on the cache, as decoder-only models' last rows come from the step that feeds their last
token back (:func:`attnviz.sources.decoding.decode`).
"""

from __future__ import annotations

from typing import Any

from ..errors import ModelNotFoundError, UsageError
from ..result import AttentionResult
from ..sources.cache import cache_of, with_cache
from ..sources.decoding import sampling_metadata
from ..sources.generated import generated_labels
from ..sources.sampling import Sampling
from .hf import engine_of, load_for_generation, rows_by_step

TARGET_START = 1
"""Index in ``target_tokens`` of the first generated token: the decoder's start token comes before it."""


def generate_seq2seq_hf(ref: str, prompt: str, *, name: str, max_new_tokens: int, sampling: Sampling,
                        stop_at_eos: bool, revision: str | None = None, trust_remote_code: bool = False,
                        local_files_only: bool = False, device: str = "cpu", attention: str = "auto",
                        dtype: str | None = None) -> AttentionResult:
    """Generate with transformers from the encoder-decoder model ``ref`` (a folder or hub id), reading
    ``prompt`` as the source, and keep every decoder self- and cross-attention row (see the module's docs).
    Greedy unless ``sampling.sample``; the same ``sampling.seed`` gives the same tokens. The arguments
    are checked by :func:`attnviz.generation.generate`, which calls this."""
    import torch

    tokenizer, model = load_for_generation(ref, name=name, revision=revision, trust_remote_code=trust_remote_code,
                             local_files_only=local_files_only, device=device, attention=attention,
                                           dtype=dtype)
    encoded = tokenizer(prompt, return_tensors="pt").to(model.device)
    source = {"input_ids": encoded["input_ids"],
              "attention_mask": encoded.get("attention_mask", torch.ones_like(encoded["input_ids"]))}
    _check_lengths(model.config, name, int(source["input_ids"].shape[1]), max_new_tokens)
    if model.generation_config.decoder_start_token_id is None and model.config.decoder_start_token_id is None:
        raise ModelNotFoundError(f"{name} names no decoder start token (decoder_start_token_id in its config), so "
                                 "its decoder cannot begin; give a checkpoint whose config sets it")
    eos = model.generation_config.eos_token_id
    eos_ids = [] if eos is None else eos if isinstance(eos, list) else [eos]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (eos_ids[0] if eos_ids else None)
    extra: dict[str, Any] = {} if stop_at_eos else {"min_new_tokens": max_new_tokens}
    from ..sources.hf_attention import whole_weights

    with torch.random.fork_rng(devices=[]), torch.no_grad(), whole_weights(model):
        if sampling.seed is not None:
            torch.manual_seed(sampling.seed)
        # The encoder runs once, here: generate reuses its output, and so does the last step below.
        encoder = model.get_encoder()(**source, output_attentions=True, return_dict=True)
        out = sampling.generate(model, **source, encoder_outputs=encoder, max_new_tokens=max_new_tokens,
                                output_attentions=True, return_dict_in_generate=True, pad_token_id=pad,
                                stop_at_eos=stop_at_eos, **extra)
        sequence = out.sequences[0]  # the decoder start token, then the generated ones
        # The last token was chosen but never fed back: one more decoder step on the cache gives its rows.
        last = model(encoder_outputs=encoder, attention_mask=source["attention_mask"],
                     decoder_input_ids=sequence[-1:][None], use_cache=True, output_attentions=True,
                     **with_cache(model, cache_of(out)))
    decoder_attentions = rows_by_step([*out.decoder_attentions, last.decoder_attentions], len(sequence), None)
    cross_attentions = rows_by_step([*out.cross_attentions, last.cross_attentions], len(sequence),
                                     int(source["input_ids"].shape[1]))
    source_ids = [int(i) for i in source["input_ids"][0]]
    target_ids = [int(i) for i in sequence]
    special = set(tokenizer.all_special_ids)
    return AttentionResult(
        tokens=generated_labels(tokenizer, source_ids), token_ids=source_ids, special=[i in special for i in source_ids],
        attentions=torch.stack([a[0] for a in encoder.attentions]).float().cpu(), causal=False, model_name=name,
        decoder_attentions=decoder_attentions, cross_attentions=cross_attentions,
        target_tokens=generated_labels(tokenizer, target_ids), target_special=[i in special for i in target_ids],
        metadata={"engine": engine_of(model), "generation": True, "encoder_decoder": True, "target_start": TARGET_START,
                  "target_ids": target_ids, "sampling": sampling_metadata(sampling),
                  "stopped_at_eos": bool(stop_at_eos and target_ids[-1] in eos_ids)},
    )


def _check_lengths(config: Any, name: str, source_length: int, max_new_tokens: int) -> None:
    """Learned positions (BART) end at ``max_position_embeddings``, for the source and the target alike;
    relative positions (T5) have no end, and T5's ``n_positions`` is no limit."""
    if source_length == 0:
        raise UsageError("the tokenizer produced no tokens for the prompt")
    limit = getattr(config, "max_position_embeddings", None)
    if limit is None:
        return
    if source_length > limit:
        raise UsageError(f"the prompt ({source_length} tokens) passes the {limit} positions {name}'s encoder takes; "
                         "give a shorter text")
    if TARGET_START + max_new_tokens > limit:
        raise UsageError(f"[[max_new_tokens={max_new_tokens}]] and the decoder start token pass the {limit} positions "
                         f"{name}'s decoder takes; ask for at most {limit - TARGET_START}")
