"""A vision-language model's forward, its language model's attention taken a layer at a time: the rows wanted
(every row, or the text's only) kept as each layer computes them, never every layer's ``[H, T, T]`` at once.

Two engines. ``hf``: transformers' eager attention, each layer's weights taken by a forward hook as the layer
returns them (transformers' eager attention returns them whether asked or not), the rows kept, the rest dropped
before the next layer. ``fused`` (the default, as for texts): the language model on attnviz's attention function
(:mod:`attnviz.sources.hf_attention`): its output through torch's fused kernel, its weights computed by attnviz
from the queries and keys it is handed, only for the rows kept; switched only where a probe's weights equal
eager's (:func:`~attnviz.sources.hf_attention.switch_to_fused`), else eager. The vision tower runs as loaded.

With the text's rows only (the rows a picture overlay, the heads' statistics and an answer's rows read), a
2,880-token LLaVA-NeXT prompt holds a few dozen rows per head instead of 2,880: the memory the user's command
needs stays a small part of eager's ``output_attentions=True`` (``benchmarks/bench_images.py``).

Or nothing is kept (:func:`stream_layers`): each layer is handed on as it is computed, to a consumer that reduces it
(the picture page: :mod:`attnviz.views.picture_stream`), as an :class:`~attnviz.sources.stream.ItemLayer` read a
block of query rows at a time on the fused engine (never a layer's ``[H, T, T]``: a 10,017-token prompt's page
within 4 GiB, ``benchmarks/bench_picture_page.py``), whole on eager attention (which builds it anyway).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from ..errors import ModelNotFoundError

if TYPE_CHECKING:  # pragma: no cover
    from ..sources.stream import ItemLayer

LayerConsumer = Callable[[int, "ItemLayer", bool], None]
"""What :func:`stream_layers` hands each layer to: its number, the layer (``[H, T, T]`` as blocks of query rows or
whole) and whether it is causal (no row sees a later key)."""


def language_model(network: nn.Module, name: str) -> nn.Module:
    """The language model inside a vision-language model (``model.language_model`` in transformers 5; Idefics3's
    and SmolVLM's ``model.text_model``)."""
    inner = getattr(network, "model", None)
    found = getattr(inner, "language_model", None)
    found = getattr(inner, "text_model", None) if found is None else found
    if not isinstance(found, nn.Module):
        raise ModelNotFoundError(f"{name}: attnviz finds no language model in it (model.language_model)")
    return found


def use_fused(network: nn.Module, config: dict[str, Any], device: str) -> str | None:
    """Put the language model on attnviz's attention function if a probe's weights equal eager's; None when
    switched, else why not (it stays on eager attention)."""
    from ..sources.hf_attention import probe_inputs, switch_to_fused

    model = language_model(network, "the model")
    text = config.get("text_config") or {}
    vocab = int(text.get("vocab_size") or config.get("vocab_size") or 100)
    # A language model whose modules are not causal by themselves (PaliGemma's) is probed with its masks only
    return switch_to_fused(model, probe_inputs(min(vocab, 1000), device),  # type: ignore[arg-type]
                           family=str(config.get("model_type")), encoder_decoder=False,
                           alone=not getattr(model.config, "use_bidirectional_attention", False))


def run_layers(network: nn.Module, inputs: dict[str, Tensor], rows: list[int] | None, name: str) -> Tensor:
    """``[L, H, len(rows), T]`` float32 (``rows`` None: every row, ``[L, H, T, T]``): the language model's
    attention, a layer at a time (see the module)."""
    from ..attention.rows import AttentionRows

    model = language_model(network, name)
    modules = attention_modules(model, name)
    total = int(inputs["input_ids"].shape[-1])
    wanted = list(range(total)) if rows is None else rows
    runs = _runs(wanted)
    out: list[Tensor] = []  # the one [L, H, Q, T] tensor, made when the first layer says its heads
    count = [0]

    def take(module: nn.Module, args: Any, output: Any, index: int) -> None:
        weights = output[index] if isinstance(output, (tuple, list)) else None
        if not isinstance(weights, (AttentionRows, Tensor)):
            raise ModelNotFoundError(f"{name}: its language model gave no attention weights in layer {count[0]}")
        if not out:
            heads = weights.n_heads if isinstance(weights, AttentionRows) else int(weights.shape[1])
            out.append(torch.zeros(len(modules), heads, len(wanted), total))
        layer = out[0][count[0]]  # written in place: never a second copy of every layer
        if isinstance(weights, AttentionRows):
            at = 0
            for first, stop in runs:
                block = weights.block(0, first, stop)
                layer[:, at : at + stop - first, : block.shape[-1]] = block
                at += stop - first
        else:
            layer.copy_(weights[0][:, wanted] if rows is not None else weights[0])
        count[0] += 1

    _forward(network, model, inputs, modules, take)
    if not out:
        raise ModelNotFoundError(f"{name}: its language model gave no attention weights")
    return out[0][: count[0]]


def stream_layers(network: nn.Module, inputs: dict[str, Tensor], name: str, each: LayerConsumer) -> int:
    """The language model's attention handed to ``each`` a layer at a time, as it is computed (a hook per layer:
    ``each`` runs before the next layer does), and nothing kept: on the fused engine an
    :class:`~attnviz.sources.stream.ItemLayer` whose blocks of query rows are computed as read, from the layer's
    queries and keys; on eager attention the layer's weights whole. Returns how many layers were handed on."""
    from ..attention.rows import AttentionRows
    from ..sources.stream import ItemLayer, check_finite

    model = language_model(network, name)
    modules = attention_modules(model, name)
    total = int(inputs["input_ids"].shape[-1])
    count = [0]

    def checked(block: Tensor) -> None:
        check_finite(block, count[0], name)

    def take(module: nn.Module, args: Any, output: Any, index: int) -> None:
        weights = output[index] if isinstance(output, (tuple, list)) else None
        if isinstance(weights, AttentionRows):
            layer = ItemLayer(count[0], rows=(weights, 0, total), check=checked)  # (read before the next layer)
            causal = _rows_causal(weights, total)
        elif isinstance(weights, Tensor):
            check_finite(weights, count[0], name)
            layer = ItemLayer(count[0], weights[0].float())
            causal = _weights_causal(weights[0])
        else:
            raise ModelNotFoundError(f"{name}: its language model gave no attention weights in layer {count[0]}")
        each(count[0], layer, causal)
        count[0] += 1

    _forward(network, model, inputs, modules, take)
    if not count[0]:
        raise ModelNotFoundError(f"{name}: its language model gave no attention weights")
    return count[0]


def attention_modules(model: nn.Module, name: str) -> list[tuple[nn.Module, int]]:
    """The language model's attention modules, each with where its output holds the weights."""
    from ..sources.hf_layer_stream import attention_modules as found

    modules = found(model)
    if not modules:
        raise ModelNotFoundError(f"{name}: attnviz finds no attention layers in its language model")
    return list(modules)


def _forward(network: nn.Module, model: nn.Module, inputs: dict[str, Tensor], modules: list[tuple[nn.Module, int]],
             take: Callable[..., None]) -> None:
    """One forward of ``network`` with ``take(module, args, output, index)`` hooked after each attention module."""
    from ..sources.hf_attention import is_fused, weights_mode

    handles = [module.register_forward_hook(lambda m, a, o, i=index: take(m, a, o, i)) for module, index in modules]
    try:
        with torch.no_grad(), weights_mode("rows") if is_fused(model) else nullcontext():
            network(**inputs)
    finally:
        for handle in handles:
            handle.remove()


def _rows_causal(rows: Any, total: int) -> bool:
    """Whether no query of a layer made from ``rows`` (:class:`~attnviz.attention.rows.AttentionRows`) may see a
    later key: read off its mask a block of rows at a time (a masked key's weight is exactly 0, so this is what its
    weights say; no mask: every row sees every key)."""
    from ..attention.rows import rows_per_block

    mask = rows.mask
    if total <= 1:
        return True
    if mask is None:
        return False
    if getattr(mask, "start", None) == 0 and getattr(mask, "t_q", None) == total:  # a RowMask, plainly causal
        return True
    step = rows_per_block(rows.n_heads, total)
    for first in range(0, total, step):
        stop = min(total, first + step)
        allowed = mask.rows(first, stop, total)
        if allowed is None:
            return False
        allowed = allowed.expand(*allowed.shape[:-2], stop - first, allowed.shape[-1])
        later = torch.arange(allowed.shape[-1], device=allowed.device)[None, :] > \
            torch.arange(first, stop, device=allowed.device)[:, None]
        if bool((allowed.bool() & later).any()):
            return False
    return True


def _weights_causal(weights: Tensor) -> bool:
    """Whether every weight after its row's own position is exactly 0 (``[H, T, T]``), a block of rows at a time."""
    from ..attention.rows import rows_per_block

    heads, total = int(weights.shape[0]), int(weights.shape[-1])
    step = rows_per_block(heads, total)
    for first in range(0, total, step):
        block = weights[:, first : first + step]
        later = torch.arange(total)[None, :] > torch.arange(first, first + block.shape[1])[:, None]
        if bool(block[:, later].any()):
            return False
    return True


def _runs(rows: list[int]) -> list[tuple[int, int]]:
    """``rows`` (ascending) as contiguous ``(first, stop)`` runs."""
    runs: list[tuple[int, int]] = []
    for row in rows:
        if runs and runs[-1][1] == row:
            runs[-1] = (runs[-1][0], row + 1)
        else:
            runs.append((row, row + 1))
    return runs
