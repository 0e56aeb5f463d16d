"""A checkpoint diff over a corpus (issue 32, part 2): a planted change (one head's W_Q scrambled in a copy of the
default model) ranks that head first, with the interval and p-value a paired test gives; heads the change cannot
reach are exactly unchanged; the means equal the statistics of each model taken text by text."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from attnviz import api
from attnviz.analysis.checkpoint_diff import DISTANCE, diff_of, summarise_all
from attnviz.sources.resolve import default_model_folder

TEXTS = ["The cat sat on the mat.", "A dog chased the cat around the garden.", "Attention is all you need.",
         "The river runs through the old city.", "She read the letter twice before she answered.",
         "Birds sing at dawn in the quiet park.", "He plays the piano every evening.", "It rained all day long."]
LAYER, HEAD = 2, 5
VS = "A cat sat on a rug."


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> str:
    """A copy of all-MiniLM-L6-v2 whose layer 2, head 5 query weights are scrambled (rows permuted, seeded)."""
    from safetensors.torch import load_file, save_file

    folder = tmp_path_factory.mktemp("planted") / "minilm-scrambled"
    shutil.copytree(default_model_folder(), folder)
    weights = load_file(folder / "model.safetensors")
    prefix = next(k for k in weights if k.endswith(f"layer.{LAYER}.attention.self.query.weight"))[: -len("weight")]
    rows = slice(HEAD * 32, (HEAD + 1) * 32)
    order = torch.randperm(32, generator=torch.Generator().manual_seed(0)) + HEAD * 32
    for name in ("weight", "bias"):
        tensor = weights[prefix + name].clone()
        tensor[rows] = weights[prefix + name][order]
        weights[prefix + name] = tensor
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    return str(folder)


def test_a_planted_change_ranks_its_head_first(planted):
    base, other = api.load(), api.load(planted)
    diff = api.checkpoint_diff(base, other, TEXTS, bootstrap=400, permutations=400)
    first = diff.heads[0]
    assert (first.layer, first.head) == (LAYER, HEAD)
    assert first.distance.low > 0 and first.distance.low <= first.distance.mean <= first.distance.high
    assert first.distance.p is None  # never negative: no sign-flip test of it; its interval is clear of 0
    assert first.stats["entropy"].p == pytest.approx(2 / 256)  # 8 texts: all 256 sign patterns, 2 as extreme
    assert diff.exact and first.strongest is not None and abs(first.effect) > 3
    untouched = [h for h in diff.heads if h.layer < LAYER or (h.layer == LAYER and h.head != HEAD)]
    assert all(h.distance.mean == pytest.approx(0, abs=1e-9) and h.distance.high == pytest.approx(0, abs=1e-9)
               and all(c.p == 1.0 for c in h.stats.values()) for h in untouched)
    assert first.distance.mean > 5 * max(h.distance.mean for h in diff.heads[1:])
    # the means are each model's statistics taken text by text
    each_base, each_other = ([api.heads_of(model, [t]).stats for t in TEXTS] for model in (base, other))
    for name in ("entropy", "prev_score", "first"):
        a = torch.stack([stats[name] for stats in each_base])
        b = torch.stack([stats[name] for stats in each_other])
        assert first.stats[name].mean == pytest.approx(float((b - a)[:, LAYER, HEAD].double().mean()), abs=1e-6)


def test_the_summaries_equal_a_hand_computation():
    """The mean, a bootstrap interval that holds the mean, and the exact p of a paired sign-flip test."""
    values = torch.tensor([[0.5], [0.7], [0.4], [0.6], [0.5], [0.9]], dtype=torch.float64)[:, :, None]  # [texts, 1, 1]
    summaries, exact = summarise_all({"x": values}, 2000, 2000, 1)
    mean, low, high, p = summaries["x"]
    assert float(mean) == pytest.approx(0.6)
    assert float(low) < 0.6 < float(high) and float(high) - float(low) < 0.4
    assert float(p) == 2 / 64  # all 6 positive: only the 2 all-same sign patterns of 64 are as extreme
    assert exact
    summaries, exact = summarise_all({"x": torch.zeros(5, 1, 1, dtype=torch.float64)}, 200, 200, 0)
    assert exact and float(summaries["x"][3]) == 1.0


def test_monte_carlo_p_values_and_intervals_do_not_move_each_other():
    """Past 2^texts > permutations the flips are drawn; the resamples and the flips have their own generators."""
    generator = torch.Generator().manual_seed(5)
    values = (torch.randn(40, 2, 3, generator=generator, dtype=torch.float64) + torch.tensor([0.0, 0.8])[None, :, None])
    few, exact = summarise_all({"x": values}, 300, 200, 0)
    many, _ = summarise_all({"x": values}, 300, 2000, 0)
    more_boot, _ = summarise_all({"x": values}, 600, 200, 0)
    assert not exact
    torch.testing.assert_close(few["x"][1], many["x"][1])  # the interval ignores the permutations
    torch.testing.assert_close(few["x"][3], more_boot["x"][3])  # the p-value ignores the bootstrap
    assert (few["x"][3][1] <= 1 / 201 + 1e-12).all() and (few["x"][3][0] > 0.01).all()  # shifted heads only


def test_rounding_noise_never_outranks_a_real_change():
    """From tables alone heads rank by d_z: a head whose change is 1e-9 with a spread of 1e-11 stays below a
    real change, and the distance gets no p-value."""
    generator = torch.Generator().manual_seed(0)
    change = torch.randn(30, 1, 3, generator=generator, dtype=torch.float64) * 1e-11 + 1e-9  # noise in every head
    change[:, 0, 2] = torch.randn(30, generator=generator, dtype=torch.float64) * 0.5 + 1.0  # a real change, d_z ≈ 2
    diff = diff_of({"entropy": change}, list(range(30)), "a", "b", bootstrap=100, permutations=100)
    assert (diff.heads[0].layer, diff.heads[0].head) == (0, 2) and diff.heads[0].strongest == "entropy"
    with_distance = diff_of({DISTANCE: change.abs(), "entropy": change}, list(range(30)), "a", "b",
                            bootstrap=100, permutations=100)
    assert all(h.distance.p is None for h in with_distance.heads)
    assert json.loads(json.dumps(with_distance.document()))["heads"][0]["distance"]["p"] is None


def test_the_command_prints_the_ranking_as_json(planted, run_cli, tmp_path):
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    result = run_cli("atlas", str(texts), "--vs-model", planted, "--format", "json", "--top", "3",
                     "--bootstrap", "200", "--permutations", "200")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert (doc["heads"][0]["layer"], doc["heads"][0]["head"]) == (LAYER, HEAD) and len(doc["heads"]) == 3
    assert doc["n_texts"] == len(TEXTS) and set(doc["heads"][0]["statistics"]) >= {"entropy", "prev_score"}
    table = run_cli("atlas", str(texts), "--vs-model", planted, "--top", "2", "--width", "140")
    assert table.exit_code == 0 and f"  {LAYER}   {HEAD}" in table.stdout.replace("│", " ")
    bad = run_cli("atlas", str(texts), "--vs-model", "sample_configs/tiny.toml")
    assert bad.exit_code != 0 and ("tokenize it differently" in bad.stderr or "architecture" in bad.stderr), bad.stderr


@pytest.fixture(scope="module")
def exports(planted, tmp_path_factory):
    """The texts exported with each model (heads --format parquet), as a cluster would write them."""
    from typer.testing import CliRunner

    from attnviz.cli import app

    folder = tmp_path_factory.mktemp("exports")
    texts = folder / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    made = {}
    for name, model in (("base", None), ("planted", planted)):
        args = ["heads", "--file", str(texts), "--format", "parquet", "--out", str(folder / name), "--importance",
                "--similar-to", VS]
        result = CliRunner().invoke(app, args + (["--model", model] if model else []))
        assert result.exit_code == 0, result.output
        made[name] = folder / name
    return made


def test_two_exports_tables_give_the_changes_running_both_models_gives(planted, exports):
    """Read from the tables alone (no model runs), every statistic's change, interval and p equal those of the
    diff that runs both models (the same texts, the same seed: the same resamples); the planted head ranks first."""
    from attnviz.export.paired import exports_diff

    ran = api.checkpoint_diff(api.load(), api.load(planted), TEXTS, bootstrap=300, permutations=300)
    read = exports_diff(exports["base"], exports["planted"], bootstrap=300, permutations=300)
    assert (read.heads[0].layer, read.heads[0].head) == (LAYER, HEAD) and read.heads[0].distance is None
    assert read.ranked_by != ran.ranked_by and read.n_texts == len(TEXTS)
    assert read.note == ran.note == "8 texts: no p-value can be below 0.00781, and intervals from so few texts are rough"
    # and, as both exports hold importance.parquet, how much each head matters changed: B's normalised importance
    # minus A's, as head_importance computes each
    from attnviz.attribution.importance import head_importance

    before = head_importance(api.load(engine="fused"), TEXTS, vs=VS).gradient
    after = head_importance(api.load(planted, engine="fused"), TEXTS, vs=VS).gradient
    for head in read.heads:
        assert head.stats["importance"].mean == pytest.approx(float((after - before)[head.layer, head.head]), abs=1e-5)
    by_head = {(h.layer, h.head): h for h in ran.heads}
    for head in read.heads:
        for name, change in head.stats.items():
            if name in ("importance", "ablation"):
                continue  # from the tables alone (the run of both models compares attention)
            want = by_head[(head.layer, head.head)].stats[name]
            for got_value, want_value in zip((change.mean, change.low, change.high, change.p),
                                             (want.mean, want.low, want.high, want.p), strict=True):
                assert got_value == pytest.approx(want_value, abs=2e-5)


def test_exports_of_other_texts_are_refused_and_a_partial_one_is_said(exports, tmp_path, run_cli):
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from attnviz.errors import UsageError
    from attnviz.export.paired import exports_diff

    changed = tmp_path / "changed"
    shutil.copytree(exports["planted"], changed)
    (changed / "texts.parquet").unlink()  # the check reads heads.parquet's own hashes: no way around it
    heads = pq.read_table(changed / "heads.parquet")
    hashes = pc.if_else(pc.equal(heads["text_index"], 3), pa.scalar("0" * 16), heads["text_hash"])
    pq.write_table(heads.set_column(heads.column_names.index("text_hash"), "text_hash", hashes),
                   changed / "heads.parquet")
    with pytest.raises(UsageError, match="text 3 differs"):
        exports_diff(exports["base"], changed, bootstrap=100, permutations=100)
    partial = tmp_path / "partial"
    partial.mkdir()
    heads = pq.read_table(exports["planted"] / "heads.parquet")
    pq.write_table(heads.filter(pc.less(heads["text_index"], 5)), partial / "heads.parquet")
    shutil.copy(exports["planted"] / "texts.parquet", partial / "texts.parquet")
    diff = exports_diff(exports["base"], partial, bootstrap=100, permutations=100)
    assert diff.n_texts == 5 and "3 only in the first" in diff.note
    result = run_cli("atlas", str(exports["base"]), "--vs-model", str(partial), "--format", "json", "--top", "1",
                     "--bootstrap", "100", "--permutations", "100")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["note"] == diff.note and doc["ranked_by"] == diff.ranked_by and len(doc["heads"]) == 1
    mixed = run_cli("atlas", str(exports["base"]), "--vs-model", "sample_configs/tiny.toml")
    assert mixed.exit_code != 0 and "export folder" in mixed.stderr


@pytest.mark.slow
def test_the_diff_page_ranks_the_planted_head_and_draws_both_models(planted, exports, run_cli, tmp_path, browser):
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    page_path = tmp_path / "diff.html"
    result = run_cli("atlas", str(texts), "--vs-model", planted, "--out", str(page_path), "--bootstrap", "200",
                     "--permutations", "200")
    assert result.exit_code == 0, result.stderr
    tab = browser.new_page(viewport={"width": 1280, "height": 1000})
    tab.goto(page_path.as_uri())
    tab.wait_for_function("() => document.body.dataset.ready === '1'")
    first = tab.locator("#atlasrank li").first
    assert (first.get_attribute("data-layer"), first.get_attribute("data-head")) == (str(LAYER), str(HEAD))
    tab.click(f"#atlasgrid td.cell[data-layer='{LAYER}'][data-head='{HEAD}']")
    rows = tab.locator("#atlasall tr").all()
    assert len(rows) == 1 + len(api.heads_of(api.load(), TEXTS[:1]).stats)  # the JS divergence and every statistic
    shown = tab.locator("#atlastexts li").first.get_attribute("data-text")
    tab.click(f"#atlastexts li[data-text='{shown}']")
    assert tab.locator("#atlasmatrix").count() == 1 and tab.locator("#atlasmatrix2").count() == 1
    assert "minilm-scrambled" in tab.inner_text("#atlasattn") and "all-MiniLM-L6-v2" in tab.inner_text("#atlasattn")
    tab.locator("#atlasmatrix3").scroll_into_view_if_needed()  # the second minus the first, cell by cell
    box = tab.locator("#atlasmatrix3").bounding_box()
    tab.mouse.move(box["x"] + 2, box["y"] + 2)
    assert tab.inner_text("#atlasattntip").startswith("query “[CLS]” (0) → key “[CLS]” (0)")
    assert "(minilm-scrambled − all-MiniLM-L6-v2)" in tab.inner_text("#atlasattntip")
    # the keyboard: one tab stop in the grid, arrows walk it, Enter opens the head and focuses its title
    tab.focus("#atlasgrid td.cell[tabindex='0']")
    tab.keyboard.press("ArrowDown")
    tab.keyboard.press("ArrowRight")
    focused = tab.evaluate("() => [document.activeElement.dataset.layer, document.activeElement.dataset.head]")
    assert focused == [str(LAYER + 1), str(HEAD + 1)]
    tab.keyboard.press("Enter")
    assert tab.evaluate("() => document.activeElement.textContent") == f"Layer {LAYER + 1}, head {HEAD + 1}"
    tab.select_option("#atlasstat", "entropy")  # a statistic's change: ranked by its size
    ranked = [li.inner_text() for li in tab.locator("#atlasrank li").all()[:1]]
    assert ranked[0].startswith(f"L{LAYER}H{HEAD}")
    tab.close()
    # from two exports' tables the page is drawn too, and says the attention needs the models
    folder_page = tmp_path / "tables.html"
    result = run_cli("atlas", str(exports["base"]), "--vs-model", str(exports["planted"]), "--out", str(folder_page),
                     "--bootstrap", "100", "--permutations", "100")
    assert result.exit_code == 0, result.stderr
    tab = browser.new_page()
    tab.goto(folder_page.as_uri())
    tab.wait_for_function("() => document.body.dataset.ready === '1'")
    # ranked as the table ranks (largest |d_z|) by default, and the head shows the statistic it ranks on
    assert tab.input_value("#atlasstat") == "ranked"
    first = tab.locator("#atlasrank li").first
    assert (first.get_attribute("data-layer"), first.get_attribute("data-head")) == (str(LAYER), str(HEAD))
    tab.click(f"#atlasgrid td.cell[data-layer='{LAYER}'][data-head='{HEAD}']")
    tab.click("#atlastexts li >> nth=0")
    assert "two exports' tables" in tab.inner_text("#atlasattn")
    tab.close()


def test_the_python_api_corpus_example_runs_as_written(run_cli, tmp_path, monkeypatch):
    from pathlib import Path

    page = (Path(__file__).resolve().parent.parent / "docs" / "python-api.md").read_text(encoding="utf-8")
    marker = page.index("from attnviz.export.paired import exports_diff")
    block = page[page.rindex("```python", 0, marker) + len("```python"): page.index("```", marker)]
    root = Path(__file__).resolve().parent.parent
    texts = tmp_path / "texts.txt"
    texts.write_text("The cat sat on the mat.\nA dog ran in the park.\nBirds sing at dawn.\nIt rained all day.\n",
                     encoding="utf-8")
    for folder, model in (("base", "tiny"), ("tuned", "causal")):
        made = run_cli("heads", "--file", str(texts), "--format", "parquet", "--out", str(tmp_path / folder),
                       "--model", str(root / "sample_configs" / f"{model}.toml"))
        assert made.exit_code == 0, made.stderr
    (tmp_path / "sample_configs").symlink_to(root / "sample_configs")
    monkeypatch.chdir(tmp_path)
    names: dict = {}
    exec(compile(block, "docs/python-api.md", "exec"), names)  # the documentation's own example
    diff, tables = names["diff"], names["tables"]
    every = sum(len(api.extract(t).tokens) for t in names["texts"])  # fewer than 40: every token of the texts
    assert diff.n_texts == tables.n_texts == 4 and names["embedding"].coords.shape[3] == every < 40
    by_head = {(h.layer, h.head): h for h in diff.heads}
    for head in tables.heads:  # the tables' statistics change as the models' runs do
        assert head.stats["entropy"].mean == pytest.approx(by_head[(head.layer, head.head)].stats["entropy"].mean,
                                                           abs=1e-5)
    assert names["data"].n_texts == 4


def test_two_exports_read_differently_are_refused_and_other_losses_left_out(exports, run_cli, tmp_path):
    """Hidden special tokens in one export would show as a change of model: refused. Importance taken with
    another --vs text is another loss: left out, and the note says so."""
    from attnviz.export.paired import exports_diff

    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    hidden = tmp_path / "hidden"
    made = run_cli("heads", "--file", str(texts), "--format", "parquet", "--out", str(hidden), "--hide-special")
    assert made.exit_code == 0, made.stderr
    refused = run_cli("atlas", str(exports["base"]), "--vs-model", str(hidden))
    assert refused.exit_code != 0 and "hide_special: False and True" in refused.stderr
    other = tmp_path / "other-loss"
    made = run_cli("heads", "--file", str(texts), "--format", "parquet", "--out", str(other), "--importance",
                   "--similar-to", "Stocks fell sharply in early trading.")
    assert made.exit_code == 0, made.stderr
    diff = exports_diff(exports["base"], other, bootstrap=100, permutations=100)
    assert "importance" not in diff.heads[0].stats and "different losses" in diff.note


def test_a_diff_run_on_texts_compares_importance_too(planted, run_cli, tmp_path):
    from attnviz.attribution.importance import head_importance

    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    result = run_cli("atlas", str(texts), "--vs-model", planted, "--importance", "--similar-to", VS, "--format", "json",
                     "--bootstrap", "100", "--permutations", "100")
    assert result.exit_code == 0, result.stderr
    before = head_importance(api.load(engine="fused"), TEXTS, vs=VS).gradient
    after = head_importance(api.load(planted, engine="fused"), TEXTS, vs=VS).gradient
    for head in json.loads(result.stdout)["heads"]:
        assert head["statistics"]["importance"]["mean"] == pytest.approx(
            float((after - before)[head["layer"], head["head"]]), abs=1e-5)


def test_q_values_are_benjamini_hochberg_by_hand():
    from attnviz.analysis.checkpoint_diff import adjusted

    p = torch.tensor([0.01, 0.04, 0.03, 0.005, 0.5], dtype=torch.float64)
    # by hand: sorted .005 .01 .03 .04 .5; times m/rank: .025 .025 .05 .05 .5; running minimum from the end
    q = adjusted({"a": p[:2].reshape(1, 2), "b": p[2:].reshape(1, 3)})
    torch.testing.assert_close(torch.cat([q["a"].flatten(), q["b"].flatten()]),
                               torch.tensor([0.025, 0.05, 0.05, 0.025, 0.5], dtype=torch.float64))


def test_per_text_changes_are_written_for_a_researcher_to_join(planted, run_cli, tmp_path):
    import pyarrow.parquet as pq

    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    rows_path = tmp_path / "changes.parquet"
    result = run_cli("atlas", str(texts), "--vs-model", planted, "--format", "json", "--per-text", str(rows_path),
                     "--bootstrap", "100", "--permutations", "100")
    assert result.exit_code == 0, result.stderr
    rows = pq.read_table(rows_path).to_pylist()
    assert len(rows) == len(TEXTS) * 6 * 12
    mine = [r for r in rows if (r["layer"], r["head"]) == (LAYER, HEAD)]
    first = json.loads(result.stdout)["heads"][0]
    assert sum(r["js_divergence"] for r in mine) / len(TEXTS) == pytest.approx(first["distance"]["mean"], abs=1e-6)
    base, other = api.load(), api.load(planted)
    for r in mine[:3]:  # a text's change is that text's statistic in each model
        text = TEXTS[r["text_index"]]
        want = api.heads_of(other, [text]).stats["entropy"] - api.heads_of(base, [text]).stats["entropy"]
        assert r["entropy"] == pytest.approx(float(want[LAYER, HEAD]), abs=1e-5)
    bad = run_cli("atlas", str(texts), "--per-text", str(rows_path))
    assert bad.exit_code != 0 and "--vs-model" in bad.stderr
