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
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import torch
from torch import Tensor, nn

from ..errors import ModelNotFoundError


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
    from ..sources.hf_attention import is_fused, weights_mode
    from ..sources.hf_layers import attention_modules

    model = language_model(network, name)
    modules = attention_modules(model)
    if not modules:
        raise ModelNotFoundError(f"{name}: attnviz finds no attention layers in its language model")
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

    handles = [module.register_forward_hook(lambda m, a, o, i=index: take(m, a, o, i)) for module, index in modules]
    try:
        with torch.no_grad(), weights_mode("rows") if is_fused(model) else nullcontext():
            network(**inputs)
    finally:
        for handle in handles:
            handle.remove()
    if not out:
        raise ModelNotFoundError(f"{name}: its language model gave no attention weights")
    return out[0][: count[0]]


def _runs(rows: list[int]) -> list[tuple[int, int]]:
    """``rows`` (ascending) as contiguous ``(first, stop)`` runs."""
    runs: list[tuple[int, int]] = []
    for row in rows:
        if runs and runs[-1][1] == row:
            runs[-1] = (runs[-1][0], row + 1)
        else:
            runs.append((row, row + 1))
    return runs
