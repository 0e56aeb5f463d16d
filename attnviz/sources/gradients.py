"""Gradients of one model output ``y`` with respect to every layer's attention weights, ``∂y/∂A_l``,
for gradient-weighted attention (Chefer, Gur & Wolf 2021; :mod:`attnviz.attribution.relevance`).

``y`` is chosen as :mod:`attnviz.sources.gradient_targets` describes (next-token logit, masked
token's logit, or similarity to a second text). The gradients are taken with
``torch.autograd.grad(y, [A_0 … A_{L−1}])`` on the weight tensors the forward pass itself multiplies
with the values, so the full derivative is there, paths through later layers included:

- the native engine runs its families with ``Capture(grad=True)``: every layer's weights built
  (no fused kernel) and autograd recording from the embedding output on;
- config models of ``type = "transformer"`` run their network with ``grad=True``;
- the transformers engine runs with eager attention and ``output_attentions=True`` under
  ``torch.enable_grad()``: the tensors it returns are the ones its forward used. A logit needs
  the checkpoint's head, so it loads the ...ForCausalLM / ...ForMaskedLM class once, for this
  (:meth:`HFSource.task_model`); extraction is untouched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ..attention import built
from ..errors import InputError, ModelNotFoundError, UsageError
from ..result import AttentionResult
from .gradient_targets import (
    Plan,
    choose_logit,
    cosine,
    describe_logit,
    describe_similarity,
    mask_token,
    mean_pooled,
    plan_target,
    token_label,
)
from .stream import Capture, check_finite

if TYPE_CHECKING:  # pragma: no cover
    from .base import Source
    from .engine import ModelSource
    from .hf import HFSource
    from .native import NativeSource
    from .own import ConfigSource
    from .tokens import TokenInfo


@dataclass
class AttentionGradients:
    """The attentions of one text and the gradients of ``y`` with respect to them."""

    result: AttentionResult  # tokens etc.; attentions [L, H, T, T] float32, detached
    gradients: Tensor  # [L, H, T, T] ∂y/∂A, float32, detached
    target: str  # what y is, in words, e.g. "logit of 'mat' (id 2603), the predicted next token"
    value: float  # y itself


def attention_gradients(source: Source, text: str | None, *, target_token: str | None = None, vs: str | None = None,
                        truncate: bool = False) -> AttentionGradients:
    """``∂y/∂A`` for every layer of ``source`` on ``text``, with ``y`` chosen by the model's kind:

    - causal: the logit of the next token after the text, the likeliest one or ``target_token``
      (a string that is one token; GPT-2's pieces carry their space, so write ``" mat"``, or the piece
      itself, ``"Ġmat"``). ``vs`` is refused;
    - an encoder with a masked-language-model head: the logit at the text's first mask token, the
      likeliest token there or ``target_token``;
    - an encoder given ``vs`` (required without such a head): the cosine similarity of the text's
      mean-pooled last hidden states with those of ``vs`` (run without gradients).

    Sources that cannot run backwards (saved results, matrices configs, encoder-decoder models) are
    a :class:`~attnviz.errors.UsageError` saying so.
    """
    from .hf import HFSource
    from .native import NativeSource
    from .own import ConfigSource

    if vs is not None and isinstance(source, (NativeSource, HFSource, ConfigSource)):
        _check_second_text(source, vs, truncate)
    if isinstance(source, NativeSource):
        return _native(source, text, target_token, vs, truncate)
    if isinstance(source, HFSource):
        return _hf(source, text, target_token, vs, truncate)
    if isinstance(source, ConfigSource):
        return _config(source, text, target_token, vs, truncate)
    if source.engine == "saved":
        raise UsageError(f"{source.name} is a saved result: it holds attention weights but not the model, and "
                         "gradients need the model run again; give the model it was computed with")
    raise UsageError(f"gradients need a model attnviz runs (a checkpoint, or a transformer config model); "
                     f"{source.name} is {source.kind_text()}")


def _check_second_text(source: Any, vs: str, truncate: bool) -> None:
    """Encode ``vs`` first, so that an empty or too long second text is named as such, not as TEXT."""
    try:
        if hasattr(source, "encode"):
            source.encode(vs, truncate=truncate)
        else:
            source.tokenize(vs, truncate=truncate)
    except InputError as exc:
        raise InputError(f"[[vs]]: {exc.template}") from None


def _finish(result: AttentionResult, weights: list[Tensor], y: Tensor, target: str) -> AttentionGradients:
    """Differentiate ``y`` with respect to ``weights`` (each ``[1, H, T, T]``) and package the lot."""
    for layer, w in enumerate(weights):
        check_finite(w.detach(), layer, result.model_name)
    grads = torch.autograd.grad(y, weights, allow_unused=True)
    gradients = torch.stack([torch.zeros_like(w[0]) if g is None else g[0] for w, g in zip(weights, grads, strict=True)])
    result.attentions = torch.stack([w[0] for w in weights]).detach().float().cpu()
    result.metadata["gradient_target"] = target
    return AttentionGradients(result, gradients.detach().float().cpu(), target, float(y.detach()))


def _result(source: ModelSource, info: TokenInfo) -> AttentionResult:
    """The result of a gradient run, laid out as an extraction's (its attentions set by :func:`_finish`)."""
    return AttentionResult(tokens=info.labels, token_ids=info.ids, special=info.special, word_ids=info.word_ids,
                           segment_ids=info.segment_ids, attentions=torch.zeros(0, 0, len(info.ids), len(info.ids)),
                           causal=source.causal, model_name=source.name,
                           metadata={"engine": source.engine, "family": source.family, "device": source.device})


def _encode(source: ModelSource, text: str | None, truncate: bool) -> TokenInfo:
    info = source.encode(text or "", truncate=truncate)  # an empty text: the error an extraction gives
    if source.vocab_rows is not None and max(info.ids) >= source.vocab_rows:
        raise ModelNotFoundError(f"{source.name}: the tokenizer gives token id {max(info.ids)} but the model's "
                                 f"embedding has {source.vocab_rows} rows; its tokenizer and weights do not belong together")
    return info


# --- the native engine -------------------------------------------------------------------------------


def _native_run(source: NativeSource, info: TokenInfo, *, grad: bool) -> tuple[list[Tensor], Tensor]:
    """Every layer's weights ``[1, H, T, T]`` (recorded by autograd when ``grad``; none built otherwise)
    and the last layer's output ``[1, T, d]``."""
    dev = torch.device(source.device)
    ids = torch.tensor([info.ids], device=dev)
    types = torch.tensor([info.segment_ids], device=dev)
    capture = Capture(layers=None if grad else frozenset(), grad=grad)
    steps = source.model.run(ids, torch.ones_like(ids), types, source.n_layers, capture)
    weights: list[Tensor] = []
    while True:
        try:
            out = next(steps)
        except StopIteration as stop:
            return weights, stop.value
        if grad:
            weights.append(built(out.weights))
        del out


def _native(source: NativeSource, text: str | None, target_token: str | None, vs: str | None,
            truncate: bool) -> AttentionGradients:
    info = _encode(source, text, truncate)
    read_head = getattr(source.model, "masked_lm_head", None)  # encoder families with one (BERT)
    head = None if source.causal or vs is not None or read_head is None else read_head(source.weights)
    if head is not None:
        head = head.to(source.device)
    plan = plan_target(name=source.name, causal=source.causal, ids=info.ids, tokenizer=source.tokenizer,
                       mlm=head is not None, target_token=target_token, vs=vs, mask=mask_token(source.tokenizer))
    if plan.kind == "next":
        try:
            norm, matrix = source.model.language_model_head(source.weights)
        except ModelNotFoundError:
            raise UsageError(f"{source.name} has no language-model head (lm_head.weight) and does not tie it to its "
                             "embedding, so there is no next-token logit to take gradients of; give the checkpoint "
                             "of a ...ForCausalLM model") from None
        norm, matrix = norm.to(source.device), matrix.to(source.device)
        head = lambda hidden: norm(hidden) @ matrix.T  # noqa: E731
    weights, hidden = _native_run(source, info, grad=True)
    with torch.enable_grad():
        if plan.kind == "similarity":
            other = _native_run(source, _encode(source, vs, truncate), grad=False)[1]
            y = cosine(mean_pooled(hidden[0]), mean_pooled(other[0]).detach())
            target = describe_similarity(vs or "")
        else:
            assert head is not None  # a token's logit is planned only where a head reads it (mlm, or next's)
            y, target = _logit(head(hidden[0, plan.position]), plan, source.tokenizer)
    return _finish(_result(source, info), weights, y, target)


def _logit(logits: Tensor, plan: Plan, tokenizer: Any) -> tuple[Tensor, str]:
    y, token, predicted = choose_logit(logits, plan)
    return y, describe_logit(plan, token, predicted, token_label(tokenizer))


# --- the transformers engine ----------------------------------------------------------------------------


def _hf(source: HFSource, text: str | None, target_token: str | None, vs: str | None,
        truncate: bool) -> AttentionGradients:
    if source.encoder_decoder:
        raise UsageError(f"{source.name} is an encoder-decoder model; gradient-weighted attention is implemented "
                         "for encoders and decoders alone")
    info = _encode(source, text, truncate)
    causal, mlm = source.causal, None
    if not causal and vs is None:
        mlm = source.task_model("masked-lm") is not None
    plan = plan_target(name=source.name, causal=causal, ids=info.ids, tokenizer=source.tokenizer, mlm=mlm,
                       target_token=target_token, vs=vs, mask=mask_token(source.tokenizer))
    if plan.kind == "similarity":
        model = source.model
    else:
        model = source.task_model("causal-lm" if causal else "masked-lm")
        if model is None:
            raise UsageError(f"{source.name}'s checkpoint has no language-model head (transformers would make one "
                             "up at random), so there is no next-token logit to take gradients of; give the "
                             "checkpoint of a ...ForCausalLM model")
    # The fused engine's output does not depend on its weights as a tensor autograd sees: eager for this run.
    with torch.enable_grad(), source.eager_attention():
        out = model(**_hf_inputs(source, info), output_attentions=True)
        weights = list(out.attentions)
        if plan.kind == "similarity":
            with torch.no_grad():
                other = source.model(**_hf_inputs(source, _encode(source, vs, truncate))).last_hidden_state
            y = cosine(mean_pooled(out.last_hidden_state[0]), mean_pooled(other[0]))
            target = describe_similarity(vs or "")
        else:
            y, target = _logit(out.logits[0, plan.position], plan, source.tokenizer)
    return _finish(_result(source, info), weights, y, target)


def _hf_inputs(source: HFSource, info: TokenInfo) -> dict[str, Tensor]:
    dev = source.model.device
    ids = torch.tensor([info.ids], device=dev)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if source.token_types:
        inputs["token_type_ids"] = torch.tensor([info.segment_ids], device=dev)
    return inputs


# --- config models --------------------------------------------------------------------------------------


def _config(source: ConfigSource, text: str | None, target_token: str | None, vs: str | None,
            truncate: bool) -> AttentionGradients:
    from ..config import TransformerConfig

    model, cfg = source.network, source.cfg
    if source.seq2seq_network is not None:
        raise UsageError(f"{source.name} is an encoder-decoder config model; gradient-weighted attention is "
                         "implemented for encoders and decoders alone (a config without decoder_layers)")
    if model is None or not isinstance(cfg, TransformerConfig):
        raise UsageError(f"{source.name} is a matrices config: one layer on a fixed input, with no output to take "
                         "gradients of; use a transformer config such as sample_configs/causal.toml")
    if source.causal and vs is not None:
        raise UsageError(f"[[vs]] compares the sentence embeddings of an encoder; {source.name} is causal, so y is "
                         "the logit of the next token: leave out [[vs]]")
    if not source.causal and vs is None:
        raise UsageError(f"{source.name} is an encoder config model (no head), so y is the cosine similarity of its "
                         "mean-pooled output with a second text: give that text with [[vs]]")
    if vs is not None and target_token is not None:
        raise UsageError("[[target_token]] picks a logit, and with [[vs]] y is a similarity of two texts; give one of them")
    words, wanted = _config_words(source, cfg, target_token) if source.causal else ([], None)
    tokens, ids = source.tokenize(text, truncate=truncate)
    streams: list[Tensor] = []
    captured = model(torch.tensor([ids]), causal=source.causal, streams=streams, grad=True)
    weights = [out.weights for _, out in captured]
    hidden = streams[-1][0]  # (T, d): the last block's output
    with torch.enable_grad():
        if source.causal:
            from .words import word_id

            logits = model.next_token_logits(hidden[-1], torch.tensor([word_id(w, cfg.vocab_size) for w in words]))
            predicted = int(logits[: len(cfg.vocab)].detach().argmax()) if cfg.vocab else 0
            chosen = predicted if wanted is None else wanted
            y = logits[chosen]
            target = (f"logit of {words[chosen]!r}, the predicted next token" if wanted is None else
                      f"logit of {words[chosen]!r} as the next token, the token asked for"
                      + (f" (the model predicts {words[predicted]!r})" if cfg.vocab else ""))
        else:
            other: list[Tensor] = []
            model(torch.tensor([source.tokenize(vs, truncate=truncate)[1]]), causal=False, streams=other)
            y = cosine(mean_pooled(hidden), mean_pooled(other[-1][0]))
            target = describe_similarity(vs or "")
    result = AttentionResult(tokens=tokens, token_ids=ids, attentions=torch.zeros(0, 0, len(ids), len(ids)),
                             causal=source.causal, model_name=source.name,
                             metadata={"engine": "config", "config_type": type(cfg).__name__})
    return _finish(result, weights, y, target)


def _config_words(source: ConfigSource, cfg: Any, target_token: str | None) -> tuple[list[str], int | None]:
    """The words a causal config model scores (its ``vocab``, then ``target_token`` if not among them)
    and the index of ``target_token`` in them (None: the likeliest word of the vocab)."""
    from .words import word_tokens

    words = list(cfg.vocab)
    if target_token is None:
        if not words:
            raise UsageError(f"{source.name} lists no words to predict: name the next token with [[target_token]], "
                             "or list its words with vocab = [...] in [model] (as sample_configs/causal.toml does)")
        return words, None
    found = word_tokens(target_token)
    if len(found) != 1:
        raise UsageError(f"[[target_token={target_token!r}]] is {len(found)} words for {source.name} "
                         f"({', '.join(repr(w) for w in found)}); give one word")
    if found[0] not in words:
        words.append(found[0])
    return words, words.index(found[0])


__all__ = ["AttentionGradients", "attention_gradients"]
