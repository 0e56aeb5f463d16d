"""The one Source protocol: every kind of model offers the same calls, one options object, its
capabilities, and results that depend on their arguments only (issue 11, point 3 and 4)."""

from __future__ import annotations

import pytest
import torch
from conftest import SEED, TINY

from attnviz.errors import UsageError
from attnviz.sources.base import Capabilities, ExtractOptions, Source
from attnviz.sources.resolve import load_source

TEXT = "The cat sat on the mat."


@pytest.fixture(scope="module")
def minilm():
    return load_source(None)


def test_every_kind_of_model_is_a_source(minilm, tiny_hf):
    sources = {
        "config transformer": load_source(TINY),
        "config matrices": load_source(SEED),
        "native": minilm,
        "hf decoder": load_source(tiny_hf["gpt2"], engine="hf"),
        "hf encoder-decoder": load_source(tiny_hf["t5"]),
    }
    for kind, source in sources.items():
        assert isinstance(source, Source), kind
        assert isinstance(source.capabilities, Capabilities) and source.n_layers >= 1, kind
    assert sources["native"].capabilities.details and sources["native"].capabilities.streaming
    assert not sources["hf decoder"].capabilities.details and sources["hf decoder"].capabilities.token_ids
    assert sources["hf encoder-decoder"].capabilities.cross
    assert sources["config matrices"].capabilities.fixed_input and not sources["config transformer"].capabilities.pairs


def test_options_as_one_object_or_as_keywords(minilm):
    options = ExtractOptions(layers=(1, 3), float16=True)
    by_object = minilm.extract(TEXT, options)
    by_keywords = minilm.extract(TEXT, layers=[3, 1], float16=True)
    assert by_object.metadata["layers"] == by_keywords.metadata["layers"] == [1, 3]
    assert by_object.attentions.dtype == torch.float16 and torch.equal(by_object.attentions, by_keywords.attentions)
    assert ExtractOptions.build(options, float16=False) == ExtractOptions(layers=(1, 3))
    with pytest.raises(TypeError, match="unknown extraction option 'layer'"):
        minilm.extract(TEXT, layer=2)


@pytest.mark.parametrize(
    ("model", "kwargs", "message"),
    [
        (TINY, {"pair": "A second sentence."}, "need a model with a real tokenizer"),
        (TINY, {"target": "Ziel."}, "need a model with a real tokenizer"),
        (None, {"target": "Ziel."}, "is for encoder-decoder models"),
    ],
)
def test_an_option_a_source_cannot_honour_is_an_error(model, kwargs, message):
    with pytest.raises(UsageError, match=message):
        load_source(model).extract(TEXT, **kwargs)


def test_details_from_transformers_is_an_error_not_silently_nothing(tiny_hf):
    with pytest.raises(UsageError, match="gives no pre-softmax scores"):
        load_source(tiny_hf["bert"], engine="hf").extract("hello world", details=True)


def test_results_depend_on_arguments_not_on_earlier_calls(minilm):
    """The engine keeps no per-call state: a float16, one-layer, detailed call first changes nothing after."""
    fresh = load_source(None).extract(TEXT)
    minilm.extract(TEXT, layers=[2], float16=True, details=True)
    minilm.extract_batch(["x y z", TEXT], layers=[0])
    again = minilm.extract(TEXT)
    assert again.attentions.dtype == torch.float32 and again.n_layers == fresh.n_layers == 6
    assert torch.equal(again.attentions, fresh.attentions) and again.scores is None


def test_hf_causality_is_read_once_and_kept(tiny_hf):
    source = load_source(tiny_hf["gpt2"], engine="hf")
    assert source.causal
    source.extract_batch(["a b", "a b c d e"])
    assert source.causal  # a forward pass no longer rewrites it


def test_sources_that_compute_whole_results_stream_them(tiny_hf):
    for source in (load_source(TINY), load_source(tiny_hf["t5"])):
        stream = source.stream_batch([TEXT])
        assert stream.whole
        steps = list(stream)
        assert len(steps) == source.n_layers == stream.results[0].n_layers
        position, parts = steps[-1]
        assert torch.equal(parts[0].attentions, stream.results[0].attentions[position])
