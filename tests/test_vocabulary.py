"""One vocabulary of options across commands (issue 11): an option that applies means the same thing,
with the same help and default, on every command; and it changes what the command computes."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import built_command

import attnviz
from attnviz.analysis import metrics
from attnviz.analysis.heads import head_table
from attnviz.analysis.transforms import drop_special, to_words
from attnviz.attribution.rollout import rollout
from attnviz.cli import app

SHARED = ["--model", "--engine", "--revision", "--device", "--device-map", "--trust-remote-code", "--verbose",
          "--truncate", "--pair", "--causal", "--hide-special", "--renormalize", "--words", "--layer", "--kind",
          "--target"]
READING_COMMANDS = ["heatmap", "heads", "compare-heads", "rollout"]
TEXT = "Unbelievably, the cat sat on the mat."


def _options(command: str) -> dict[str, tuple[str, object]]:
    click_command = built_command(app).commands[command]
    return {opt: (param.help or "", param.default) for param in click_command.params for opt in param.opts}


@pytest.mark.parametrize("option", SHARED)
def test_a_shared_option_is_the_same_on_every_command(option):
    seen = {command: _options(command).get(option) for command in READING_COMMANDS}
    assert all(value is not None for value in seen.values()), f"{option} is missing: {seen}"
    assert len({repr(value) for value in seen.values()}) == 1, f"{option} differs between commands: {seen}"


def test_export_has_the_model_options_too():
    options = _options("export")
    for option in ("--model", "--engine", "--revision", "--device", "--trust-remote-code", "--verbose", "--truncate",
                   "--cmap", "--layer", "--head", "--pair", "--causal", "--hide-special", "--renormalize", "--words"):
        assert option in options, option
    heatmap = _options("heatmap")
    for option in ("--pair", "--hide-special", "--renormalize", "--words", "--causal", "--cmap"):
        assert options[option][0] == heatmap[option][0], option  # the same words as the reading commands


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
    assert np.allclose(view.panels[0], rollout(read.attentions)[-1].numpy(), atol=1e-6)
    overview = api.compare_heads_of_text(source, TEXT, layer=2, reading=api.Reading(hide_special=True))
    plain = drop_special(attnviz.extract(TEXT))
    assert np.allclose(overview.distance, metrics.head_distance(plain.attentions[2:3]).numpy(), atol=1e-6)
    r = run_cli("rollout", TEXT, "--renormalize")
    assert r.exit_code == 2 and "--renormalize rescales rows after --hide-special" in r.stderr
    r = run_cli("rollout", TEXT, "--norm", "--words")
    assert r.exit_code == 2 and "--words apply to rollout and flow only" in r.stderr
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

    r = run_cli("heads", TEXT, "--only-head", "3", "--format", "json")
    assert r.exit_code == 0 and {(row["layer"], row["head"]) for row in json.loads(r.stdout)["heads"]} == \
        {(layer, 3) for layer in range(6)}
    r = run_cli("heads", TEXT, "--only-head", "12")
    assert r.exit_code == 2 and "--only-head 12 is out of range" in r.stderr
    texts = tmp_path / "t.txt"
    texts.write_text("the cat sat on the mat\n")
    r = run_cli("export", str(texts), "--out", str(tmp_path / "o"), "--model", TINY, "--causal", "--formats", "npz",
                "--quiet")
    assert r.exit_code == 0, r.stderr
    saved = AttentionResult.load(next((tmp_path / "o").glob("*.npz")))
    assert saved.causal and torch.equal(saved.attentions.triu(1), torch.zeros_like(saved.attentions))
    r = run_cli("export", str(texts), "--out", str(tmp_path / "p"), "--causal", "--formats", "json")
    assert r.exit_code == 2 and "--causal applies to .toml config models" in r.stderr


def _bart_decoder(folder: str, source_text: str, target_text: str) -> tuple[list[str], torch.Tensor]:
    """The decoder self-attention of a BART folder straight from transformers (the reference)."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager").eval()
    src, tgt = tokenizer(source_text)["input_ids"], tokenizer(target_text)["input_ids"]
    with torch.no_grad():
        out = model(input_ids=torch.tensor([src]), decoder_input_ids=torch.tensor([tgt]), output_attentions=True)
    return tokenizer.convert_ids_to_tokens(tgt), torch.stack([a[0] for a in out.decoder_attentions])


def test_kind_and_target_on_heads_rollout_and_compare_heads(run_cli, tiny_hf):
    """--kind decoder --target reads an encoder-decoder model's decoder self-attention on every reading command,
    equal to transformers' own; cross-attention (not square) is refused where token-over-token is needed."""
    from attnviz.result import AttentionResult

    source_text, target_text = "Der Hund jagt die Katze.", "The dog chased the cat."
    tokens, decoder = _bart_decoder(tiny_hf["bart"], source_text, target_text)
    base = [source_text, "--model", tiny_hf["bart"], "--target", target_text, "--kind", "decoder"]

    r = run_cli("heads", *base, "--format", "json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    expected = head_table([AttentionResult(tokens=tokens, attentions=decoder, causal=True)]).rows()
    assert len(doc["tokens"]) == len(tokens) and len(doc["heads"]) == len(expected)
    for got, want in zip(doc["heads"], expected, strict=True):
        assert got["prev_score"] == pytest.approx(want["prev_score"], abs=1e-5)
        assert got["entropy"] == pytest.approx(want["entropy"], abs=1e-5)

    from attnviz import api

    source = api.load(tiny_hf["bart"])
    view = api.rollout_view(source, source_text, kind="decoder", target=target_text)
    assert np.allclose(view.panels[0], rollout(decoder)[-1].numpy(), atol=1e-5)
    assert "decoder" in view.title
    overview = api.compare_heads_of_text(source, source_text, layer=1, kind="decoder", target=target_text)
    assert np.allclose(overview.distance, metrics.head_distance(decoder[1:2]).numpy(), atol=1e-5)
    r = run_cli("rollout", *base, "--width", "100")
    assert r.exit_code == 0 and "decoder · attention rollout" in r.stdout, r.stderr
    r = run_cli("compare-heads", *base, "--layer", "0", "--width", "100")
    assert r.exit_code == 0, r.stderr

    for command in ("heads", "rollout", "compare-heads"):
        r = run_cli(command, source_text, "--model", tiny_hf["bart"], "--target", target_text, "--kind", "cross")
        assert r.exit_code == 2 and "--kind cross attention is target queries over source keys" in r.stderr, r.stderr
        r = run_cli(command, TEXT, "--kind", "decoder")  # MiniLM: an encoder only
        assert r.exit_code == 2 and "--kind decoder needs an encoder-decoder model" in r.stderr, (command, r.stderr)
    r = run_cli("heads", TEXT, "--target", "x")
    assert r.exit_code == 2 and "--target is for encoder-decoder models" in r.stderr


def test_export_reads_texts_as_the_other_commands_do(run_cli, tmp_path):
    """export --pair --hide-special --renormalize --words: the npz, the JSON and the images all read the
    text that way, equal to the API's reading of a plain extraction."""
    from attnviz.result import AttentionResult

    texts = tmp_path / "t.txt"
    texts.write_text("Unbelievably, the cat sat.\n", encoding="utf-8")
    out = tmp_path / "o"
    r = run_cli("export", str(texts), "--out", str(out), "--pair", "It was tired.", "--hide-special", "--renormalize",
                "--words", "--formats", "npz,json", "--layer", "0,3", "--quiet")
    assert r.exit_code == 0, r.stderr
    want = to_words(drop_special(attnviz.extract("Unbelievably, the cat sat.", pair="It was tired.", layers=[0, 3]),
                                 renormalize=True))
    saved = AttentionResult.load(next(out.glob("*.npz")))
    assert saved.tokens == want.tokens and "[SEP]" not in saved.tokens and "Unbelievably" in saved.tokens
    assert torch.allclose(saved.attentions, want.attentions, atol=1e-6)
    doc = json.loads(next(out.glob("*.stats.json")).read_text(encoding="utf-8"))
    assert doc["tokens"] == want.tokens
    rows = head_table([want]).rows()
    assert [row["entropy"] for row in doc["heads"]] == pytest.approx([row["entropy"] for row in rows], abs=1e-5)
    r = run_cli("export", str(texts), "--out", str(tmp_path / "p"), "--renormalize", "--formats", "json")
    assert r.exit_code == 2 and "--renormalize rescales rows after --hide-special" in r.stderr


def test_the_head_table_selects_and_serialises_in_the_library():
    from attnviz.analysis.heads import rows_csv
    from attnviz.errors import UsageError

    table = head_table([attnviz.extract(TEXT)])
    rows = table.select(layer=2, sort="prev_score", top=3)
    assert [row["layer"] for row in rows] == [2, 2, 2]
    all_prev = sorted((row["prev_score"] for row in table.rows() if row["layer"] == 2), reverse=True)
    assert [row["prev_score"] for row in rows] == all_prev[:3]
    with pytest.raises(UsageError, match=r"head=12 is out of range"):
        table.select(head=12)
    lines = rows_csv(rows).splitlines()
    assert lines[0].startswith("layer,head,entropy") and len(lines) == 4
    assert table.document(rows, text=TEXT)["heads"] == rows


def test_norm_in_every_layer(run_cli):
    from attnviz import api

    source = api.load()
    view = api.norm_view(source, TEXT, head=4)  # every layer, the default
    result = attnviz.extract(TEXT)
    norms = metrics.norm_attention(result.attentions, result.value_norms)
    assert view.panels.shape[0] == 6 and np.allclose(view.panels, norms[:, 4].numpy(), atol=1e-5)
    r = run_cli("rollout", TEXT, "--norm", "--head", "4", "--width", "200")
    assert r.exit_code == 0 and "every layer · head 4" in r.stdout and "L5" in r.stdout, r.stderr


# --- issue 27: one meaning per flag, and the same behaviour with no text ---------------------------


def test_every_reading_command_uses_the_example_sentence_without_text(run_cli, tmp_path, monkeypatch):
    from conftest import TINY

    monkeypatch.chdir(tmp_path)
    for command in [*READING_COMMANDS, "view"]:
        r = run_cli(command, "--model", TINY)
        assert r.exit_code == 0, (command, r.stderr)
        assert r.stderr.startswith("attnviz: no TEXT given; using the example sentence"), (command, r.stderr)
    assert (tmp_path / "attnviz.html").is_file()  # view's default page, in the current folder
    fixed = run_cli("heatmap", "--model", "sample_configs/seed_example.toml")  # a config with its own input
    assert fixed.exit_code == 0 and "no TEXT given" not in fixed.stderr


def test_one_meaning_per_flag_across_commands():
    """--vs is a second input to compare with, only in compare-heads; rollout's similarity text is --similar-to.
    --head's default is head 0 wherever one head is drawn; every --out takes the same formats."""
    rollout, compare, heatmap = _options("rollout"), _options("compare-heads"), _options("heatmap")
    assert "--similar-to" in rollout and "--vs" in compare and "--similar-to" not in compare
    assert rollout["--head"][1] == heatmap["--head"][1] == _options("view")["--head"][1] == "0"
    hidden = {opt for p in built_command(app).commands["rollout"].params if getattr(p, "hidden", False)
              for opt in p.opts}
    assert hidden == {"--vs"}  # kept only to point to --similar-to


def test_rollout_vs_points_to_similar_to_and_head_defaults_to_0(run_cli):
    r = run_cli("rollout", TEXT, "--method", "grad-rollout", "--vs", "A dog.", "--width", "200")  # the old name, one release
    assert r.exit_code == 0 and "attnviz: warning: --vs is now --similar-to here" in r.stderr, r.stderr
    new = run_cli("rollout", TEXT, "--method", "grad-rollout", "--similar-to", "A dog.", "--width", "200")
    assert new.stdout == r.stdout
    r = run_cli("rollout", TEXT, "--norm", "--layer", "2", "--width", "200")
    assert r.exit_code == 0 and "head 0" in r.stdout, r.stdout[:300]


@pytest.mark.parametrize("command", ["heatmap", "compare-heads", "rollout", "view", "generate"])
def test_an_unknown_out_format_is_a_bad_option_value(run_cli, command):
    from conftest import TINY

    causal = TINY.replace("tiny.toml", "causal.toml")
    page = "--page" if command == "view" else "--out"  # view's page file, attnviz.html unless given
    args = [command, "the cat sat", "--model", causal if command == "generate" else TINY, page, "x.gif"]
    r = run_cli(*args)
    assert r.exit_code == 2 and "x.gif" in r.stderr and r.stderr.count("\n") == 1, (command, r.exit_code, r.stderr)


def test_usage_lines_and_choice_errors_read_plainly(run_cli, capsys):
    from attnviz.cli import main

    for command in sorted(c.name for c in app.registered_commands):
        usage = run_cli(command, "--help").stdout.splitlines()[0]
        assert "[[" not in usage, usage
    with pytest.raises(SystemExit) as exit_info:
        main(["heatmap", TEXT, "--cmap", "foo"])  # as the console script runs it
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith("attnviz: error: --cmap: 'foo' is not one of viridis, magma, "
                                                        "coolwarm (see attnviz heatmap --help)"), err
    assert "Value error" not in err and "Invalid value" not in err


# --- one vocabulary (issue 42): the table in docs/commands.md is the app's --------------------------------------

ONE_TEXT_COMMANDS = ["heatmap", "view", "heads", "compare-heads", "rollout", "generate", "tui", "explain"]


def test_the_vocabulary_table_in_the_docs_is_the_apps():
    from docs_text import DOCS

    from attnviz.cli.vocabulary import markdown, rows

    page = DOCS["commands.md"]
    held = page.split("<!-- vocabulary: generated by python -m attnviz.cli.vocabulary -->\n", 1)[1]
    held = held.split("\n<!-- end of vocabulary -->", 1)[0]
    assert held == markdown(rows(app)), "regenerate it: python -m attnviz.cli.vocabulary"


def test_a_name_has_one_choice_set_and_one_default():
    from attnviz.cli.vocabulary import rows

    for name, row in rows(app).items():
        if name == "--format":  # each command prints some of the formats
            largest = max(row.choices, key=len)
            assert all(set(c) <= set(largest) for c in row.choices), row.choices
        else:
            assert len(row.choices) <= 1, (name, row.choices)
        explicit = {d for d in row.defaults.values() if d}
        assert len(explicit) <= 1, (name, row.defaults)  # another default is another name (issue 42)


@pytest.mark.parametrize("command", ONE_TEXT_COMMANDS)
def test_a_command_that_reads_one_text_takes_text_text_file_and_standard_input(command):
    params = built_command(app).commands[command].params
    arguments = [p for p in params if p.param_type_name == "argument"]
    assert arguments and arguments[0].name in ("text", "prompt"), command
    assert any("--text-file" in p.opts for p in params), command


@pytest.mark.parametrize("command", ["heatmap", "heads", "compare-heads", "rollout", "generate", "explain"])
def test_text_dash_and_text_file_dash_read_standard_input(run_cli, command):
    from conftest import TINY

    model = "sample_configs/causal.toml" if command == "generate" else TINY
    given = run_cli(command, "the cat sat on the mat", "--model", model, "--width", "100")
    piped = run_cli(command, "-", "--model", model, "--width", "100", input="the cat sat on the mat\n")
    from_file = run_cli(command, "--text-file", "-", "--model", model, "--width", "100", input="the cat sat on the mat")
    assert given.exit_code == piped.exit_code == from_file.exit_code == 0, (given.stderr, piped.stderr)
    assert given.stdout == piped.stdout == from_file.stdout


@pytest.mark.parametrize(("old", "new"), [
    (["export", "{texts}", "--out", "{out}", "--layers", "0", "--formats", "json"],
     ["export", "{texts}", "--out", "{out}", "--layer", "0", "--formats", "json"]),
    (["export", "{texts}", "--out", "{out}", "--heads", "1", "--formats", "png", "--layer", "0"],
     ["export", "{texts}", "--out", "{out}", "--head", "1", "--formats", "png", "--layer", "0"]),
    (["heatmap", "the cat sat", "-q", "cat"], ["heatmap", "the cat sat", "--query", "cat"]),
    (["explain", "the cat", "--json"], ["explain", "the cat", "--format", "json"]),
    (["compare-heads", "the cat sat", "--layer", "0", "--top", "1", "--width", "100"],
     ["compare-heads", "the cat sat", "--layer", "0", "--top-pairs", "1", "--width", "100"]),
    (["generate", "the cat", "-n", "3", "--top", "1", "--model", "sample_configs/causal.toml"],
     ["generate", "the cat", "-n", "3", "--top-attended", "1", "--model", "sample_configs/causal.toml"]),
    (["view", "the cat sat", "--out", "{out}.html"], ["view", "the cat sat", "--page", "{out}.html"]),
    (["explain", "the cat", "--layer", "1"], ["explain", "the cat", "--walk-layer", "1"]),
    (["explain", "the cat", "--head", "2"], ["explain", "the cat", "--only-head", "2"]),
    (["heads", "the cat sat", "--head", "1", "--format", "json"], ["heads", "the cat sat", "--only-head", "1", "--format", "json"]),
    (["heads", "the cat sat", "--head", "all", "--format", "csv"], ["heads", "the cat sat", "--format", "csv"]),
    (["generate", "the cat", "-n", "3", "--head", "1", "--model", "sample_configs/causal.toml"],
     ["generate", "the cat", "-n", "3", "--only-head", "1", "--model", "sample_configs/causal.toml"]),
    (["generate", "the cat", "-n", "3", "--head", "mean", "--model", "sample_configs/causal.toml"],
     ["generate", "the cat", "-n", "3", "--model", "sample_configs/causal.toml"]),
])
def test_an_old_spelling_works_for_one_release_with_a_note(run_cli, tmp_path, old, new):
    from conftest import TINY

    texts = tmp_path / "t.txt"
    texts.write_text("the cat sat on the mat\n", encoding="utf-8")
    outputs = []
    for i, argv in enumerate((old, new)):
        argv = [a.format(texts=texts, out=tmp_path / f"o{i}") for a in argv]
        done = run_cli(*argv, *([] if "--model" in argv else ["--model", TINY]))
        assert done.exit_code == 0, done.stderr
        outputs.append((done.stdout.replace(str(tmp_path / f"o{i}"), "OUT"), done.stderr))
        if i == 1:
            assert "is now" not in done.stderr
    assert f"attnviz: warning: {next(w for w in old if w.startswith('-') and w not in new)} is now" in outputs[0][1]
    assert outputs[0][0] == outputs[1][0]
    if old[0] == "export":
        assert sorted(p.name for p in (tmp_path / "o0").iterdir()) == sorted(p.name for p in (tmp_path / "o1").iterdir())


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_a_file_of_texts_is_read_alike_by_export_atlas_and_heads(run_cli, tmp_path, suffix):
    """heads --file read a .jsonl as plain lines (each line's JSON as a text) where export read its field."""
    import csv

    from conftest import TINY

    texts = ["the cat sat on the mat", "a dog ran in the park"]
    path = tmp_path / f"t{suffix}"
    if suffix == ".jsonl":
        path.write_text("".join(json.dumps({"body": t}) + "\n" for t in texts), encoding="utf-8")
        how = ["--field", "body"]
    else:
        with path.open("w", newline="", encoding="utf-8") as handle:
            csv.writer(handle).writerows([["body"], *[[t] for t in texts]])
        how = ["--column", "body"]
    plain = tmp_path / "t.txt"
    plain.write_text("\n".join(texts) + "\n", encoding="utf-8")
    for command in (["heads", "--file"], ["atlas"]):
        read = run_cli(*command, str(path), *how, "--model", TINY, "--format", "json")
        same = run_cli(*command, str(plain), "--model", TINY, "--format", "json")
        assert read.exit_code == same.exit_code == 0, (command, read.stderr)
        ours, theirs = json.loads(read.stdout), json.loads(same.stdout)
        for document in (ours, theirs):
            document.pop("text", None), document.pop("file", None)  # the file's name
        assert ours["n_texts"] == 2 and ours == theirs, command
    exported = run_cli("export", str(path), *how, "--out", str(tmp_path / "e"), "--model", TINY, "--formats", "json",
                       "--quiet")
    assert exported.exit_code == 0 and len(list((tmp_path / "e").glob("*.json"))) == 2, exported.stderr


@pytest.mark.parametrize("command", [["heads", "--file", "-"], ["atlas", "-"]])
def test_a_file_of_texts_may_be_standard_input(run_cli, command):
    """`heads --file -` said "- does not exist"; export, atlas and heads --file all read - as standard input."""
    from conftest import TINY

    piped = run_cli(*command, "--model", TINY, "--format", "json", input="the cat sat on the mat\na dog ran in the park\n")
    assert piped.exit_code == 0, piped.stderr
    assert json.loads(piped.stdout)["n_texts"] == 2


def test_generate_samples_with_seed_0_by_default_as_atlas_resamples(run_cli):
    """--seed was 0 in atlas and 'random' in generate: now a run repeats by default in both."""
    args = ("generate", "the cat sat", "--model", "sample_configs/causal.toml", "-n", "6", "--sample",
            "--temperature", "3", "--width", "120")
    default, zero, other = run_cli(*args), run_cli(*args, "--seed", "0"), run_cli(*args, "--seed", "1")
    assert default.exit_code == zero.exit_code == other.exit_code == 0, default.stderr
    assert default.stdout == zero.stdout and other.stdout != zero.stdout


def test_a_renamed_option_with_a_default_refuses_both_spellings_and_a_default_goes_where_it_fits(run_cli):
    """--top-pairs has a default: given with the old --top it is refused (whether it was given is asked of the
    command line, not read from its value); --head 0 is heatmap's and rollout's default, yet heatmap --query lists
    every head unless --head is given, and rollout's head-less methods take none unless it is given."""
    from conftest import TINY

    both = run_cli("compare-heads", TEXT, "--top", "1", "--top-pairs", "5", "--model", TINY)
    assert both.exit_code == 2 and "give --top-pairs (the new name of --top), not both" in both.stderr, both.stderr
    every = run_cli("heatmap", "the cat sat", "--query", "cat", "--model", TINY, "--width", "100")
    one = run_cli("heatmap", "the cat sat", "--query", "cat", "--head", "0", "--model", TINY, "--width", "100")
    assert every.exit_code == one.exit_code == 0, (every.stderr, one.stderr)
    assert "L1H3" in every.stdout and "L1H0" in one.stdout and "L1H3" not in one.stdout
    fused = run_cli("rollout", "the cat sat", "--model", TINY, "--width", "100")
    assert fused.exit_code == 0 and "mean of heads" in fused.stdout, fused.stderr
    assert "--head applies to norm" in run_cli("rollout", "the cat sat", "--head", "1", "--model", TINY).stderr
