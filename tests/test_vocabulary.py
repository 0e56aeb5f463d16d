"""One vocabulary of options across commands (issue 11): an option that applies means the same thing,
with the same help and default, on every command; and it changes what the command computes."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import attnviz
from attnviz import metrics
from attnviz.cli import app
from attnviz.heads import head_table
from attnviz.transforms import drop_special, to_words

SHARED = ["--model", "--engine", "--revision", "--device", "--device-map", "--trust-remote-code", "--verbose",
          "--truncate", "--pair", "--causal", "--hide-special", "--renormalize", "--words"]
READING_COMMANDS = ["heatmap", "heads", "compare-heads", "rollout"]
TEXT = "Unbelievably, the cat sat on the mat."


def _options(command: str) -> dict[str, tuple[str, object]]:
    import typer.main

    click_command = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    return {opt: (param.help or "", param.default) for param in click_command.params for opt in param.opts}


@pytest.mark.parametrize("option", SHARED)
def test_a_shared_option_is_the_same_on_every_command(option):
    seen = {command: _options(command).get(option) for command in READING_COMMANDS}
    assert all(value is not None for value in seen.values()), f"{option} is missing: {seen}"
    assert len({repr(value) for value in seen.values()}) == 1, f"{option} differs between commands: {seen}"


def test_export_has_the_model_options_too():
    options = _options("export")
    for option in ("--model", "--engine", "--revision", "--device", "--trust-remote-code", "--verbose", "--truncate",
                   "--cmap", "--layers", "--heads"):
        assert option in options, option


def test_heads_reads_the_text_as_asked(run_cli):
    r = run_cli("heads", TEXT, "--hide-special", "--words", "--format", "json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    expected = head_table([to_words(drop_special(attnviz.extract(TEXT)))]).rows()
    assert "[CLS]" not in doc["tokens"] and len(doc["heads"]) == len(expected)
    got = {(row["layer"], row["head"]): row for row in doc["heads"]}
    for row in expected:
        assert got[(row["layer"], row["head"])]["entropy"] == pytest.approx(row["entropy"], abs=1e-5)
    r = run_cli("heads", "--probe", "induction", "--pair", "x")
    assert r.exit_code == 2 and "--pair is a second sentence for TEXT" in r.stderr


def test_rollout_and_compare_heads_read_the_text_as_asked(run_cli):
    from attnviz import api

    source = api.load()
    read = to_words(drop_special(attnviz.extract(TEXT), renormalize=True))
    view = api.rollout_view(source, TEXT, reading=api.Reading(hide_special=True, renormalize=True, words=True))
    assert view.row_labels == read.tokens
    assert np.allclose(view.panels[0], metrics.rollout(read.attentions)[-1].numpy(), atol=1e-6)
    overview = api.compare_heads_of_text(source, TEXT, layer=2, reading=api.Reading(hide_special=True))
    plain = drop_special(attnviz.extract(TEXT))
    assert np.allclose(overview.distance, metrics.head_distance(plain.attentions[2:3]).numpy(), atol=1e-6)
    r = run_cli("rollout", TEXT, "--renormalize")
    assert r.exit_code == 2 and "--renormalize rescales rows after --hide-special" in r.stderr
    r = run_cli("rollout", TEXT, "--norm", "--words")
    assert r.exit_code == 2 and "--words do not apply" in r.stderr
    r = run_cli("compare-heads", "The cat sat.", "--pair", "It was tired.", "--layer", "0", "--width", "100")
    assert r.exit_code == 0, r.stderr


def test_causal_on_every_reading_command(run_cli):
    from conftest import TINY

    for command in ("heads", "compare-heads", "rollout"):
        r = run_cli(command, "the cat sat on the mat", "--model", TINY, "--causal", "--width", "100")
        assert r.exit_code == 0, (command, r.stderr)
    r = run_cli("rollout", TEXT, "--causal")
    assert r.exit_code == 2 and "--causal applies to .toml config models" in r.stderr
    tiny_causal = attnviz.extract("the cat sat", model=TINY, causal=True)
    assert torch.equal(tiny_causal.attentions.triu(1), torch.zeros_like(tiny_causal.attentions))


def test_layer_means_one_thing_on_every_reading_command(run_cli):
    """--layer takes a number or 'all' on heatmap, heads, compare-heads and rollout."""
    for command in ("heatmap", "heads", "compare-heads", "rollout"):
        help_text, _ = _options(command)["--layer"]
        assert "'all'" in help_text, command
        r = run_cli(command, TEXT, "--layer", "9", "--width", "100")
        assert r.exit_code == 2 and "--layer 9 is out of range" in r.stderr, (command, r.stderr)
    r = run_cli("heads", TEXT, "--layer", "2", "--format", "json")
    assert r.exit_code == 0 and {row["layer"] for row in json.loads(r.stdout)["heads"]} == {2}
    all_layers = run_cli("rollout", TEXT, "--layer", "all", "--width", "100")
    last = run_cli("rollout", TEXT, "--layer", "5", "--width", "100")
    assert all_layers.exit_code == 0 and all_layers.stdout == last.stdout  # all: through the last layer


def test_heads_shows_one_head_and_export_takes_causal(run_cli, tmp_path):
    from conftest import TINY

    from attnviz.result import AttentionResult

    r = run_cli("heads", TEXT, "--head", "3", "--format", "json")
    assert r.exit_code == 0 and {(row["layer"], row["head"]) for row in json.loads(r.stdout)["heads"]} == \
        {(layer, 3) for layer in range(6)}
    r = run_cli("heads", TEXT, "--head", "12")
    assert r.exit_code == 2 and "--head 12 is out of range" in r.stderr
    texts = tmp_path / "t.txt"
    texts.write_text("the cat sat on the mat\n")
    r = run_cli("export", str(texts), "--out", str(tmp_path / "o"), "--model", TINY, "--causal", "--formats", "npz",
                "--quiet")
    assert r.exit_code == 0, r.stderr
    saved = AttentionResult.load(next((tmp_path / "o").glob("*.npz")))
    assert saved.causal and torch.equal(saved.attentions.triu(1), torch.zeros_like(saved.attentions))
    r = run_cli("export", str(texts), "--out", str(tmp_path / "p"), "--causal", "--formats", "json")
    assert r.exit_code == 2 and "--causal applies to .toml config models" in r.stderr
