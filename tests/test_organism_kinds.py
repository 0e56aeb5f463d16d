"""Organism head kinds are records (issue 60, item 2): each kind's parameters, words, weights and the pattern it must
make live on its record; the tests read the pattern from there (no copy of it here), and a kind added from outside
(a plugin's) is read from the TOML, described, built, and makes its own declared pattern."""

from __future__ import annotations

import random

import pytest
import torch
from test_organisms import _organism, _text

from attnviz.organisms.kinds import BUILT_IN, KINDS, Expected, HeadKind, Param, Planting, one_hot_rows
from attnviz.organisms.spec import describe, read_spec

EVERY_KIND = "".join(f"[[head]]\n{body}\n" for body in (
    'kind = "previous_token"\nlayer = 0\nhead = 0', 'kind = "previous_token"\nlayer = 0\nhead = 1\noffset = 2',
    'kind = "first_token"\nlayer = 0\nhead = 2', 'kind = "local"\nlayer = 0\nhead = 3\nwindow = 8',
    'kind = "induction"\nlayer = 1\nhead = 0\nmatch = 2', 'kind = "token"\nlayer = 1\nhead = 1\ntoken = "."',
    'kind = "induction"\nlayer = 1\nhead = 2\nties = "earliest"', 'kind = "uniform"\nlayer = 1\nhead = 3'))


def _matches(attention: torch.Tensor, expected: Expected) -> None:
    if expected.weights is not None:
        rows = ~torch.isnan(expected.weights).any(-1)
        torch.testing.assert_close(attention[rows], expected.weights[rows], atol=expected.atol, rtol=0)
    if expected.strongest is not None:
        rows = expected.strongest >= 0
        assert torch.equal(attention[rows].argmax(-1), expected.strongest[rows])
    assert expected.weights is not None or expected.strongest is not None


def _vocabulary() -> dict[str, int]:
    from tokenizers import Tokenizer

    from attnviz.sources.places import default_model_folder  # the embedded MiniLM: the organisms' tokenizer

    return Tokenizer.from_file(str(default_model_folder() / "tokenizer.json")).get_vocab()


def test_every_built_in_kind_makes_the_pattern_its_record_declares(tmp_path):
    from attnviz.api import extract

    model = _organism(tmp_path, EVERY_KIND)
    spec = read_spec(model)
    assert {h.kind for h in spec.planted} | {"zero"} == set(BUILT_IN)  # every built-in kind is planted here
    vocabulary = _vocabulary()
    rng = random.Random(0)
    for _ in range(2):
        segment = _text(rng, 30, dots=True)
        result = extract(f"{_text(rng, 20, dots=True)} {segment} {_text(rng, 10)} {segment}", model=model)
        attentions = result.attentions.double()
        for head in spec.planted:
            expected = KINDS[head.kind].expected(head, list(result.token_ids), vocabulary)
            _matches(attentions[head.layer, head.head], expected)


def plant_position(p: Planting) -> None:
    """A plugin's kind: a query that is the code of position ``at``, against each key's position code."""
    from attnviz.organisms.planting import MATCH, C

    at = p.head.setting("at")
    p.bias[p.q0 : p.q0 + C] = p.codes[at] * (MATCH * p.s * p.root / C)
    p.read(p.k0, "PK", C, 1.0)


def expect_position(head, ids, vocabulary) -> Expected:
    n, at = len(ids), head.setting("at")
    weights = one_hot_rows(torch.full((n,), at), n)
    weights[:at] = float("nan")  # before position `at` there is nothing to find: not constrained
    return Expected(weights=weights)


POSITION = HeadKind("position", "one fixed position, from there on", lambda h: f"position {h.setting('at')}",
                    expect_position, plant_position, (Param("at", 1, 0, 64),))


def test_a_plugin_kind_is_read_described_built_and_makes_its_pattern(tmp_path, run_cli):
    from attnviz.api import extract

    body = '[[head]]\nkind = "position"\nlayer = 0\nhead = 1\nat = 3\n[[head]]\nkind = "first_token"\nlayer = 1\nhead = 0\n'
    model = _organism(tmp_path, body)
    with pytest.raises(Exception, match="kind must be one of"):
        read_spec(model)  # not registered: an unknown kind
    with KINDS.registered(POSITION):
        spec = read_spec(model)
        head = spec.head(0, 1)
        assert head is not None and head.settings == (("at", 3),) and describe(head) == "position 3"
        shown = run_cli("organism", model)
        assert shown.exit_code == 0 and "position 3" in shown.stdout, shown.stderr
        result = extract(_text(random.Random(2), 25), model=model)
        _matches(result.attentions.double()[0, 1], expect_position(head, list(result.token_ids), {}))
        (tmp_path / "bad").mkdir()
        bad = _organism(tmp_path / "bad", body.replace("at = 3", "at = 99"))
        with pytest.raises(Exception, match="at must be a whole number from 0 to 64"):
            read_spec(bad)
    assert "position" not in KINDS and set(BUILT_IN) <= set(KINDS)


def test_a_kind_record_is_checked_and_the_built_ins_are_sealed():
    with pytest.raises(ValueError, match="lower-case identifier"):
        HeadKind("Sideways", "x", str, expect_position)
    with pytest.raises(ValueError, match="every head's own key"):
        HeadKind("sideways", "x", str, expect_position, parameters=(Param("layer", 0, 0, 1),))
    with pytest.raises(TypeError, match="induction"):
        KINDS["induction"] = POSITION  # type: ignore[assignment]
