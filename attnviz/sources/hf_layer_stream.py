"""Each layer's attention as transformers computes it, not every layer at the end.

``output_attentions=True`` makes transformers collect every layer's ``[B, H, T, T]`` weights and
return them together, so the peak holds all of them (12 × 805 MB for a 4,096-token GPT-2). Its
eager attention returns the weights from every self-attention module whether asked for or not;
here a forward hook on each module takes them as they are produced and hands them to the consumer,
and the forward waits until the consumer has finished with them: about one layer's weights are
alive at a time (plus transformers' own transient buffers), and the forward stops after the last
layer wanted.

The modules are found as transformers finds them for ``output_attentions``: the model's
``_can_record_outputs["attentions"]`` (``transformers.utils.output_capturing``), and the layer
number is the order in which they fire, as transformers records them. :func:`plan_layers` checks
this once on a short probe against ``output_attentions=True`` (one capture per layer, equal to
it); where it cannot be established the engine keeps the whole-model path.

The forward runs in a worker thread so that :func:`stream_layers` stays a generator the consumer
pulls from; the two hand each layer over with a handshake (the worker blocks in the hook until the
consumer asks for the next layer).
"""

from __future__ import annotations

import inspect
import queue
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from ..attention.rows import AttentionRows
from .stream import Capture, LayerOut


@dataclass(frozen=True)
class LayerPlan:
    """Where a model's self-attention weights come from: ``(module, index)`` pairs (the weights are
    ``output[index]`` of the module's forward), firing ``n_layers`` times per forward in layer order,
    and the keyword arguments the per-layer forward adds to the inputs."""

    modules: list[tuple[nn.Module, int]]
    n_layers: int
    kwargs: dict[str, Any] = field(default_factory=dict)


def plan_layers(model: nn.Module, n_layers: int, inputs: dict[str, Tensor], reference: list[Tensor]) -> LayerPlan | None:
    """The per-layer plan for ``model``, checked on ``inputs`` against ``reference`` (the same
    inputs' ``output_attentions=True`` attentions); None where it does not give the same layers."""
    modules = attention_modules(model)
    if not modules or len(reference) != n_layers:
        return None
    try:  # no key/value cache: it would hold every layer's keys and values until the end
        cache = {"use_cache": False} if "use_cache" in inspect.signature(model.forward).parameters else {}
    except (TypeError, ValueError):
        cache = {}
    plan = LayerPlan(modules, n_layers, {"output_attentions": False, **cache})
    seen: list[Tensor | None] = []

    def record(index: int) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            seen.append(output[index] if isinstance(output, (tuple, list)) else None)
        return hook

    handles = [module.register_forward_hook(record(index)) for module, index in modules]
    try:
        with torch.no_grad():
            model(**inputs, **plan.kwargs)
    except Exception:  # a model that refuses these arguments keeps the whole-model path
        return None
    finally:
        for handle in handles:
            handle.remove()
    same = len(seen) == n_layers and all(
        isinstance(got, Tensor) and got.shape == want.shape and torch.allclose(got.float(), want.float(), atol=1e-5)
        for got, want in zip(seen, reference, strict=True))
    return plan if same else None


def stream_layers(model: nn.Module, plan: LayerPlan, inputs: dict[str, Tensor], capture: Capture,
                  whole: Callable[[], Iterator[LayerOut]],
                  around: Callable[[], AbstractContextManager[Any]] = nullcontext) -> Iterator[LayerOut]:
    """Each layer ``capture`` wants, in order, as the forward computes it; the forward does not go
    past a layer until the consumer asks for the next one, and stops after the last one wanted.
    An exception in the forward reaches the consumer as it was raised; closing the generator ends
    the forward. ``whole`` (the whole-model path) is used should the weights not come at all.
    The forward runs inside ``around()`` (in its own thread); weights it gives as
    :class:`~attnviz.attention.rows.AttentionRows` (the fused engine) are handed on as ``rows``."""
    wanted = [i for i in range(plan.n_layers) if capture.wants(i)]
    if not wanted:
        return
    handoff = _Handoff(capture, wanted[-1])
    handles = [module.register_forward_hook(handoff.hook(index)) for module, index in plan.modules]
    handoff.thread = threading.Thread(target=handoff.run, args=(model, {**inputs, **plan.kwargs}, torch.get_num_threads(),
                                                                around),
                                      name="attnviz-hf-forward", daemon=True)
    fall_back = False
    try:
        handoff.thread.start()
        given = 0
        while (item := handoff.outbox.get()) is not _DONE:
            if item is _NO_WEIGHTS and not given:
                fall_back = True
                break
            if isinstance(item, BaseException):
                raise item
            if item is _NO_WEIGHTS:
                raise RuntimeError(f"transformers stopped giving attention weights after layer {given - 1}")
            layer, weights = item
            item = None
            yield LayerOut(layer=layer, weights=weights) if isinstance(weights, Tensor) else \
                LayerOut(layer=layer, weights=None, rows=weights)
            del weights  # before the forward goes on: one layer's weights alive at a time
            given += 1
            handoff.resume.release()
    finally:
        handoff.stop = True
        handoff.resume.release()
        while handoff.thread.is_alive() and not sys.is_finalizing():  # a finalizing interpreter runs no thread
            handoff.thread.join(0.05)
        for handle in handles:
            handle.remove()
    if fall_back:
        yield from whole()


class _Stop(BaseException):
    """Raised from a hook to end the forward early (a BaseException: no ``except Exception`` in
    model code swallows it)."""


_DONE, _NO_WEIGHTS = object(), object()


class _Handoff:
    """The worker's side: the forward, and the hook that hands each wanted layer over and waits."""

    def __init__(self, capture: Capture, last: int) -> None:
        self.capture, self.last = capture, last
        self.outbox: queue.SimpleQueue[Any] = queue.SimpleQueue()  # at most one layer in it (the handshake)
        self.resume = threading.Semaphore(0)
        self.stop = False
        self.count = 0
        self.thread: threading.Thread | None = None

    def hook(self, index: int) -> Callable[..., None]:
        def take(module: nn.Module, args: Any, output: Any) -> None:
            if threading.current_thread() is not self.thread:
                return  # another forward of the same model (another thread): not this stream's
            layer = self.count
            self.count += 1
            if self.stop:
                raise _Stop
            if not self.capture.wants(layer):
                return  # dropped at once
            weights = output[index] if isinstance(output, (tuple, list)) else None
            if not isinstance(weights, (Tensor, AttentionRows)):
                self.outbox.put(_NO_WEIGHTS)
                raise _Stop
            self.outbox.put((layer, weights))
            del weights
            if layer >= self.last:
                raise _Stop  # nothing more wanted: the rest of the forward is not computed
            self.resume.acquire()  # until the consumer has finished with this layer
            if self.stop:
                raise _Stop
        return take

    def run(self, model: nn.Module, inputs: dict[str, Tensor], threads: int,
            around: Callable[[], AbstractContextManager[Any]]) -> None:
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        try:
            with torch.no_grad(), around():  # grad mode (and the fused engine's mode) are per thread
                model(**inputs)
        except _Stop:
            pass
        except BaseException as exc:  # handed to the consumer, which raises it
            self.outbox.put(exc)
            return
        self.outbox.put(_DONE)


def attention_modules(model: nn.Module) -> list[tuple[nn.Module, int]]:
    """The modules transformers hooks for ``output_attentions`` and the index of the weights in
    their output, as ``transformers.utils.output_capturing.recursively_install_hooks`` finds them:
    a nested pretrained model brings its own ``_can_record_outputs``."""
    from transformers import PreTrainedModel

    found: list[tuple[nn.Module, int]] = []

    def walk(parent: nn.Module, name: str, specs: list[tuple[Any, int, str | None, str | None]]) -> None:
        for child_name, child in parent.named_children():
            walk(child, f"{name}.{child_name}", _specs(child) if isinstance(child, PreTrainedModel) else specs)
        for target, index, layer_name, class_name in specs:
            matches = (target is not None and isinstance(parent, target)) or (
                class_name is not None and name.endswith(class_name))
            if matches and (layer_name is None or f".{layer_name.strip('.')}." in name + "."):
                found.append((parent, index))

    walk(model, "", _specs(model))
    return found


def _specs(model: nn.Module) -> list[tuple[Any, int, str | None, str | None]]:
    """``_can_record_outputs["attentions"]`` as ``(class, index, layer_name, class_name)``: a class
    alone or a class name (index 1, transformers' default for attentions), or an ``OutputRecorder``."""
    declared = (getattr(model, "_can_record_outputs", None) or {}).get("attentions")
    specs: list[tuple[Any, int, str | None, str | None]] = []
    for spec in declared if isinstance(declared, list) else [declared] if declared is not None else []:
        if isinstance(spec, type):
            specs.append((spec, 1, None, None))
        elif isinstance(spec, str):
            specs.append((None, 1, None, spec))
        else:
            specs.append((getattr(spec, "target_class", None), getattr(spec, "index", 1),
                          getattr(spec, "layer_name", None), getattr(spec, "class_name", None)))
    return specs
