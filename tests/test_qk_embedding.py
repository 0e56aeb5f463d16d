"""The joint query-key embedding (issue 32, part 1): queries and keys as transformers computes them, a
normalisation that leaves every softmax as it was, a PCA equal to numpy's, and the atlas page that draws it
with each point's token on hover."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnviz import api
from attnviz.analysis.qk_embedding import choose_texts, normalise, project, qk_embedding, quantised, tokens_for_budget
from attnviz.errors import UsageError

TEXTS = {i: t for i, t in enumerate([
    "The cat sat on the mat.", "A dog chased the cat around the garden.", "我爱北京天安门。",
    "The river runs through the old city.", "She read the letter twice before she answered.",
    "Birds sing at dawn in the quiet park."])}


def test_the_normalisation_leaves_every_softmax_as_it_was():
    generator = torch.Generator().manual_seed(0)
    q, k = torch.randn(12, 8, generator=generator) * 3 + 1, torch.randn(12, 8, generator=generator) * 0.2 - 4
    nq, nk = normalise(q, k)
    before = torch.softmax(q.double() @ k.double().T, dim=-1)
    after = torch.softmax(nq @ nk.T, dim=-1)
    torch.testing.assert_close(after, before, rtol=0, atol=1e-12)
    torch.testing.assert_close(nk.mean(0), nq.mean(0), rtol=0, atol=1e-12)  # one centroid (docs/design.md)
    c = (k.double().norm(dim=1).mean() / q.double().norm(dim=1).mean()).sqrt()  # the scaling first: equal mean norms
    torch.testing.assert_close(nq, q.double() * c, rtol=1e-12, atol=1e-12)


def _minilm_queries_keys(layer: int, head: int, order: list[int], n: int) -> tuple[np.ndarray, np.ndarray]:
    """The head's queries and keys as transformers' BertModel computes them, from its own hidden states."""
    from transformers import AutoModel, AutoTokenizer

    from attnviz.sources.resolve import default_model_folder

    folder = default_model_folder()
    model = AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    attention = model.encoder.layer[layer].attention.self
    d = attention.attention_head_size
    queries, keys = [], []
    with torch.no_grad():
        for index in order:
            hidden = model(**tokenizer(TEXTS[index], return_tensors="pt"), output_hidden_states=True).hidden_states[layer]
            queries.append(attention.query(hidden)[0, :, head * d:(head + 1) * d])
            keys.append(attention.key(hidden)[0, :, head * d:(head + 1) * d])
    return torch.cat(queries)[:n].double().numpy(), torch.cat(keys)[:n].double().numpy()


def _numpy_embedding(q: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The module's recipe by hand in numpy: norms, centroid, then the SVD's two leading axes."""
    c = np.sqrt(np.linalg.norm(k, axis=1).mean() / np.linalg.norm(q, axis=1).mean())
    q, k = q * c, k / c
    both = np.concatenate([q, k - k.mean(0) + q.mean(0)])
    centred = both - both.mean(0)
    _, s, vt = np.linalg.svd(centred, full_matrices=False)
    points = centred @ vt[:2].T
    return points, s[:2] ** 2 / (s**2).sum()


@pytest.mark.parametrize("engine", ["native", "fused"])
def test_the_embedding_equals_numpys_pca_of_transformers_queries_and_keys(engine):
    source = api.load(engine=engine)
    embedding = qk_embedding(source, TEXTS, max_tokens=40)
    assert len(embedding.tokens) == 40 and embedding.coords.shape == (6, 12, 2, 40, 2)
    order = choose_texts(TEXTS)
    assert embedding.text_index[0] == order[0] and embedding.positions[0] == 0
    first = [t for t, i in zip(embedding.tokens, embedding.text_index, strict=True) if i == order[0]]
    assert first == api.extract(TEXTS[order[0]]).tokens[: len(first)]  # whole texts, in the seeded order
    q, k = _minilm_queries_keys(2, 5, order, 40)
    points, explained = _numpy_embedding(q, k)
    got = np.concatenate([embedding.coords[2, 5, 0], embedding.coords[2, 5, 1]])
    signs = np.sign((got * points).sum(0))  # an axis's sign is a convention: compare up to it
    scale = np.abs(points).max()
    assert np.abs(got - points * signs).max() < 2e-3 * scale  # float16 storage of q and k
    np.testing.assert_allclose(embedding.explained[2, 5], explained, atol=1e-3)


def test_grouped_query_heads_read_their_key_head_on_the_fused_engine(tiny_hf):
    """A LLaMA with 4 query heads over 2 key heads: the fused engine's keys of head h are key head h // 2,
    after RoPE, equal to the native engine's (which repeats them as transformers does)."""
    native, fused = api.load(tiny_hf["llama"], engine="native"), api.load(tiny_hf["llama"], engine="fused")
    texts = ["hello world, hello", "a b c"]
    got = fused.extract_batch(texts, queries_keys=True)
    want = native.extract_batch(texts, queries_keys=True)
    for a, b in zip(got, want, strict=True):
        assert a.queries.shape == b.queries.shape and a.keys.shape[1] == 4
        torch.testing.assert_close(a.queries, b.queries, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(a.keys, b.keys, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(a.keys[:, 0], a.keys[:, 1])  # one key head read by two query heads
    with pytest.raises(UsageError, match="queries_keys"):
        api.load(tiny_hf["llama"], engine="hf").extract("a b", queries_keys=True)


def test_quantised_points_keep_the_picture_within_half_a_step():
    embedding = qk_embedding(api.load(), TEXTS, max_tokens=30)
    cells, (x0, y0, span) = quantised(embedding, 1, 3)
    back = np.frombuffer(cells, dtype=np.uint8).reshape(2, 30, 2) / 255 * span + np.array([x0, y0])
    assert np.abs(back - embedding.coords[1, 3]).max() <= span / 255 / 2 + 1e-6
    assert tokens_for_budget(72, 6_000_000) == 10_000 and tokens_for_budget(1024, 6_000_000) == 1464


def test_project_matches_numpy_on_random_vectors():
    generator = torch.Generator().manual_seed(3)
    q, k = torch.randn(50, 6, generator=generator), torch.randn(50, 6, generator=generator) + 2
    qc, kc, share = project(q, k)
    points, explained = _numpy_embedding(q.double().numpy(), k.double().numpy())
    got = np.concatenate([qc.numpy(), kc.numpy()])
    np.testing.assert_allclose(np.abs(got), np.abs(points), atol=1e-4)
    np.testing.assert_allclose(share.numpy(), explained, atol=1e-6)


@pytest.mark.slow
def test_the_page_names_a_points_token_on_hover_and_finds_tokens(run_cli, tmp_path, browser):
    import json
    import re

    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS.values()) + "\n", encoding="utf-8")
    page_path = tmp_path / "atlas.html"
    result = run_cli("atlas", str(texts), "--out", str(page_path), "--embed-tokens", "50")
    assert result.exit_code == 0, result.stderr
    text = page_path.read_text(encoding="utf-8")
    doc = json.loads(re.search(r'<script type="application/json" id="atlas-data">(.*?)</script>', text, re.S)[1])
    embedding = doc["embedding"]
    assert len(embedding["tokens"]) == 50 and len(embedding["heads"]) == 72
    tab = browser.new_page(viewport={"width": 1280, "height": 1400})
    tab.goto(page_path.as_uri())
    tab.wait_for_function("() => document.body.dataset.ready === '1'")
    tab.click("#atlasgrid td.cell[data-layer='2'][data-head='5']")
    box = tab.locator("#atlasqkcanvas").bounding_box()
    cells = np.frombuffer(__import__("base64").b64decode(embedding["heads"]["2,5"]["points"]), dtype=np.uint8)
    cells = cells.reshape(2, 50, 2)
    # a key standing alone (no other point within 9 px of it), so the hover can only mean it
    pixels = 8 + cells.reshape(-1, 2) / 255 * (360 - 16)
    alone = next(i for i in range(50) if np.sort(np.linalg.norm(pixels - pixels[50 + i], axis=1))[1] > 9)
    x, y = tab.evaluate("(i) => window.attnvizAtlas.pointAt('key', i)", alone)
    at = (box["x"] + 1 + x, box["y"] + 1 + y)  # the canvas's 1 px border, then its own pixels
    tab.mouse.move(*at)
    tip = tab.inner_text("#atlasqktip")
    assert tip.startswith("key") and embedding["tokens"][alone] in tip
    assert f"text #{embedding['text'][alone]}, token {embedding['position'][alone]}" in tip
    tab.fill("#atlasqkfind", "the")
    want = sum(t.lower() == "the" for t in embedding["tokens"])
    assert tab.inner_text("#atlasqkcount") == f"{want} tokens" and want >= 2
    # a click keeps the point: the tip comes back to it when the mouse leaves, and → steps to the next token
    tab.mouse.click(*at)
    tab.mouse.move(box["x"] - 20, box["y"] - 20)
    assert tab.get_attribute("#atlasqktip", "data-index") == str(alone)
    tab.keyboard.press("ArrowRight")
    assert tab.get_attribute("#atlasqktip", "data-index") == str((alone + 1) % 50)
    assert embedding["tokens"][(alone + 1) % 50] in tab.inner_text("#atlasqktip")
    tab.select_option("#atlasstat", "prev_score")  # another statistic: the head keeps its search and kept token
    assert tab.input_value("#atlasqkfind") == "the" and tab.inner_text("#atlasqkcount") == f"{want} tokens"
    assert tab.get_attribute("#atlasqktip", "data-index") == str((alone + 1) % 50)
    tab.close()
