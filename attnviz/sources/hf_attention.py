"""attnviz's attention function in transformers' registry: each layer's output at the fused kernel's
speed, and its weights made by attnviz from the queries and keys transformers hands over.

transformers routes attention through ``AttentionInterface`` (``ALL_ATTENTION_FUNCTIONS``): a model
loaded with ``attn_implementation="attnviz"`` calls :func:`attention` in every attention layer with its
queries and keys after rotary embeddings and q/k norms, the scaling, soft-capping, sinks and
key/value-head layout the model uses, and the mask. Masks come from ``AttentionMaskInterface``
(:func:`mask`): transformers' own ``sdpa_mask`` for short inputs, and for long ones the mask
*function* it describes (causal, a sliding window per layer, chunks, padding), evaluated a block of
rows at a time (:class:`~attnviz.attention.described.FunctionMask`), never a ``[T, T]`` tensor.

What :func:`attention` returns as the layer's weights depends on the thread's mode (:func:`weights_mode`):
nothing (a plain forward: the speed of SDPA), the whole ``[B, H, Tq, Tk]`` in float32 (what
``output_attentions=True`` collects), or :class:`~attnviz.attention.rows.AttentionRows` (the queries
and keys, from which any block of rows is computed on demand). The output goes through torch's
``scaled_dot_product_attention`` (transformers' ``sdpa_attention_forward``) except where that kernel
cannot compute it (soft-capping, learned sinks) or the mask is described; then it is computed
exactly, a block of rows at a time.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import Tensor, nn

from ..attention.described import FunctionMask, TensorMask
from ..attention.rows import AttentionRows, RowMask, rows_per_block

if TYPE_CHECKING:  # pragma: no cover
    from transformers import PreTrainedModel

NAME = "attnviz"
Mode = Literal["none", "whole", "rows"]

# From this many mask entries (batch × queries × keys) on, a mask is described, not built (64 MiB of booleans).
DESCRIBE_FROM = 64 * 2**20

_state = threading.local()
_fused: weakref.WeakSet[nn.Module] = weakref.WeakSet()  # models switched by :func:`switch_to_fused`


def is_fused(model: nn.Module) -> bool:
    """Whether ``model`` runs on attnviz's attention function (:func:`switch_to_fused` switched it)."""
    return model in _fused


def mark_fused(model: nn.Module) -> None:
    """``model`` runs on attnviz's attention function too: a language model whose base model
    :func:`switch_to_fused` switched (the same layers, the same config)."""
    _fused.add(model)


def whole_weights(model: nn.Module) -> Any:
    """Where ``output_attentions=True`` is asked of ``model``: the fused engine's whole weights (a model on
    eager attention returns its own)."""
    from contextlib import nullcontext

    return weights_mode("whole") if is_fused(model) else nullcontext()


def current_mode() -> Mode:
    return getattr(_state, "mode", "none")


@contextmanager
def weights_mode(mode: Mode) -> Iterator[None]:
    """In this thread, what :func:`attention` returns as weights: nothing, whole, or as rows."""
    before = current_mode()
    _state.mode = mode
    try:
        yield
    finally:
        _state.mode = before


class HeadGates:
    """Gates ξ on each head's output, per text: ``output[b, :, h] · ξ[b, layer, h] + (1 − ξ[b, layer, h]) · m[layer, h]``
    (Michel et al. 2019's head gate; ``m`` the head's mean output for mean ablation, else 0). ``collect`` sums
    each head's output over the real tokens (``mask`` ``[B, T]``) instead, for those means. The layers are
    counted in the order the model calls its attention (one call per layer in encoders and decoders)."""

    def __init__(self, gates: Tensor | None, means: Tensor | None = None, mask: Tensor | None = None,
                 collect: bool = False) -> None:
        self.gates, self.means, self.mask, self.collect = gates, means, mask, collect
        self.layer = 0
        self.sums: list[Tensor] = []
        self.count = 0.0

    def apply(self, output: Tensor) -> Tensor:
        layer, self.layer = self.layer, self.layer + 1
        if self.collect:
            assert self.mask is not None  # collecting sums over the real tokens, which the mask says
            real = self.mask[:, : output.shape[1], None, None].to(output.dtype)
            self.sums.append((output * real).sum(dim=(0, 1)).detach())
            self.count = float(real.sum())
            return output
        if self.gates is None:
            return output
        gate = self.gates[:, layer, :][:, None, :, None].to(output.dtype)
        if self.means is None:
            return output * gate
        return output * gate + (1 - gate) * self.means[layer][None, None].to(output.dtype)


@contextmanager
def head_gates(gates: HeadGates) -> Iterator[HeadGates]:
    """In this thread, every attention layer's output passes through ``gates`` (see :class:`HeadGates`)."""
    before = getattr(_state, "gates", None)
    _state.gates = gates
    try:
        yield gates
    finally:
        _state.gates = before


def register() -> None:
    """Add ``"attnviz"`` to transformers' attention and mask registries (once; idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(NAME, attention)
    AttentionMaskInterface.register(NAME, mask)


def switch_to_fused(model: PreTrainedModel, inputs: dict[str, Tensor], *, family: str, encoder_decoder: bool,
                    alone: bool = True, folder: str | None = None) -> str | None:
    """Switch ``model`` (loaded with eager attention) to attnviz's attention function if its weights equal
    eager attention's on ``inputs`` (a short padded batch) in every layer (to 1e-4 in float32, 5e-2 in half
    precision); None when switched, else
    why not (the model is left on eager attention). ``alone`` False leaves out the unpadded run: a language
    model whose modules say they are not causal (PaliGemma's, ``use_bidirectional_attention``) is causal there
    only by a mask its vision-language model always passes, and transformers' own SDPA reads it as
    bidirectional without one (eager as causal). ``folder``: the folder ``model`` was loaded from whole, as it is
    there; given, the verdict is kept for the process (:func:`_probe_key`)."""
    register()
    key = _probe_key(model, inputs, folder, family=family, encoder_decoder=encoder_decoder, alone=alone)
    if key is not None and key in _VERDICTS:  # this checkpoint, as loaded, probed before in this process
        return _switched(model, _VERDICTS[key])
    # The padded batch, its first text alone and unpadded (transformers then passes no mask, and the module's
    # own ``is_causal`` decides), and the batch again with its masks described as they are for long texts.
    single = {name: value[:1, : int(inputs["attention_mask"][0].sum())] if name != "decoder_input_ids" else value[:1]
             for name, value in inputs.items()}
    runs = [(inputs, False), *([(single, False)] if alone else []), (inputs, True)]
    with torch.no_grad():
        references = [_all_attentions(model, batch, encoder_decoder) for batch, _ in runs]
        model.set_attn_implementation(NAME)  # a family outside the registry ignores it
        reason = None
        for (batch, described), reference in zip(runs, references, strict=True):
            reason = _compare(model, batch, reference, family=family, encoder_decoder=encoder_decoder,
                              described=described)
            if reason is not None:
                break
    if key is not None:
        _VERDICTS[key] = reason
    return _switched(model, reason)


def _switched(model: PreTrainedModel, reason: str | None) -> str | None:
    """``model`` on attnviz's attention where the probe found none (``reason`` None), else on eager's."""
    if reason is not None:
        model.set_attn_implementation("eager")
        _fused.discard(model)
    else:
        model.set_attn_implementation(NAME)
        _fused.add(model)
    return reason


_VERDICTS: dict[tuple[Any, ...], str | None] = {}
"""Each probe's verdict in this process, by what decides it (:func:`_probe_key`): a checkpoint loaded again (the
Python API's ``load`` in a loop, a server's second model, the test suite) is not probed again."""


def _probe_key(model: nn.Module, inputs: dict[str, Tensor], where: str | None, **how: Any) -> tuple[Any, ...] | None:
    """What decides a probe's verdict, where it can be told without running the model: the folder the model was
    loaded from whole (``where``) and its files' sizes and times, the class, its config as it is now, the precision,
    the device and the probe's shapes. None (probe again) without a folder (a hub id, a model built in memory, a
    language model inside a vision-language one) or for a model spread over devices (``device_map``)."""
    from pathlib import Path

    from .files import folder_stamp

    config = getattr(model, "config", None)
    parameter = next(model.parameters(), None)
    if where is None or config is None or parameter is None or getattr(model, "hf_device_map", None):
        return None
    folder = Path(where)
    files = folder_stamp(folder)
    try:
        described = config.to_json_string()
    except (TypeError, ValueError):  # a setting added after loading that JSON cannot hold
        return None
    if files is None:  # not a folder (a hub id)
        return None
    shapes = tuple((name, tuple(value.shape)) for name, value in sorted(inputs.items()))
    return (str(folder.resolve()), files, type(model).__qualname__, described, parameter.dtype, str(parameter.device),
            shapes, tuple(sorted(how.items())))


def _compare(model: nn.Module, inputs: dict[str, Tensor], reference: list[Tensor], *, family: str,
             encoder_decoder: bool, described: bool) -> str | None:
    """Why the model's weights through attnviz's function differ from ``reference`` (eager's), or None."""
    where = " with its masks described, as for a long text" if described else ""
    _state.describe_all = described  # this thread's masks described whatever their size (see :func:`mask`)
    try:
        _state.calls = 0
        with weights_mode("whole"):
            got = _all_attentions(model, inputs, encoder_decoder)
    except Exception as exc:  # a family that does not route attention through the registry, or handles its mask
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        return f"{family} does not route its attention through transformers' registry{where} ({first})"
    finally:
        _state.describe_all = False
    if getattr(_state, "calls", 0) == 0:
        return f"{family} does not route its attention through transformers' registry (it computes its own)"
    error = _largest_difference(reference, got, inputs.get("attention_mask"))
    if error is None or error > _tolerance(model):
        return (f"{family}'s attention through transformers' registry differs from eager on a probe{where} "
                f"({'other layers' if error is None else f'by {error:.1e}'})")
    return None


def _tolerance(model: nn.Module) -> float:
    """How far the probe's weights may be from eager's: float rounding in float32; in half precision eager
    rounds its scores to 8 bits of mantissa (bfloat16) before the softmax, and attnviz does not."""
    return 1e-4 if next(model.parameters()).dtype == torch.float32 else 5e-2


def _all_attentions(model: nn.Module, inputs: dict[str, Tensor], encoder_decoder: bool) -> list[Tensor]:
    out = model(**inputs, output_attentions=True)
    names = ("encoder_attentions", "decoder_attentions", "cross_attentions") if encoder_decoder else ("attentions",)
    return [a for name in names for a in (getattr(out, name, None) or ())]


def _largest_difference(reference: list[Tensor], got: list[Tensor], mask: Tensor | None) -> float | None:
    """The largest difference between two runs' weights over real tokens' rows and keys; None when they
    do not have the same layers."""
    if len(reference) != len(got) or not reference:
        return None
    worst = 0.0
    for want, have in zip(reference, got, strict=True):
        if not isinstance(have, Tensor) or have.shape != want.shape:
            return None
        want, have = want.float(), have.float()
        if mask is not None and want.shape[-2] == want.shape[-1] == mask.shape[-1]:
            real = mask.bool()[:, None, :, None] & mask.bool()[:, None, None, :]
            want, have = want.masked_fill(~real, 0.0), have.masked_fill(~real, 0.0)
        worst = max(worst, float((want - have).abs().max()))
    return worst


def probe_inputs(vocab: int, device: torch.device | str, *, encoder_decoder: bool = False) -> dict[str, Tensor]:
    """Two texts of 6 and 4 tokens, the second padded: enough to check padding and causal masks."""
    ids = (torch.arange(12, device=device).view(2, 6) * 7 + 5) % vocab
    mask = torch.ones_like(ids)
    mask[1, 4:] = 0
    inputs = {"input_ids": ids, "attention_mask": mask}
    if encoder_decoder:
        inputs["decoder_input_ids"] = ids[:, :3]
    return inputs


def mask(batch_size: int, q_length: int, kv_length: int, q_offset: int = 0, kv_offset: int = 0,
         mask_function: Any = None, attention_mask: Tensor | None = None, local_size: int | None = None,
         allow_is_causal_skip: bool = True, allow_is_bidirectional_skip: bool = False, use_vmap: bool = False,
         device: torch.device | str = "cpu", **kwargs: Any) -> Tensor | FunctionMask | None:
    """transformers' ``sdpa_mask`` for short inputs (a boolean ``[B, 1, Tq, Tk]``, or None where the
    attention is plainly causal or full); a :class:`FunctionMask` from :data:`DESCRIBE_FROM` entries on."""
    from transformers.masking_utils import (
        _ignore_bidirectional_mask_sdpa,
        _ignore_causal_mask_sdpa,
        causal_mask_function,
        prepare_padding_mask,
        sdpa_mask,
    )

    function = causal_mask_function if mask_function is None else mask_function
    if batch_size * q_length * kv_length < DESCRIBE_FROM and not getattr(_state, "describe_all", False):
        return sdpa_mask(batch_size=batch_size, q_length=q_length, kv_length=kv_length, q_offset=q_offset,
                         kv_offset=kv_offset, mask_function=function, attention_mask=attention_mask,
                         local_size=local_size, allow_is_causal_skip=allow_is_causal_skip,
                         allow_is_bidirectional_skip=allow_is_bidirectional_skip, use_vmap=use_vmap, device=device)
    padding = prepare_padding_mask(attention_mask, kv_length, kv_offset)
    if allow_is_causal_skip and _ignore_causal_mask_sdpa(padding, q_length, kv_length, q_offset, kv_offset, local_size):
        return None
    if allow_is_bidirectional_skip and _ignore_bidirectional_mask_sdpa(padding, kv_length, local_size):
        return None
    # transformers types a mask function (batch, head, q, kv) -> bool; FunctionMask calls it on index tensors
    return FunctionMask(batch_size, q_length, kv_length, int(q_offset), int(kv_offset),
                        function,  # type: ignore[arg-type]  # transformers' stub: mask functions return bool
                        padding, device, use_vmap)


def attention(module: nn.Module, query: Tensor, key: Tensor, value: Tensor, attention_mask: Any,
              dropout: float = 0.0, scaling: float | None = None, is_causal: bool | None = None,
              position_bias: Tensor | None = None, softcap: float | None = None, s_aux: Tensor | None = None,
              **kwargs: Any) -> tuple[Tensor, Tensor | AttentionRows | None]:
    """One attention layer: ``(output [B, Tq, H, dv], weights)`` as transformers' attention functions return
    them; the weights as :func:`current_mode` asks (see the module's docstring)."""
    _state.calls = getattr(_state, "calls", 0) + 1
    t_q, t_k = query.shape[-2], key.shape[-2]
    causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal", True))
    bias = position_bias
    if isinstance(attention_mask, Tensor) and attention_mask.shape[-2] == 1 < t_q:
        attention_mask = attention_mask.expand(*attention_mask.shape[:-2], t_q, attention_mask.shape[-1])  # a view
    if bias is not None and bias.shape[-2] == 1 < t_q:
        bias = bias.expand(*bias.shape[:-2], t_q, bias.shape[-1])
    described: Any
    if isinstance(attention_mask, FunctionMask):
        attention_mask = described = attention_mask.on(query.device)  # a layer on another device (device_map)
    elif isinstance(attention_mask, Tensor) and attention_mask.dtype == torch.bool:
        described = TensorMask(attention_mask)
    elif isinstance(attention_mask, Tensor):  # an additive float mask a model built itself
        described = TensorMask(attention_mask > torch.finfo(attention_mask.dtype).min / 2)
        bias = attention_mask if bias is None else bias + attention_mask
    else:
        described = RowMask(t_q, t_k, start=0, device=query.device) if causal and t_q > 1 else None
    rows = AttentionRows(query, key, described, scaling, softcap=softcap, bias=bias, sinks=s_aux, values=value)
    if softcap is not None or s_aux is not None:
        output = _exact_output(rows, value)
    elif isinstance(attention_mask, FunctionMask):
        output = _blocked_output(rows, attention_mask, value, position_bias)
    else:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        kwargs.pop("output_attentions", None)  # weights are this function's business (it warns of them)
        output = sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                        is_causal=is_causal, position_bias=position_bias, **kwargs)[0]
    gates = getattr(_state, "gates", None)
    if gates is not None:  # head gates (importance, ablation): each head's output scaled before W_O
        output = gates.apply(output)
    mode = current_mode()
    if mode == "rows":
        return output, rows
    if mode == "whole":
        return output, torch.stack([rows.dense(b, device=query.device) for b in range(query.shape[0])])
    return output, None


def _blocked_output(rows: AttentionRows, described: FunctionMask, value: Tensor, bias: Tensor | None) -> Tensor:
    """``softmax(q kᵀ · scale + bias) v`` through torch's fused kernel a block of query rows at a time, each
    block over the keys its rows may see with its rows' mask (never a ``[Tq, Tk]`` mask), ``[B, Tq, H, dv]``.
    A row that may see no key gives 0."""
    query, key = rows.queries, rows.keys
    groups = query.shape[1] // key.shape[1]
    out = torch.empty(*query.shape[:-1], value.shape[-1], dtype=value.dtype, device=value.device)
    step = rows_per_block(query.shape[1], key.shape[-2], query.shape[0])
    for first in range(0, query.shape[-2], step):
        stop = min(query.shape[-2], first + step)
        width = max(1, described.visible(stop, first))
        allowed = described.rows(first, stop, width)
        mask: Tensor = allowed
        if bias is not None:
            mask = bias[..., first:stop, :width].to(query.dtype).masked_fill(~allowed, float("-inf"))
        block = torch.nn.functional.scaled_dot_product_attention(
            query[..., first:stop, :], key[..., :width, :], value[..., :width, :], attn_mask=mask, scale=rows.scale,
            enable_gqa=groups > 1)
        seen = allowed.any(-1, keepdim=True)
        out[..., first:stop, :] = block if bool(seen.all()) else block.masked_fill(~seen, 0.0)
    return out.transpose(1, 2).contiguous()


def _exact_output(rows: AttentionRows, value: Tensor) -> Tensor:
    """``weights · v`` a block of query rows at a time, ``[B, Tq, H, dv]`` (transformers' layout), in the
    values' dtype; the weights are :class:`AttentionRows`' (float32), so soft-capping, sinks and any mask hold."""
    batch, heads, t_q = rows.queries.shape[0], rows.n_heads, rows.queries.shape[-2]
    kv_heads, dv = value.shape[1], value.shape[-1]
    groups = heads // kv_heads
    out = torch.empty(batch, heads, t_q, dv, dtype=value.dtype, device=value.device)
    step = rows_per_block(heads, value.shape[-2])
    for b in range(batch):
        for first in range(0, t_q, step):
            stop = min(t_q, first + step)
            weights = rows.block(b, first, stop)  # (H, r, w)
            width = weights.shape[-1]
            grouped = weights.reshape(kv_heads, groups * (stop - first), width).to(value.dtype)
            out[b, :, first:stop] = (grouped @ value[b, :, :width]).view(heads, stop - first, dv)
    return out.transpose(1, 2).contiguous()
