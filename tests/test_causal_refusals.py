"""What cannot decode is refused in one line before a model loads (attnviz.sources.causal.refuse_non_causal): encoders
are known by transformers' own records of their family (a masked-LM head without ``is_decoder``, an image
classifier), not by a list of names."""

from __future__ import annotations

import pytest

from attnviz.errors import UsageError
from attnviz.sources.causal import is_encoder, refuse_non_causal


@pytest.mark.parametrize("config", [
    {"model_type": "bert"}, {"model_type": "roberta"}, {"model_type": "modernbert"}, {"model_type": "deberta-v2"},
    {"model_type": "xlm-roberta"}, {"model_type": "vit"}, {"model_type": "clip"}, {"model_type": "siglip"},
    {"model_type": "dinov2"}, {"model_type": "llava", "text_config": {"model_type": "bert"}},
])
def test_encoders_are_refused_as_not_causal(config):
    with pytest.raises(UsageError, match=r"m is not a causal language model"):
        refuse_non_causal(config, "m")


@pytest.mark.parametrize("config", [
    {"model_type": "gpt2"}, {"model_type": "llama"}, {"model_type": "qwen2"}, {"model_type": "mistral"},
    {"model_type": "bert", "is_decoder": True},  # BertLMHeadModel decodes
    {"model_type": "xlm", "causal": True},  # XLM's causal language models
    {"model_type": "my_own_family"},  # a hub model's own code: its loading says what it is
    {"model_type": "llava", "text_config": {"model_type": "llama"}},
])
def test_decoders_and_unknown_families_pass(config):
    refuse_non_causal(config, "m")
    assert not is_encoder(config)


def test_an_encoder_decoder_is_said_as_one_or_left_to_generate():
    with pytest.raises(UsageError, match="is an encoder-decoder model"):
        refuse_non_causal({"model_type": "bart", "is_encoder_decoder": True}, "m")
    refuse_non_causal({"model_type": "bart", "is_encoder_decoder": True}, "m", seq2seq=True)
