"""The atlas's numbers from an export's tables (issue 32, part 1's data): pyarrow group-bys and whole-column numpy,
checked against a plain Python reading of the same rows."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attnviz.export.atlas_data import atlas_data

TEXTS = ["The cat sat on the mat.", "A dog chased the cat around the garden.", "Attention is all you need.",
         "The river runs through the old city.", "She read the letter twice before she answered.",
         "Birds sing at dawn in the quiet park.", "He plays the piano every evening."]


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    from typer.testing import CliRunner

    from attnviz.cli import app

    root = tmp_path_factory.mktemp("atlas")
    texts = root / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["heads", "--file", str(texts), "--format", "parquet", "--out", str(root / "out")])
    assert result.exit_code == 0, result.output
    return root / "out"


def test_the_numbers_equal_a_plain_reading_of_the_rows(export):
    import pyarrow.parquet as pq

    data = atlas_data(export, bins=10, top=3)
    rows = pq.read_table(export / "heads.parquet").to_pylist()
    assert data.n_texts == len(TEXTS) and data.layers == list(range(6)) and data.n_heads == 12
    assert data.texts[0] == TEXTS[0] and data.model
    for stat in ("entropy", "prev_score", "first"):
        for layer, head in ((0, 0), (3, 7), (5, 11)):
            mine = [r for r in rows if (r["layer"], r["head"]) == (layer, head)]
            values = [r[stat] for r in mine]
            assert data.means[stat][layer, head] == pytest.approx(sum(values) / len(values), abs=1e-12)
            edges = data.edges[stat]
            by_hand = [0] * 10
            for v in values:
                by_hand[min(9, max(0, int(np.searchsorted(edges, v, side="right")) - 1))] += 1
            assert data.counts[stat][layer, head].tolist() == by_hand and sum(by_hand) == len(TEXTS)
            best = sorted(mine, key=lambda r: -r[stat])[:3]
            assert [data_value(rows, stat, layer, head, i) for i in data.top_texts[stat][layer, head]] == \
                [r[stat] for r in best]
    for label, rates in data.label_rates.items():
        for layer, head in ((0, 0), (2, 5)):
            earned = sum(label in r["labels"] for r in rows if (r["layer"], r["head"]) == (layer, head))
            assert math.isclose(rates[layer, head], earned / len(TEXTS))
    assert any(rates.max() > 0 for rates in data.label_rates.values())


def data_value(rows, stat, layer, head, text_index) -> float:
    return next(r[stat] for r in rows if (r["layer"], r["head"], r["text_index"]) == (layer, head, int(text_index)))


def test_a_folder_without_the_table_is_one_clear_error(tmp_path):
    from attnviz.errors import InputError

    with pytest.raises(InputError, match=r"heads\.parquet"):
        atlas_data(tmp_path)


def test_the_command_gives_the_numbers_from_texts_or_an_export_folder(export, run_cli, tmp_path):
    import json

    data = atlas_data(export)
    from_folder = json.loads(run_cli("atlas", str(export), "--format", "json").stdout)
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    run = run_cli("atlas", str(texts), "--format", "json")
    assert run.exit_code == 0, run.stderr
    from_texts = json.loads(run.stdout)
    for doc in (from_folder, from_texts):
        assert doc["n_texts"] == len(TEXTS) and len(doc["heads"]) == 6 * 12
        head = next(h for h in doc["heads"] if (h["layer"], h["head"]) == (3, 7))
        assert head["means"]["entropy"] == pytest.approx(float(data.means["entropy"][3, 7]), abs=1e-6)
        assert head["top_texts"]["first"] == [int(t) for t in data.top_texts["first"][3, 7]]
        assert sum(head["histograms"]["prev_score"]) == len(TEXTS)
    table = run_cli("atlas", str(export), "--top", "2", "--width", "120")
    assert table.exit_code == 0 and "highest corpus mean" in table.stdout and "L0H2" in table.stdout
    bad = run_cli("atlas", str(export), "--vs-model", "sample_configs/tiny.toml")
    assert bad.exit_code != 0 and "is an export folder" in bad.stderr


@pytest.mark.slow
def test_the_atlas_page_shows_the_grid_a_heads_distribution_and_its_texts(export, run_cli, tmp_path, browser):
    page_path = tmp_path / "atlas.html"
    result = run_cli("atlas", str(export), "--out", str(page_path))
    assert result.exit_code == 0, result.stderr
    data = atlas_data(export)
    tab = browser.new_page(viewport={"width": 1280, "height": 900})
    requests = []
    tab.on("request", lambda request: requests.append(request.url) if not request.url.startswith("file:") else None)
    tab.goto(page_path.as_uri())
    tab.wait_for_function("() => document.body.dataset.ready === '1'")
    assert tab.locator("#atlasgrid td.cell").count() == 6 * 12 and requests == []
    tab.select_option("#atlasstat", "prev_score")
    title = tab.get_attribute("#atlasgrid td.cell[data-layer='0'][data-head='2']", "title")
    assert title == f"L0H2: prev_score {data.means['prev_score'][0, 2]:.3f}"
    first = tab.locator("#atlasrank li").first
    best = np.unravel_index(np.argmax(data.means["prev_score"]), data.means["prev_score"].shape)
    assert first.get_attribute("data-layer") == str(best[0]) and first.get_attribute("data-head") == str(best[1])
    tab.select_option("#atlasorder", "asc")  # the other way round: the head with the lowest mean first
    first = tab.locator("#atlasrank li").first
    least = np.unravel_index(np.argmin(data.means["prev_score"]), data.means["prev_score"].shape)
    assert (first.get_attribute("data-layer"), first.get_attribute("data-head")) == (str(least[0]), str(least[1]))
    tab.select_option("#atlasorder", "desc")
    tab.click("#atlasgrid td.cell[data-layer='3'][data-head='7']")
    bars = [int(b.get_attribute("data-count")) for b in tab.locator("#atlashist rect").all()]
    assert bars == data.counts["prev_score"][3, 7].tolist()
    shown = [int(li.get_attribute("data-text")) for li in tab.locator("#atlastexts li").all()]
    assert shown == data.top_texts["prev_score"][3, 7].tolist()
    assert TEXTS[shown[0]] in tab.inner_text("#atlastexts")
    tab.click(f"#atlastexts li[data-text='{shown[0]}']")  # the head's attention on that text, one click away
    from attnviz.api import load

    weights = load().extract(TEXTS[shown[0]]).attentions[3, 7]
    row, col = divmod(int(weights.argmax()), weights.shape[-1])  # the largest weight: the top of the colour scale
    drawn = tab.evaluate("""([row, col, n]) => { const c = document.getElementById('atlasmatrix');
        const cell = c.width / n; const d = c.getContext('2d').getImageData(col * cell + 1, row * cell + 1, 1, 1).data;
        return {w: c.width, text: c.dataset.text, rgb: [d[0], d[1], d[2]]}; }""", [row, col, weights.shape[-1]])
    assert drawn["text"] == str(shown[0]) and drawn["w"] % weights.shape[-1] == 0
    assert drawn["rgb"] == [253, 231, 37]  # viridis's top: the weight the matrix is scaled to
    tab.close()
    bad = run_cli("atlas", str(export), "--out", str(tmp_path / "atlas.png"))
    assert bad.exit_code != 0 and "ending in .html" in bad.stderr


def test_the_command_takes_what_a_user_would_give_it(export, run_cli, tmp_path):
    """The table's path for its folder, a JSONL field by --field, --top on the page, and clear refusals."""
    import json
    import re

    by_path = run_cli("atlas", str(export / "heads.parquet"), "--format", "json", "--top", "1")
    by_folder = run_cli("atlas", str(export), "--format", "json", "--top", "1")
    assert by_path.exit_code == 0 and json.loads(by_path.stdout) == json.loads(by_folder.stdout)
    jsonl = tmp_path / "texts.jsonl"
    jsonl.write_text("".join(json.dumps({"id": i, "sentence": t}) + "\n" for i, t in enumerate(TEXTS[:3])),
                     encoding="utf-8")
    read = run_cli("atlas", str(jsonl), "--field", "sentence", "--format", "json")  # as export and heads --file
    assert read.exit_code == 0, read.stderr
    assert json.loads(read.stdout)["n_texts"] == 3
    old = run_cli("atlas", str(jsonl), "--column", "sentence", "--format", "json")  # its old name, one release
    assert old.exit_code == 0 and "--column is now --field" in old.stderr and old.stdout == read.stdout
    page = tmp_path / "top.html"
    made = run_cli("atlas", str(export), "--out", str(page), "--top", "1", "--embed-tokens", "0")
    assert made.exit_code == 0, made.stderr
    doc = json.loads(re.search(r'id="atlas-data">(.*?)</script>', page.read_text(encoding="utf-8"), re.S)[1])
    data = atlas_data(export)
    highest = {(data.layers[i // 12], i % 12) for s in data.stats for i in [int(data.means[s].argmax())]}
    assert {(h["layer"], h["head"]) for h in doc["heads"]} == highest and "embedding" not in doc
    one = tmp_path / "one.txt"
    one.write_text("Hi\n", encoding="utf-8")
    lone = run_cli("atlas", str(one), "--model", "sample_configs/tiny.toml", "--out", str(tmp_path / "one.html"))
    assert lone.exit_code == 0 and "no query-key embedding" in lone.stderr and (tmp_path / "one.html").is_file()
    for args, said in (((str(export), "--out", str(tmp_path / "a.html"), "--format", "json"), "give one of them"),
                       ((str(export), "--out", str(tmp_path / "missing" / "a.html")), "does not exist"),
                       ((str(export), "--embed-tokens", "1"), "at least 2"),
                       ((str(export), "--importance"), "export folder brings its own")):
        bad = run_cli("atlas", *args)
        assert bad.exit_code != 0 and said in bad.stderr and bad.stderr.count("\n") == 1, (args, bad.stderr)


def test_cited_texts_attention_fits_its_budget_by_pooling_more():
    """A model of many heads cites many texts: the drawings are pooled coarser to stay within the budget, and a
    pooled cell is the largest weight of its block (so the strongest weight still shows)."""
    import base64

    import torch

    from attnviz import api
    from attnviz.export.atlas_attach import attach_attention

    texts = {"0": "The cat sat on the mat and the dog watched it from the old wooden door.", "1": "A dog ran."}
    heads = [{"layer": layer, "head": head, "top_texts": {"x": [0, 1]}} for layer in range(6) for head in range(12)]
    doc = {"heads": heads, "texts": texts}
    attach_attention(doc, [api.load()], list(range(6)), 12, budget=72 * 2 * 100)
    drawn = doc["attention"]["0"]
    cells = sum(len(base64.b64decode(b)) for entry in doc["attention"].values() for bs in entry["heads"].values()
                for b in bs)
    assert drawn["side"] <= 10 and drawn["pool"] == 2 and cells <= 72 * 2 * 100
    weights = api.extract(texts["0"]).attentions[3, 7]
    pooled = torch.nn.functional.max_pool2d(weights[None], 2, ceil_mode=True)[0]
    got = torch.tensor(list(base64.b64decode(drawn["heads"]["3,7"][0]))).reshape(pooled.shape).float()
    torch.testing.assert_close(got, (pooled / pooled.max() * 255).round(), atol=1, rtol=0)
