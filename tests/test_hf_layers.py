"""The transformers engine takes each layer's attention as the forward computes it (issue 17, part 4):
the same weights as transformers' own ``output_attentions=True``, one layer alive at a time, the
forward stopped after the last layer wanted, and a worker thread that always ends."""

from __future__ import annotations

import threading
import weakref

import pytest
import torch

from attnviz.errors import NumericalError
from attnviz.sources.hf import HFSource
from attnviz.sources.stream import Capture

TEXTS = ["The cat sat on the mat because it was tired.", "A dog."]


@pytest.fixture(scope="module")
def load(tiny_hf):
    loaded: dict[tuple[str, str], HFSource] = {}

    def source(family: str, attention: str = "eager") -> HFSource:
        """The eager engine by default (this file's subject); ``"fused"``: attnviz's attention function."""
        if (family, attention) not in loaded:
            loaded[family, attention] = HFSource(tiny_hf[family], name=family, attention=attention)
        return loaded[family, attention]

    return source


def _batch(source: HFSource) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """TEXTS padded on the right, as the engine pads them."""
    infos = [source.encode(t) for t in TEXTS]
    width = max(len(i.ids) for i in infos)
    ids = torch.full((len(infos), width), source.pad_id)
    mask = torch.zeros_like(ids)
    for b, info in enumerate(infos):
        ids[b, :len(info.ids)], mask[b, :len(info.ids)] = torch.tensor(info.ids), 1
    assert mask[1].sum() < width  # the second text is padded
    return ids, mask, torch.zeros_like(ids)


def _forward_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "attnviz-hf-forward"]


def attention_modules(source: HFSource) -> list[torch.nn.Module]:
    assert source._plan is not None, "the per-layer path was not established"
    return [module for module, _ in source._plan.modules]


@pytest.mark.parametrize("attention", ["eager", "fused"])
@pytest.mark.parametrize("family", ["bert", "gpt2", "llama", "qwen2"])
def test_layers_equal_transformers_output_attentions(load, family, attention):
    source = load(family, attention)
    assert source.capabilities.streaming and source.engine == {"eager": "hf", "fused": "fused"}[attention]
    ids, mask, types = _batch(source)
    extra = {"token_type_ids": types} if family == "bert" else {}
    with torch.no_grad(), source.eager_attention():
        reference = source.model(input_ids=ids, attention_mask=mask, output_attentions=True, **extra).attentions
    outs = list(source.forward_layers(ids, mask, types, Capture()))
    assert [o.layer for o in outs] == list(range(len(reference)))
    for out, want in zip(outs, reference, strict=True):
        assert out.weights.shape == want.shape
        torch.testing.assert_close(out.weights, want, rtol=0, atol=1e-6)
    # and through the public batch API: each text equals itself run alone by transformers
    for text, result in zip(TEXTS, source.extract_batch(TEXTS), strict=True):
        alone = torch.tensor([source.encode(text).ids])
        with torch.no_grad(), source.eager_attention():
            want = source.model(input_ids=alone, output_attentions=True).attentions
        torch.testing.assert_close(result.attentions, torch.cat(want), rtol=0, atol=1e-5)


def test_only_wanted_layers_come_out_and_the_forward_stops_after_the_last(load):
    source = load("gpt2")
    ids, mask, types = _batch(source)
    fired: list[int] = []
    handles = [m.register_forward_hook(lambda *_, n=n: fired.append(n)) for n, m in enumerate(attention_modules(source))]
    finals: list[int] = []
    handles.append(source.model.ln_f.register_forward_hook(lambda *_: finals.append(1)))
    try:
        assert [o.layer for o in source.forward_layers(ids, mask, types, Capture(layers=frozenset({0})))] == [0]
        assert fired == [0]  # layer 1's attention never ran
        fired.clear()
        assert [o.layer for o in source.forward_layers(ids, mask, types, Capture(layers=frozenset({1})))] == [1]
        assert fired == [0, 1] and finals == []  # the final LayerNorm never ran
        assert len(list(source.forward_layers(ids, mask, types, Capture()))) == 2 and finals == []
        with torch.no_grad():
            source.model(input_ids=ids, attention_mask=mask)
        assert finals == [1]  # (the same count sees a whole forward)
    finally:
        for handle in handles:
            handle.remove()


@pytest.mark.parametrize("attention", ["eager", "fused"])
def test_one_layer_alive_at_a_time(load, attention):
    """When each layer's weights are produced (the fused engine: its queries and keys), no earlier layer's
    are alive anywhere (transformers' output_attentions=True keeps them all: 1 here)."""
    source = load("llama", attention)
    ids, mask, _ = _batch(source)
    produced: list[weakref.ref] = []
    alive: list[int] = []

    def watch(module, args, output):
        alive.append(sum(ref() is not None for ref in produced))
        produced.append(weakref.ref(output[1]))

    handles = [m.register_forward_hook(watch) for m in attention_modules(source)]
    try:
        for position, parts in source.stream_batch(TEXTS):
            assert parts[0].attentions.shape[-1] == len(source.encode(TEXTS[0]).ids) and position == len(alive) - 1
            del parts
        assert alive == [0, 0]
        alive.clear()
        with torch.no_grad(), source.eager_attention():
            source.model(input_ids=ids, attention_mask=mask, output_attentions=True)
        assert alive == [0, 1]  # the check sees what the whole-model path holds
    finally:
        for handle in handles:
            handle.remove()


def test_closing_the_stream_early_ends_the_worker(load):
    source = load("gpt2")
    before = threading.active_count()
    layers = source.forward_layers(*_batch(source), Capture())
    first = next(layers)
    assert first.layer == 0 and len(_forward_threads()) == 1
    layers.close()
    for thread in _forward_threads():
        thread.join(2)
    assert _forward_threads() == [] and threading.active_count() == before
    # abandoned without close: collected, and the worker ends too
    layers = source.forward_layers(*_batch(source), Capture())
    next(layers)
    del layers, first
    for thread in _forward_threads():
        thread.join(2)
    assert _forward_threads() == []


class Boom(RuntimeError):
    pass


def test_an_error_in_the_forward_reaches_the_consumer(load, monkeypatch):
    source = load("gpt2")

    def fail(*args, **kwargs):
        raise Boom("layer 0's MLP broke")

    monkeypatch.setattr(source.model.h[0].mlp, "forward", fail)  # after layer 0's attention, before layer 1's
    layers = source.forward_layers(*_batch(source), Capture())
    assert next(layers).layer == 0
    with pytest.raises(Boom, match="layer 0's MLP broke") as raised:
        next(layers)
    assert any(frame.name == "fail" for frame in raised.traceback)  # the model's own exception, as raised
    for thread in _forward_threads():
        thread.join(2)
    assert _forward_threads() == []


def test_nan_attention_is_still_refused_where_it_arises(load):
    source = load("llama")
    weight = source.model.layers[1].self_attn.q_proj.weight
    saved = weight.detach().clone()
    try:
        with torch.no_grad():
            weight[0, 0] = float("nan")
        with pytest.raises(NumericalError, match="layer 1"):
            source.extract(TEXTS[0])
    finally:
        with torch.no_grad():
            weight.copy_(saved)
