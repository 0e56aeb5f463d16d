"""Which heads matter: Michel et al. 2019's gradient importance, and the loss change when a head is removed.

Michel, Levy and Neubig ("Are Sixteen Heads Really Better than One?", 2019) put a gate ξ_h on each head's
output (before the output projection) and score a head by the expected sensitivity of the loss to it,
``I_h = E_x |∂L(x)/∂ξ_h|`` at ξ = 1, normalised per layer by the ℓ2 norm of that layer's scores (their
§4.1). Here the gates sit in attnviz's attention function in transformers' registry (the fused engine,
:class:`~attnviz.sources.hf_attention.HeadGates`), one per text, so a padded batch gives every text's
own gradient in one backward pass. ``L`` is the model's own loss: the next token for a causal language
model, the masked tokens for a masked language model (15% of each text's tokens, at least one, chosen
with a fixed seed), and for a sentence encoder without such a head ``1 − cos`` of the text's mean-pooled
embedding with that of a second text (``vs``).

Ablation removes one head at a time and reports the loss change, averaged over the texts: ``zero`` sets
the head's output to 0 (ξ_h = 0), ``mean`` to its mean output over every token of the texts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

from ..errors import InputError, UsageError

MASK_RATE = 0.15
BATCH = 8


@dataclass
class HeadImportance:
    """Per head ``[layers, heads]``: ``gradient`` (Michel's I_h, normalised per layer), ``raw`` (before that),
    ``ablation`` (mean loss change with the head removed; None unless asked) and the mean ``loss``."""

    model_name: str
    objective: str
    raw: Tensor
    gradient: Tensor
    loss: float
    n_texts: int
    ablation: Tensor | None = None
    ablate: str | None = None
    per_text: Tensor | None = None  # [texts, layers, heads]: each text's |dL/dξ_h| (``raw`` is their mean)
    ablation_per_text: Tensor | None = None  # [texts, layers, heads]: each text's loss change
    vs: str | None = None  # the text a sentence encoder's similarity loss compares with

    def write_parquet(self, path: Any, layers: list[int] | None = None) -> Any:
        """One row per text × layer × head: ``text_index``, ``layer``, ``head``, ``importance`` (that text's
        |dL/dξ_h|, before the per-layer normalisation, which a reader applies to the means) and, with an
        ablation, ``ablation`` (that text's loss change); joins ``heads.parquet`` on the first three."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        assert self.per_text is not None
        texts, n_layers, n_heads = self.per_text.shape
        numbers = torch.tensor(layers if layers is not None else list(range(n_layers)))
        columns = {
            "text_index": torch.arange(texts).repeat_interleave(n_layers * n_heads).numpy(),
            "layer": numbers.repeat_interleave(n_heads).repeat(texts).numpy(),
            "head": torch.arange(n_heads).repeat(texts * n_layers).numpy(),
            "importance": self.per_text.flatten().numpy(),
        }
        if self.ablation_per_text is not None:
            columns["ablation"] = self.ablation_per_text.flatten().numpy()
        table = pa.table(columns).replace_schema_metadata({"objective": self.objective, "ablate": self.ablate or "",
                                                           "model": self.model_name, "vs": self.vs or ""})
        pq.write_table(table, path)
        return path

    def scaled_per_text(self) -> Tensor:
        """Each text's importance ``[texts, layers, heads]`` scaled as ``gradient`` is (by the ℓ2 norm of the layer's
        mean importances), so its mean over the texts is ``gradient``."""
        assert self.per_text is not None
        norms = self.raw.norm(dim=1, keepdim=True)
        return self.per_text / torch.where(norms > 0, norms, 1.0)

    def columns(self) -> dict[str, Tensor]:
        """The heads table's columns: ``importance`` and, with an ablation, ``ablation``."""
        return {"importance": self.gradient, **({"ablation": self.ablation} if self.ablation is not None else {})}


def head_importance(source: Any, texts: Sequence[str], *, ablate: Literal["zero", "mean"] | None = None,
                    vs: str | None = None, truncate: bool = False, batch_size: int = BATCH) -> HeadImportance:
    """Michel et al.'s importance of every head of ``source`` (a model on the fused engine) over ``texts``,
    and with ``ablate`` the loss change when each head is removed (see the module)."""
    from ..sources.hf_attention import HeadGates, head_gates

    if not texts:
        raise InputError("no texts given; importance is an average over the texts given")
    if ablate not in (None, "zero", "mean"):
        raise UsageError(f"[[ablate={ablate!r}]] is unknown; use zero or mean")
    model, objective, loss_of = _objective(source, vs, truncate)
    batches = [list(texts[i : i + batch_size]) for i in range(0, len(texts), batch_size)]
    encoded = [_batch(source, batch, truncate) for batch in batches]
    layers, heads = _shape(model)
    device = next(model.parameters()).device
    per_text: list[Tensor] = []
    losses_of: list[Tensor] = []
    for inputs, mask in encoded:
        gates = torch.ones(inputs["input_ids"].shape[0], layers, heads, device=device, requires_grad=True)
        with torch.enable_grad(), head_gates(HeadGates(gates)) as used:
            losses = loss_of(model, inputs, mask)
            if used.layer != layers:
                raise UsageError(f"{source.name} calls its attention {used.layer} times a forward, not once per layer "
                                 f"({layers}); head importance takes encoders and decoders, not encoder-decoders")
            (grad,) = torch.autograd.grad(losses.sum(), gates)
        per_text.append(grad.abs().double().cpu())
        losses_of.append(losses.detach().double().cpu())
    n = len(texts)
    each = torch.cat(per_text)
    base = torch.cat(losses_of)
    raw = each.mean(0)
    total = float(base.sum())
    norms = raw.norm(dim=1, keepdim=True)
    gradient = torch.where(norms > 0, raw / torch.where(norms > 0, norms, 1.0), 0.0)
    result = HeadImportance(source.name, objective, raw.float(), gradient.float(), total / n, n,
                            per_text=each.float(), vs=vs)
    if ablate is not None:
        means = _mean_outputs(model, encoded, loss_of, layers, heads) if ablate == "mean" else None
        changes = _ablation(model, encoded, loss_of, layers, heads, means, base)
        result.ablation, result.ablation_per_text, result.ablate = changes.mean(0).float(), changes.float(), ablate
    return result


def _ablation(model: Any, encoded: list[tuple[dict[str, Tensor], Tensor]], loss_of: Callable[..., Tensor],
              layers: int, heads: int, means: Tensor | None, base: Tensor) -> Tensor:
    """Each text's loss change with each head's output removed (set to 0, or to its mean), one head at a time:
    ``[texts, layers, heads]``."""
    from ..sources.hf_attention import HeadGates, head_gates

    change = torch.zeros(base.shape[0], layers, heads, dtype=torch.float64)
    device = next(model.parameters()).device
    with torch.no_grad():
        for layer in range(layers):
            for head in range(heads):
                first = 0
                for inputs, mask in encoded:
                    size = inputs["input_ids"].shape[0]
                    gates = torch.ones(size, layers, heads, device=device)
                    gates[:, layer, head] = 0.0
                    with head_gates(HeadGates(gates, means)):
                        change[first : first + size, layer, head] = loss_of(model, inputs, mask).double().cpu()
                    first += size
    return change - base[:, None, None]


def _mean_outputs(model: Any, encoded: list[tuple[dict[str, Tensor], Tensor]], loss_of: Callable[..., Tensor],
                  layers: int, heads: int) -> Tensor:
    """Each head's output averaged over every real token of the texts, ``[layers, heads, d_head]``."""
    from ..sources.hf_attention import HeadGates, head_gates

    sums: Tensor | None = None
    count = 0.0
    with torch.no_grad():
        for inputs, mask in encoded:
            with head_gates(HeadGates(None, mask=mask, collect=True)) as seen:
                loss_of(model, inputs, mask)
            batch = torch.stack(seen.sums)  # [layers, heads, d_head]
            sums = batch if sums is None else sums + batch
            count += seen.count
    assert sums is not None  # encoded holds a batch at least (head_importance refuses no texts)
    return sums / max(count, 1.0)


def check_importance(source: Any, vs: str | None) -> str:
    """What loss importance would take on ``source`` (the model loaded and switched, as a run does), or a
    :class:`UsageError` saying why there is none: to ask before any long run."""
    return _objective(source, vs, False)[1]


def _objective(source: Any, vs: str | None, truncate: bool) -> tuple[Any, str, Callable[..., Tensor]]:
    """The model whose loss is differentiated, what the loss is, and a function giving each text's loss."""
    from ..sources.hf_attention import is_fused, probe_inputs, switch_to_fused

    if getattr(source, "engine", None) not in ("fused", "hf") or getattr(source, "encoder_decoder", False):
        raise UsageError(f"head importance needs a transformers checkpoint (it puts gates in attnviz's attention "
                         f"function in transformers' registry); {source.name} is "
                         f"{'an encoder-decoder, not covered' if getattr(source, 'encoder_decoder', False) else 'not one'}")
    if source.causal:
        task, objective = "causal-lm", "next-token cross-entropy (the model's language-model loss)"
    elif vs is None:
        task, objective = "masked-lm", f"masked-token cross-entropy ({MASK_RATE:.0%} of each text's tokens, seeded)"
    else:
        task, objective = None, "1 − cosine similarity of the mean-pooled embedding with VS"
    model = source.model if task is None else source.task_model(task)
    if model is None and task == "masked-lm":
        raise UsageError(f"{source.name} has no masked-language-model head (a sentence encoder): give [[vs]], a text "
                         "to compare each text with, and its loss is 1 − the cosine similarity of their embeddings")
    if model is None:
        raise UsageError(f"{source.name}'s checkpoint has no language-model head, so there is no loss to take "
                         "gradients of; give the checkpoint of a ...ForCausalLM model")
    if not is_fused(model):
        vocab = model.get_input_embeddings().num_embeddings
        reason = switch_to_fused(model, probe_inputs(vocab, model.device), family=source.family, encoder_decoder=False)
        if reason is not None:
            raise UsageError(f"head importance needs attnviz's attention function in transformers' registry: {reason}")
    if task == "causal-lm":
        return model, objective, _next_token_loss
    if task == "masked-lm":
        mask_id = source.hf_tokenizer.mask_token_id
        if mask_id is None:
            raise UsageError(f"{source.name}'s tokenizer has no mask token, so no masked-token loss")
        return model, objective, _masked_loss(mask_id, source.special_ids())
    assert vs is not None  # the similarity objective is the one left: vs was given
    return model, objective, _similarity_loss(source, vs, truncate)


def _next_token_loss(model: Any, inputs: dict[str, Tensor], mask: Tensor) -> Tensor:
    logits = model(**inputs).logits[:, :-1].float()
    targets = inputs["input_ids"][:, 1:].masked_fill(mask[:, 1:] == 0, -100)
    per_token = torch.nn.functional.cross_entropy(logits.transpose(1, 2), targets, reduction="none", ignore_index=-100)
    counted = (targets != -100).sum(1).clamp(min=1)
    return per_token.sum(1) / counted


def _masked_loss(mask_id: int, specials: set[int]) -> Callable[..., Tensor]:
    def loss(model: Any, inputs: dict[str, Tensor], mask: Tensor) -> Tensor:
        ids = inputs["input_ids"]
        generator = torch.Generator().manual_seed(0)
        chosen = torch.zeros_like(ids, dtype=torch.bool)
        for b in range(ids.shape[0]):
            candidates = [i for i in range(ids.shape[1]) if mask[b, i] and int(ids[b, i]) not in specials]
            if not candidates:
                continue
            k = max(1, round(MASK_RATE * len(candidates)))
            picks = torch.randperm(len(candidates), generator=generator)[:k]
            chosen[b, [candidates[int(p)] for p in picks]] = True
        targets = ids.masked_fill(~chosen, -100)
        logits = model(**{**inputs, "input_ids": ids.masked_fill(chosen, mask_id)}).logits.float()
        per_token = torch.nn.functional.cross_entropy(logits.transpose(1, 2), targets, reduction="none",
                                                      ignore_index=-100)
        return per_token.sum(1) / chosen.sum(1).clamp(min=1)
    return loss


def _similarity_loss(source: Any, vs: str, truncate: bool) -> Callable[..., Tensor]:
    other_inputs, other_mask = _batch(source, [vs], truncate)
    with torch.no_grad():
        other = _pooled(source.model(**other_inputs).last_hidden_state, other_mask)[0]

    def loss(model: Any, inputs: dict[str, Tensor], mask: Tensor) -> Tensor:
        embedding = _pooled(model(**inputs).last_hidden_state, mask)
        return 1 - torch.nn.functional.cosine_similarity(embedding, other[None], dim=-1)
    return loss


def _pooled(hidden: Tensor, mask: Tensor) -> Tensor:
    weights = mask[..., None].to(hidden.dtype)
    return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1)


def _batch(source: Any, texts: list[str], truncate: bool) -> tuple[dict[str, Tensor], Tensor]:
    """Texts tokenized and padded on the right, as the engines pad them: the model's inputs and the mask."""
    from ..sources.engine import padded

    ids, mask, types = padded([source.encode(text, truncate=truncate) for text in texts], source.pad_id)
    device = source.model.device
    inputs = {"input_ids": ids.to(device), "attention_mask": mask.to(device)}
    if getattr(source, "token_types", False):
        inputs["token_type_ids"] = types.to(device)
    return inputs, mask.to(device)


def _shape(model: Any) -> tuple[int, int]:
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    layers = getattr(config, "num_hidden_layers", None) or getattr(config, "n_layer", None)
    heads = getattr(config, "num_attention_heads", None) or getattr(config, "n_head", None)
    if not layers or not heads:
        raise UsageError("the model's config names no number of layers or heads")
    return int(layers), int(heads)
