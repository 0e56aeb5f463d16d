"""One layer's pieces for norm-based mixing (Kobayashi et al. 2021, :mod:`attnviz.attribution.mixing`), one text.

The model runs as an extraction runs it; forward (pre-)hooks on each wanted layer's modules record
what the decomposition needs, and each layer's :class:`~attnviz.sources.contracts.MixingParts` is handed on
before the next layer is computed (the native engine), so one layer's ``[H, T, T]`` and
``[H, T, d]`` tensors are held at a time.

What each family gives, and which terms are included:

- BERT (native engine), post-LN: ``LN(x + attention(x))``. ``f^h(x_j) = (x_j W_V^h + b_V^h) W_O^h``,
  the residual is the layer's input x, ``post_norm`` that LayerNorm's (γ, β, ε), ``bias_o`` W_O's bias.
- GPT-2 (LayerNorm ``ln_1``), LLaMA, Mistral, Qwen2 (RMSNorm ``norm_attn``) and attnviz's own
  transformer configs (LayerNorm ``ln_attn``), pre-LN: ``x + attention(norm(x))``. The norm acts per
  token before the values, so it is inside f; the residual is the un-normalised stream x;
  ``post_norm`` is None (no LayerNorm follows the sum: the next norm is the MLP's). Grouped-query
  heads read their group's shared values, each through its own W_O^h; Qwen2's b_V is inside f;
  LLaMA and Qwen2 have no b_O (``bias_o`` None). Mistral's sliding window is in the weights.

``layer_output`` is the block's output computed where the model computes it, from the recorded
residual and the attention module's own output: ``x + attention`` (pre-LN), or the layer's
LayerNorm module applied to it (post-LN), exactly the next step of the family's forward pass.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from ..errors import InputError, UsageError
from .contracts import MixingParts

if TYPE_CHECKING:  # pragma: no cover
    from ..attention import AttentionOutput, MultiHeadAttention
    from ..result import AttentionResult
    from .base import Source
    from .own import ConfigSource
    from .stream import LayerStream

__all__ = ["MixingParts", "mixing_parts"]



def what_works() -> str:
    """What norm-based mixing runs on, with the native families named from their classes."""
    from .native import family_names

    return f"the native engine ({family_names()} checkpoints) or a transformer .toml config such as sample_configs/tiny.toml"


def mixing_parts(source: Source, text: str | None, *, layers: list[int] | None = None,
                 truncate: bool = False) -> tuple[AttentionResult, Iterator[MixingParts]]:
    """``text``'s result (tokens, ids, flags; for the native engine its attentions are left empty) and
    an iterator over each wanted layer's :class:`MixingParts`, in order, computed as it is iterated.

    ``layers`` are the model's numbers (default every layer). Sources that cannot give the residual
    stream and the values (transformers, saved results, matrices and encoder-decoder configs) are a
    :class:`UsageError` saying what works instead."""
    refusal = _refusal(source)
    if refusal:
        raise UsageError(refusal)
    if text is None:
        raise InputError("no text given; pass the text to inspect")
    wanted = None if layers is None else source.check_layers(layers)
    if source.engine == "config":
        from .own import ConfigSource

        assert isinstance(source, ConfigSource)  # the one source of the config engine
        result = source.extract(text, truncate=truncate, layers=wanted)
        return result, _config_parts(source, text, wanted, truncate)
    stream = source.stream_batch([text], truncate=truncate, layers=wanted)
    return stream.results[0], _native_parts(source, stream)


def _refusal(source: Source) -> str | None:
    """Why ``source`` cannot be decomposed, or None."""
    name, engine = source.name, source.engine
    from .native import FAMILIES

    if engine == "native" and getattr(source, "family", None) in FAMILIES:
        return None
    if engine == "config":
        model = getattr(source, "network", None)
        if model is None:
            return (f"{name} is a single attention layer from given matrices: it has no residual stream or LayerNorm "
                    f"to decompose; use {what_works()}")
        if getattr(source, "seq2seq_network", None) is not None:
            return (f"{name} is an encoder-decoder config model, which norm-based mixing does not decompose; use a "
                    f"transformer config without decoder_layers, or {what_works()}")
        return None
    if engine in ("hf", "fused"):
        return (f"{name} runs on transformers, whose modules attnviz does not hook for the residual stream and the "
                f"values; norm-based mixing needs {what_works()}: load it with [[engine=native]] where that engine "
                "supports the model")
    if engine == "saved":
        return (f"{name} is a saved result: it keeps the attention weights, not the values, residual stream and "
                f"LayerNorm the decomposition needs; run the model itself with {what_works()}")
    return f"norm-based mixing needs {what_works()}; {name} is {getattr(source, 'family', engine)}"


# --- the native engine -----------------------------------------------------------------------------


def _native_parts(source: Any, stream: LayerStream) -> Iterator[MixingParts]:
    """Each wanted layer's parts as the stream computes it. Hooks record, per layer, the attention
    module's input and output and (pre-LN) the input of the norm before it; they are removed when
    the iteration ends or is abandoned."""
    model = source.model
    from .native import FAMILIES

    pre_norm = FAMILIES[source.family].pre_norm  # None: post-LN (BERT)
    seen: dict[int, dict[str, Any]] = {}
    handles = []
    try:
        for number in stream.layers:
            layer = model.layers[number]
            handles.append(layer["attn"].register_forward_hook(_recorder(seen, number)))
            if pre_norm is not None:
                handles.append(layer[pre_norm].register_forward_pre_hook(_residual_recorder(seen, number)))
        for _position, items in stream:
            number = items[0].layer
            del items  # the hooks hold what is needed
            caught = seen.pop(number)
            layer = model.layers[number]
            residual = caught["input"] if pre_norm is None else caught["residual"]
            post = None if pre_norm is not None else layer["ln_attn"]
            part = _parts(number, caught["out"], layer["attn"], residual, post)
            del caught, residual
            yield part
            del part  # one layer's pieces at a time
    finally:
        for handle in handles:
            handle.remove()


def _recorder(seen: dict[int, dict[str, Any]], number: int) -> Any:
    def record(_module: nn.Module, args: tuple[Any, ...], output: AttentionOutput) -> None:
        seen.setdefault(number, {}).update(input=args[0], out=output)

    return record


def _residual_recorder(seen: dict[int, dict[str, Any]], number: int) -> Any:
    def record(_module: nn.Module, args: tuple[Any, ...]) -> None:
        seen.setdefault(number, {})["residual"] = args[0]

    return record


# --- attnviz's own transformer configs -------------------------------------------------------------


def _config_parts(source: ConfigSource, text: str, wanted: list[int] | None, truncate: bool) -> Iterator[MixingParts]:
    """A config model runs whole (it is small): every block's input x (the residual) and its
    attention output come from the model's own forward pass, then each wanted layer is handed on."""
    model = source.network
    assert model is not None  # checked by _refusal
    _tokens, ids = source.tokenize(text, truncate=truncate)
    streams: list[Tensor] = []
    captured = model(torch.tensor([ids]), causal=source.causal, streams=streams)  # [(LN(x), out)] per block
    for number in range(len(captured)) if wanted is None else wanted:
        block = model.layers[number]
        yield _parts(number, captured[number][1], block.attn, streams[number], None)


# --- shared ------------------------------------------------------------------------------------------


@torch.no_grad()
def _parts(number: int, out: AttentionOutput, attn: MultiHeadAttention, residual: Tensor,
           post: nn.LayerNorm | None) -> MixingParts:
    """One layer's :class:`MixingParts` (batch of one) from the attention module's output ``out``,
    the module, the residual stream ``[1, T, d]`` and, post-LN, the LayerNorm after the sum."""
    if out.weights is None:  # pragma: no cover - a layer run through the fused kernel
        raise RuntimeError(f"layer {number}'s attention weights were not built")
    o_proj = attn.o_proj
    if o_proj is None:  # pragma: no cover - every model's layer projects its heads out; only a matrices config may not
        raise RuntimeError(f"layer {number}'s attention has no output projection")
    dtype = torch.float64 if out.values.dtype == torch.float64 else torch.float32
    values = out.values[0].to(dtype)  # (H, T, d_head): b_V included; shared ones repeated under GQA
    heads, _t, d_head = values.shape
    w_o = o_proj.weight.to(dtype)  # (d, H·d_head) as nn.Linear stores it
    w_o = w_o.reshape(w_o.shape[0], heads, d_head).permute(1, 2, 0)  # (H, d_head, d)
    transformed = torch.bmm(values, w_o)  # (H, T, d): f^h(x_j) = (x_j W_V^h + b_V^h) W_O^h
    summed = residual + out.output  # (1, T, d), as the family computes it
    output = summed if post is None else post(summed)
    bias = o_proj.bias
    return MixingParts(
        layer=number,
        attentions=out.weights[0].to(dtype),
        transformed=transformed,
        residual=residual[0].to(dtype),
        bias_o=None if bias is None else bias.detach().to(dtype),
        post_norm=None if post is None else (post.weight.detach().to(dtype), post.bias.detach().to(dtype),
                                             float(post.eps)),
        layer_output=output[0].to(dtype),
    )
