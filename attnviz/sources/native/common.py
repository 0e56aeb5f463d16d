"""What the native families share: the model base class, activations, weight copying."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Generator, Mapping
from typing import Any, ClassVar, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...attention import AttentionOutput, MultiHeadAttention
from ..engine import Capture
from ..kv_cache import KVCache
from .weights import take


def _gelu_tanh(x: Tensor) -> Tensor:
    return F.gelu(x, approximate="tanh")


def _gelu_new(x: Tensor) -> Tensor:
    # transformers' NewGELUActivation, written out as it is there (GPT-2's "gelu_new"): the same operations in the
    # same order, in place on two new buffers instead of eight where no gradient is recorded (the same numbers; a
    # 2,048-token layer's [2048, 3072] took 30-54 ms instead of 47-107 ms of fresh pages).
    if torch.is_grad_enabled() and x.requires_grad:
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))
    inner = torch.pow(x, 3.0).mul_(0.044715).add_(x).mul_(math.sqrt(2.0 / math.pi)).tanh_().add_(1.0)
    return (0.5 * x).mul_(inner)


ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "gelu": F.gelu,
    "gelu_new": _gelu_new,
    "gelu_pytorch_tanh": _gelu_tanh,
    "gelu_fast": _gelu_tanh,
    "relu": F.relu,
    "silu": F.silu,
    "swish": F.silu,
}


def set_parameter(module: nn.Module, name: str, value: Tensor, what: str) -> None:
    """Make the checkpoint's tensor ``value`` the module's parameter ``name`` itself, not a copy of it:
    a model then takes the memory of its weights once (a copy leaves the freed originals in the
    heap, about 40% more resident memory)."""
    current = getattr(module, name)
    if tuple(value.shape) != tuple(current.shape):
        raise ValueError(f"{what} is {tuple(value.shape)} but the config makes it {tuple(current.shape)}")
    setattr(module, name, nn.Parameter(value, requires_grad=False))


def load_linear(linear: nn.Linear, weights: dict[str, Tensor], prefix: str, *, transpose: bool = False) -> nn.Linear:
    """Give ``linear`` the checkpoint's ``prefix.weight`` (and ``prefix.bias`` where it has one).

    ``transpose`` is for GPT-2's ``Conv1D``, which stores the weight as ``[in, out]`` (used as a
    transposed view: matrix products read it in place).
    """
    w = take(weights, prefix + ".weight")
    set_parameter(linear, "weight", w.T if transpose else w, prefix + ".weight")
    if linear.bias is not None:
        set_parameter(linear, "bias", take(weights, prefix + ".bias"), prefix + ".bias")
    return linear


def load_layer_norm(weights: dict[str, Tensor], prefix: str, d: int, eps: float) -> nn.LayerNorm:
    """An ``nn.LayerNorm`` holding ``prefix.weight`` and ``prefix.bias``."""
    ln = nn.LayerNorm(d, eps=eps)
    set_parameter(ln, "weight", take(weights, prefix + ".weight"), prefix + ".weight")
    set_parameter(ln, "bias", take(weights, prefix + ".bias"), prefix + ".bias")
    return ln


Run = Callable[..., Generator[AttentionOutput, None, Tensor]]


def grad_as_captured(run: Run) -> Run:
    """A family's ``run`` with each of its steps computed under ``torch.set_grad_enabled(capture.grad)``:
    no autograd graph by default (what ``@torch.no_grad()`` gave), a graph for a gradient run
    (:mod:`attnviz.sources.gradients`). The generator's return value, the last layer's output, is
    passed on."""

    @functools.wraps(run)
    def wrapper(self: NativeModel, ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor | None, n_layers: int,
                capture: Capture, *args: Any, **kwargs: Any) -> Generator[AttentionOutput, None, Tensor]:
        return _stepped(run(self, ids, attention_mask, token_type_ids, n_layers, capture, *args, **kwargs), capture.grad)

    return wrapper


def _stepped(steps: Generator[AttentionOutput, None, Tensor], grad: bool) -> Generator[AttentionOutput, None, Tensor]:
    try:
        while True:
            with torch.set_grad_enabled(grad):
                out = next(steps)
            yield out
            del out  # not held while the next layer is computed
    except StopIteration as stop:
        return stop.value
    finally:
        steps.close()


def tracked(x: Tensor, capture: Capture) -> Tensor:
    """The embedding output ``x``, made a leaf that autograd records from when ``capture.grad`` (the
    checkpoint's parameters do not require gradients, so nothing would be recorded otherwise)."""
    return x.detach().requires_grad_() if capture.grad else x


class NativeModel:
    """A family's forward pass on our attention; subclasses implement :meth:`run`, a generator that
    yields each layer's :class:`AttentionOutput` as soon as it is computed."""

    # A family's traits, read by the rest of the program (adding a family is its module and one line
    # of native/__init__.py's CLASSES): the model_type values of config.json it runs, each with the
    # name messages call it; its checkpoints' weight prefixes; whether it is causal; the name of
    # each layer's norm before attention (None: post-LN, as BERT), which the mixing decomposition reads.
    model_types: ClassVar[dict[str, str]] = {}
    prefixes: ClassVar[tuple[str, ...]] = ()
    causal: ClassVar[bool] = False
    pre_norm: ClassVar[str | None] = None

    @staticmethod
    def unsupported(config: dict[str, Any]) -> str | None:
        """Why the native engine cannot run this family's ``config`` (a variant it does not implement), or None."""
        return None

    vocab_rows: int  # the input embedding's rows (a family sets it from its checkpoint)

    def __init__(self, config: dict[str, Any], weights: Mapping[str, Tensor] | None = None) -> None:
        """A family's ``__init__`` takes the checkpoint's ``weights`` too (read lazily), and builds its layers."""
        self.config = config
        self.layers: list[nn.ModuleDict] = []  # each layer's modules by name ("attn", its norms, its MLP's)

    def attention(self, layer: int) -> MultiHeadAttention:
        """Layer ``layer``'s attention, attnviz's own in every family (``nn.ModuleDict`` is not generic: its
        items are plain Modules to mypy)."""
        return cast(MultiHeadAttention, self.layers[layer]["attn"])

    def attend(self, i: int, attn: nn.Module, x: Tensor, capture: Capture, **kwargs: Any) -> AttentionOutput:
        """Run layer ``i``'s attention, building its weights only if ``capture`` wants that layer
        (the others go through torch's fused kernel and never build a ``[T, T]`` matrix), as blocks
        of rows on demand with ``capture.rows``. A gradient run (``capture.grad``) builds every
        layer's whole: the output must come from the weights."""
        wanted = capture.wants(i) or capture.grad
        mode = "rows" if wanted and capture.rows and not (capture.grad or capture.details) else wanted
        return attn(x, need_weights=mode, keep_scores=wanted and capture.details, **kwargs)

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    def to(self, device: torch.device | str) -> NativeModel:
        for name, value in vars(self).items():
            if isinstance(value, (Tensor, nn.Module)):
                setattr(self, name, value.to(device))
        self.layers = [layer.to(device) for layer in self.layers]
        return self

    def run(
        self, ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor | None, n_layers: int, capture: Capture,
        cache: KVCache | None = None,
    ) -> Generator[AttentionOutput, None, Tensor]:  # pragma: no cover - abstract
        """The first ``n_layers`` layers' attention outputs, one at a time; the generator returns the
        output of layer ``n_layers - 1`` (``[B, T, d]``, before any final norm) when it ends.

        Causal families also decode incrementally: with a ``cache``, ``ids`` are the new tokens only
        (at positions ``cache.length`` onwards), ``attention_mask`` covers every key so far, and
        the cache is updated (keys, values, length, the last layer's ``hidden`` output)."""
        raise NotImplementedError

    def final_norm(self, weights: Any) -> nn.Module:  # pragma: no cover - abstract
        """The norm between the last layer and the language-model head (causal families)."""
        raise NotImplementedError(f"{type(self).__name__} has no language-model head")

    def language_model_head(self, weights: Any) -> tuple[nn.Module, Tensor]:
        """(final norm, head matrix ``[vocab, d]``): the checkpoint's ``lm_head.weight``, or the input
        embedding where the config ties them (transformers' ``tie_word_embeddings``, default true for
        GPT-2). Read on demand: attention alone never loads it."""
        from ...errors import ModelNotFoundError

        if "lm_head.weight" in weights:
            head = weights["lm_head.weight"]
        elif self.config.get("tie_word_embeddings", self.ties_embeddings):
            head = self.embedding
        else:
            raise ModelNotFoundError("the checkpoint has no language-model head (lm_head.weight), so it cannot "
                                     "generate; give the checkpoint of a ...ForCausalLM model")
        return self.final_norm(weights), head

    ties_embeddings: ClassVar[bool] = False

    @property
    def embedding(self) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def o_weight(self, layer: int) -> Tensor | None:
        """W_O of ``layer`` as nn.Linear stores it, for norm-based attention."""
        attn = self.attention(layer)
        return None if attn.o_proj is None else attn.o_proj.weight
