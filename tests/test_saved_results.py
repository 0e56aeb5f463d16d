"""``--model FILE.npz``: every command that reads a result shows a saved one, as it was computed.

Two saved results: an extraction of the tiny config model (with its scores and value vectors), and
a generation of the causal config model. Each command on the file shows the numbers of the result
itself: read back from its output (``--values``, JSON, the page's data) and compared with the loaded
result, or with the same command run on the text where there is one.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from conftest import TINY

import attnviz
from attnviz.analysis import metrics
from attnviz.attribution.rollout import rollout
from attnviz.result import AttentionResult

TEXT = "the cat sat on the mat"
CAUSAL = str(Path(TINY).with_name("causal.toml"))
CELL = re.compile(r"^(?:1\.0|0?\.\d\d)$")  # a weight as --values writes it


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("saved")
    return {
        "extracted": attnviz.extract(TEXT, model=TINY, details=True).save(folder / "extracted.npz"),
        "generated": attnviz.generate("the cat sat on the", model=CAUSAL, max_new_tokens=5).save(folder / "gen.npz"),
    }


@pytest.fixture(params=["extracted", "generated"])
def case(request, saved) -> tuple[str, str, AttentionResult]:
    path = saved[request.param]
    return request.param, str(path), AttentionResult.load(path)


def cells(stdout: str, n: int) -> torch.Tensor:
    """The rows of weights ``--values`` printed: each line ending in ``n`` cells."""
    rows = [line.split()[-n:] for line in stdout.splitlines() if len(line.split()) > n]
    rows = [row for row in rows if all(CELL.match(c) or c == "·" for c in row)]  # · marks a weight of exactly 0
    return torch.tensor([[0.0 if c == "·" else float(c) for c in row] for row in rows], dtype=torch.float64)


def ok(r) -> str:
    assert r.exit_code == 0 and "error" not in r.stderr, (r.exit_code, r.stderr)
    return r.stdout


def same_on_the_text(run_cli, name: str, path: str, *args: str) -> None:
    """For the extraction: the command on the file prints what it prints on the text."""
    if name == "extracted":
        assert ok(run_cli(*args, "--model", path)) == ok(run_cli(*args, TEXT, "--model", TINY))


def test_the_file_is_a_source_that_returns_the_result(case):
    from attnviz.sources.resolve import load_source

    name, path, result = case
    source = load_source(path)
    assert (source.engine, source.name, source.causal, source.n_layers) == ("saved", result.model_name, result.causal, 2)
    can = source.capabilities
    assert can.fixed_input and not can.cross and not can.pairs
    assert can.details == can.value_norms == (name == "extracted")  # the generation keeps attentions only
    again = attnviz.extract(None, model=path)
    assert again.tokens == result.tokens and torch.equal(again.attentions, result.attentions)
    assert again.metadata == result.metadata
    one = source.extract(None, layers=[1])
    assert one.metadata["layers"] == [1] and torch.equal(one.attentions[0], result.attentions[1])


def test_heatmap(run_cli, case, tmp_path, monkeypatch):
    name, path, result = case
    n = len(result.tokens)
    shown = ok(run_cli("heatmap", "--model", path, "--layer", "1", "--head", "2", "--values", "--width", "200"))
    assert torch.allclose(cells(shown, n), result.attentions[1, 2].double(), atol=0.0051)
    same_on_the_text(run_cli, name, path, "heatmap", "--width", "200")  # --head 0 of every layer
    query = ok(run_cli("heatmap", "--model", path, "--query", "cat", "--values", "--width", "200"))
    assert torch.allclose(cells(query, n), result.attentions[:, :, 1].reshape(-1, n).double(), atol=0.0051)
    from attnviz.render import image

    drawn = []
    draw = image.render_image
    monkeypatch.setattr(image, "render_image", lambda view, path, **kw: drawn.append(view) or draw(view, path, **kw))
    out = tmp_path / "x.png"
    assert ok(run_cli("heatmap", "--model", path, "--layer", "1", "--head", "all", "--out", str(out))).strip() == \
        f"wrote {out}"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert torch.allclose(torch.as_tensor(drawn[0].panels), result.attentions[1].double(), atol=1e-6)


def test_heads(run_cli, case):
    name, path, result = case
    doc = json.loads(ok(run_cli("heads", "--model", path, "--format", "json")))
    assert doc["model"] == result.model_name and doc["tokens"] == result.tokens
    a = result.attentions
    expected = {"entropy": metrics.entropy(a), "self": metrics.self_score(a), "first": metrics.first_token_score(a),
                "max": metrics.max_weight(a), "distance": metrics.mean_distance(a)}
    assert len(doc["heads"]) == a.shape[0] * a.shape[1]
    for row in doc["heads"]:
        for statistic, values in expected.items():
            assert row[statistic] == pytest.approx(float(values[row["layer"], row["head"]]), abs=1e-5), statistic
    if name == "extracted":
        on_text = json.loads(ok(run_cli("heads", TEXT, "--model", TINY, "--format", "json")))
        assert on_text["heads"] == doc["heads"]


def test_compare_heads(run_cli, case):
    name, path, result = case
    shown = ok(run_cli("compare-heads", "--model", path, "--width", "100"))
    assert "no TEXT given" not in shown  # the file's own text, not the example sentence
    distance = metrics.head_distance(result.attentions)
    n_heads = result.n_heads
    pairs = re.findall(r"│ L(\d)H(\d) │ L(\d)H(\d) │\s+([\d.]+) │", shown)
    assert len(pairs) == 10  # the five most similar and the five most different
    for l1, h1, l2, h2, value in pairs:
        i, j = int(l1) * n_heads + int(h1), int(l2) * n_heads + int(h2)
        assert float(value) == pytest.approx(float(distance[i, j]), abs=6e-4)
    same_on_the_text(run_cli, name, path, "compare-heads", "--width", "100")


def test_rollout(run_cli, case):
    name, path, result = case
    shown = ok(run_cli("rollout", "--model", path, "--values", "--width", "200"))
    rolled = rollout(result.attentions)[-1]
    assert torch.allclose(cells(shown, len(result.tokens)), rolled.double(), atol=0.0051)
    same_on_the_text(run_cli, name, path, "rollout", "--width", "200")
    norm = run_cli("rollout", "--model", path, "--norm", "--width", "200")
    if name == "extracted":
        assert ok(norm) == ok(run_cli("rollout", TEXT, "--model", TINY, "--norm", "--width", "200"))
    else:
        assert norm.exit_code == 2 and "saved without them" in norm.stderr


def _page(path: Path) -> dict:
    text = path.read_text(encoding="utf-8")
    blob = re.search(r'<script type="application/json" id="attnviz-data">(.*?)</script>', text, re.S).group(1)
    return json.loads(blob.replace("<\\/", "</"))


def test_view(run_cli, case, tmp_path):
    name, path, result = case
    out = tmp_path / "p.html"
    assert ok(run_cli("view", "--model", path, "--page", str(out))).strip() == f"wrote {out}"
    page = _page(out)
    assert page["kinds"]["self"]["rows"] == result.tokens and page["kinds"]["self"]["layers"] == [0, 1]
    assert len(page["stats"]["rows"]) == result.n_layers * result.n_heads
    steps = page["generation"]  # a saved generation keeps its step slider, opened on the first new token
    if name == "extracted":
        assert steps is None
    else:
        start = result.metadata["prompt_length"]
        assert steps["promptLength"] == start and steps["generated"] == len(result.tokens) - start
        assert page["initial"]["query"] == start
    if name == "extracted":  # everything but the title (the text there, "the config's input" here)
        text = tmp_path / "text.html"
        ok(run_cli("view", TEXT, "--model", TINY, "--page", str(text)))
        on_text = _page(text)
        assert page["qk"] and {k: v for k, v in page.items() if k != "title"} == \
            {k: v for k, v in on_text.items() if k != "title"}


def test_encoder_decoder_kinds(run_cli, tmp_path):
    """A saved encoder-decoder result: --kind decoder and cross read its decoder_attentions and cross_attentions."""
    gen = torch.Generator().manual_seed(0)
    source, target = ["the", "cat", "sat", "</s>"], ["le", "chat", "</s>"]

    def weights(q: int, k: int, causal: bool = False) -> torch.Tensor:
        scores = torch.randn(2, 2, q, k, generator=gen)
        if causal:
            scores = scores.masked_fill(torch.ones(q, k).triu(1).bool(), float("-inf"))
        return scores.softmax(-1)

    path = AttentionResult(tokens=source, attentions=weights(4, 4), model_name="t5-ish", target_tokens=target,
                           decoder_attentions=weights(3, 3, causal=True), cross_attentions=weights(3, 4),
                           special=[False, False, False, True], target_special=[False, False, True],
                           ).save(tmp_path / "t5.npz")
    result = AttentionResult.load(path)
    cross = ok(run_cli("heatmap", "--model", str(path), "--kind", "cross", "--layer", "1", "--head", "1", "--values"))
    assert torch.allclose(cells(cross, 4), result.cross_attentions[1, 1].double(), atol=0.0051)
    doc = json.loads(ok(run_cli("heads", "--model", str(path), "--kind", "decoder", "--format", "json")))
    assert doc["tokens"] == target
    entropy = metrics.entropy(result.decoder_attentions)
    assert [row["entropy"] for row in doc["heads"]] == pytest.approx(entropy.flatten().tolist(), abs=1e-5)
    r = run_cli("rollout", "--model", str(path), "--kind", "cross")
    assert r.exit_code == 2 and "--kind cross attention is target queries over source keys" in r.stderr


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["heatmap", "some text"], "is a saved result of 6 tokens, shown as it was computed: its text is fixed"),
        (["heads", "some text"], "its text is fixed"),
        (["compare-heads", "some text"], "its text is fixed"),
        (["heatmap", "--engine", "native"], "--engine native is for running a model; "),
        (["heads", "--device", "cuda"], "--device cuda is for running a model; "),
        (["rollout", "--revision", "main"], "--revision is for running a model; "),
        (["view", "--page", "p.html", "--causal"], "--causal is for running a model; "),
        (["heatmap", "--no-causal"], "--no-causal is for running a model; "),
        (["heatmap", "--pair", "It was tired."], "--pair: "),
        (["compare-heads", "--target", "le chat"], "--target: "),
        (["rollout", "--truncate"], "--truncate: "),
        (["heatmap", "--kind", "decoder"], "--kind decoder needs an encoder-decoder model"),
        (["heatmap", "--layer", "2"], "--layer 2 is out of range; "),
        (["heads", "--probe", "induction"], "--probe induction runs the model on random tokens"),
    ],
)
def test_what_needs_a_model_is_refused(run_cli, saved, tmp_path, monkeypatch, args, expected):
    monkeypatch.chdir(tmp_path)
    r = run_cli(*args, "--model", str(saved["extracted"]))
    assert r.exit_code == 2, (r.stdout, r.stderr)
    assert expected in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_a_missing_or_damaged_file_is_one_line(run_cli, saved, tmp_path):
    damaged = tmp_path / "damaged.npz"
    damaged.write_bytes(saved["extracted"].read_bytes()[:300])
    not_ours = tmp_path / "plain.npz"
    import numpy as np

    np.savez(not_ours, attentions=np.zeros((1, 1, 2, 2)))
    for path, expected in [(tmp_path / "missing.npz", "does not exist"), (damaged, "is not an attnviz result file"),
                           (not_ours, "is not an attnviz result file")]:
        for command in ("heatmap", "heads"):
            r = run_cli(command, "--model", str(path))
            assert r.exit_code == 1 and expected in r.stderr, (command, r.stderr)
            assert r.stderr.startswith("attnviz: error: ") and len(r.stderr.strip().splitlines()) == 1
    r = run_cli("generate", "the cat", "--model", str(saved["generated"]))
    assert r.exit_code == 1 and "is a saved attnviz result, not a model" in r.stderr


def test_a_result_saved_with_some_layers_keeps_their_numbers(run_cli, saved, tmp_path):
    path = AttentionResult.load(saved["extracted"]).save(tmp_path / "last.npz", layers=[1])
    r = run_cli("heatmap", "--model", str(path), "--layer", "1")
    assert ok(r).startswith("tiny · layer 1 · head 0")
    r = run_cli("heatmap", "--model", str(path), "--layer", "0")
    assert r.exit_code == 2 and "--layer 0 is out of range; " in r.stderr and "holds layers 1" in r.stderr
    doc = json.loads(ok(run_cli("heads", "--model", str(path), "--layer", "1", "--format", "json")))
    whole = json.loads(ok(run_cli("heads", "--model", str(saved["extracted"]), "--layer", "1", "--format", "json")))
    assert {row["layer"] for row in doc["heads"]} == {1} and doc["heads"] == whole["heads"]
    r = run_cli("rollout", "--model", str(path))
    assert r.exit_code == 2 and "rollout chains every layer from 0; tiny holds only layers 1, not layer 0" in r.stderr
