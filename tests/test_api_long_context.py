"""The long-context methods in the API (issue 51, item 4): attnviz.api.needle, kv and patterns are the commands'
computations, with the commands' defaults declared once (attnviz.defaults): a default that drifts fails here."""

from __future__ import annotations

import inspect

import pytest
from conftest import built_command

from attnviz import api, defaults
from attnviz.cli import app
from attnviz.cli.needle import parse_depths
from attnviz.cli.options import parse_budgets


def _option(command: str, flag: str) -> object:
    return next(p.default for p in built_command(app).commands[command].params if flag in p.opts)


def _default(function, name: str) -> object:
    return inspect.signature(function).parameters[name].default


def test_the_api_and_the_commands_share_their_defaults():
    assert _default(api.needle, "max_new_tokens") == _option("needle", "--max-new-tokens") == defaults.ANSWER_TOKENS
    # None: the needle and question a model organism declares, else attnviz.defaults' (resolved once, in the library)
    assert _default(api.needle, "needle") is _option("needle", "--needle") is None
    assert _default(api.needle, "question") is _option("needle", "--question") is None
    assert tuple(parse_depths(str(_option("needle", "--depths")))) == defaults.DEPTHS
    assert _default(api.kv, "answer_tokens") == _option("kv", "--max-new-tokens") == defaults.ANSWER_TOKENS
    for command, function in (("kv", api.kv), ("patterns", api.patterns)):
        assert tuple(parse_budgets(str(_option(command, "--budget")))) == tuple(_default(function, "budgets"))
    assert _default(api.kv, "policies") is None and _option("kv", "--policy") == "all"  # every registered policy


def test_the_api_functions_are_the_methods():
    from attnviz.kv import kv
    from attnviz.kv.patterns import patterns
    from attnviz.needle import needle

    assert (api.kv, api.patterns, api.needle) == (kv, patterns, needle)


def test_without_a_needle_the_library_uses_the_defaults_or_the_organisms(monkeypatch):
    """The one place the default needle is resolved: a model without its own gets attnviz.defaults'."""
    import attnviz.needle as needle_module

    seen = {}

    class Stop(Exception):
        pass

    def builder(codec, *, haystack, needle, question, seed):
        seen["needle"], seen["question"] = needle, question
        raise Stop

    monkeypatch.setattr(needle_module, "PromptBuilder", builder)
    monkeypatch.setattr("attnviz.needle.model.load_stepper", lambda model, **_: (None, None))
    with pytest.raises(Stop):
        api.needle("some/model")
    assert seen == {"needle": defaults.NEEDLE, "question": defaults.QUESTION}
