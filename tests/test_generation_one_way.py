"""One way to generate into a result (issue 60, item 3): every causal engine (native, config, fused, hf) decodes on
the one stepper :func:`attnviz.sources.causal.load_causal` built, checks positions once with one error, and writes
the result fields each engine wrote before (its labels, specials, word ids, metadata). The needle reads its config
and its tokenizer once."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import attnviz
from attnviz.errors import InputError

PROMPT = "the cat sat on the"
ROOT = Path(__file__).resolve().parent.parent
CAUSAL = str(ROOT / "sample_configs" / "causal.toml")
ENGINES = [("gpt2", "native"), ("gpt2", "fused"), ("gpt2", "hf"), ("llama", "native"), ("llama", "fused"),
           ("llama", "hf")]
TAIL = ["generation", "prompt_length", "sampling", "stopped_at_eos"]
KEYS = {"native": ["engine", "family", "device", *TAIL], "config": ["engine", "config_type", *TAIL],
        "fused": ["engine", *TAIL], "hf": ["engine", *TAIL]}
"""The metadata a generated result saves, in its order, per engine (the saved file's bytes follow it)."""


@pytest.fixture(scope="module")
def lm(tiny_hf, tmp_path_factory):
    from tiny_models import causal_lm

    root = tmp_path_factory.mktemp("one_way")
    return {family: causal_lm(tiny_hf[family], root / family) for family in ("gpt2", "llama")}


def _transformers_greedy(folder: str, n: int) -> list[int]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()
    with torch.no_grad():
        out = model.generate(**tokenizer(PROMPT, return_tensors="pt"), max_new_tokens=n, min_new_tokens=n,
                             do_sample=False, pad_token_id=0)
    return [int(i) for i in out[0]]


@pytest.mark.parametrize(("family", "engine"), ENGINES)
def test_every_engine_writes_the_fields_it_wrote(lm, family, engine):
    """Tokens are transformers' greedy ones; the prompt's labels, specials and word ids are the ones the engine's
    extraction of the prompt gives; each new token is labelled by its engine's tokenizer; the metadata keys are the
    engine's, in the order a saved file holds them."""
    from transformers import AutoTokenizer

    from attnviz.sources.tokens import label_from_piece

    folder = lm[family]
    result = attnviz.generate(PROMPT, model=folder, max_new_tokens=5, stop_at_eos=False, engine=engine)
    assert result.token_ids == _transformers_greedy(folder, 5)
    assert list(result.metadata) == KEYS[engine] and result.metadata["engine"] == engine
    n = result.metadata["prompt_length"]
    new = result.token_ids[n:]
    assert len(new) == 5 and len(result.tokens) == len(result.special) == len(result.word_ids) == n + 5
    tokenizer = AutoTokenizer.from_pretrained(folder)
    if engine == "native":
        from tokenizers import Tokenizer

        from attnviz.api import load

        source = load(folder, engine="native")
        prompt = source.extract(PROMPT)
        assert (result.tokens[:n], result.special[:n], result.word_ids[:n]) == (prompt.tokens, prompt.special,
                                                                                prompt.word_ids)
        pieces = Tokenizer.from_file(str(Path(folder) / "tokenizer.json"))
        assert result.tokens[n:] == [label_from_piece(pieces.id_to_token(i)) for i in new]
        specials = set(source.special_ids())
        assert result.word_ids[n:] == [-1 if i in specials else max(prompt.word_ids) + 1 + k
                                       for k, i in enumerate(new)]
        assert result.metadata["family"] == family and result.metadata["device"] == "cpu"
    else:
        assert result.tokens == [label_from_piece(p) for p in tokenizer.convert_ids_to_tokens(result.token_ids)]
        assert result.special == [i in set(tokenizer.all_special_ids) for i in result.token_ids]


def test_the_config_model_writes_its_words_and_their_word_ids():
    from attnviz.config import load_config
    from attnviz.sources.words import word_id

    result = attnviz.generate(PROMPT, model=CAUSAL, max_new_tokens=4, stop_at_eos=False)
    cfg = load_config(CAUSAL)
    assert list(result.metadata) == KEYS["config"] and result.metadata["config_type"] == "TransformerConfig"
    assert result.tokens[:5] == PROMPT.split() and set(result.tokens[5:]) <= set(cfg.vocab)
    assert result.token_ids == [word_id(w, cfg.vocab_size) for w in result.tokens]  # words, not vocab indices
    assert result.special == [False] * 9 and result.word_ids == list(range(9))


@pytest.mark.parametrize(("model", "engine", "stepper"), [("gpt2", "native", "NativeStepper"),
                                                          ("config", "auto", "ConfigStepper"),
                                                          ("gpt2", "hf", "TransformersStepper")])
def test_one_stepper_is_built_and_decoded_on(lm, monkeypatch, model, engine, stepper):
    """The stepper load_causal builds is the one the loop runs on: no engine builds a second (the native engine
    built a fresh one beside load_causal's)."""
    import attnviz.sources.decoding as decoding
    import attnviz.sources.generated as generated
    from attnviz.sources import own, stepping

    cls = getattr(own if stepper == "ConfigStepper" else stepping, stepper)
    built: list[object] = []
    original = cls.__init__

    def counted(self, *args, **kwargs):
        built.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(cls, "__init__", counted)
    fed: list[object] = []
    monkeypatch.setattr(generated, "decode", lambda s, *a, **k: fed.append(s) or decoding.decode(s, *a, **k))
    result = attnviz.generate(PROMPT, model=CAUSAL if model == "config" else lm[model], max_new_tokens=2,
                              engine=engine)
    assert len(result.tokens) >= result.metadata["prompt_length"] + 1
    assert len(built) == 1 and fed == built


@pytest.mark.parametrize(("model", "engine"), [("gpt2", "native"), ("gpt2", "hf"), ("llama", "fused"),
                                               ("config", "auto")])
def test_a_prompt_past_the_positions_is_one_error_on_every_engine(lm, model, engine):
    folder = CAUSAL if model == "config" else lm[model]
    with pytest.raises(InputError, match=r"^the prompt \(\d+ tokens\) and max_new_tokens=200 pass the (64|128) "
                                         r"positions \S+ takes; ask for fewer tokens$"):
        attnviz.generate(PROMPT, model=folder, max_new_tokens=200, engine=engine)


def test_a_loaded_sources_own_generate_is_the_same_function(lm):
    """NativeSource.generate and ConfigSource.generate (for a source already loaded) give what attnviz.generate
    gives: the same result, field for field."""
    from attnviz.api import load
    from attnviz.sources.sampling import Sampling

    for model, engine in ((lm["gpt2"], "native"), (CAUSAL, "auto")):
        source = load(model, engine=engine)
        own = source.generate(PROMPT, max_new_tokens=3, sampling=Sampling(), stop_at_eos=False)
        one = attnviz.generate(PROMPT, model=model, max_new_tokens=3, stop_at_eos=False, engine=engine)
        assert (own.tokens, own.token_ids, own.special, own.word_ids, own.metadata) == \
            (one.tokens, one.token_ids, one.special, one.word_ids, one.metadata)
        assert torch.equal(own.attentions, one.attentions)


@pytest.mark.parametrize("engine", ["native", "hf"])
def test_the_needle_reads_its_config_and_its_tokenizer_once(lm, monkeypatch, engine):
    import transformers

    import attnviz.sources.causal as causal
    from attnviz.needle.model import load_stepper

    placed, tokenizers = [], []
    place, load = causal.causal_place, transformers.AutoTokenizer.from_pretrained
    monkeypatch.setattr(causal, "causal_place", lambda *a, **k: placed.append(a) or place(*a, **k))
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained",
                        lambda *a, **k: tokenizers.append(a) or load(*a, **k))
    stepper, codec = load_stepper(lm["llama"], engine=engine)
    assert stepper.engine == engine and codec.encode("the cat") and codec.start
    assert len(placed) == 1 and len(tokenizers) == 1
