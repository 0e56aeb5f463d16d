"""The page of pictures (``attnviz view --image``, ``attnviz serve --image``): its picture view's data equals the
model's attention (a token's weights on each picture's patches, written out on the result's tensor), its matrix
with each picture collapsed equals the sums of the expanded one, a text's page never offers the picture view, and in
a real browser (Debian's chromium through Playwright) hovering a token draws its heat on its strongest patch and
clicking a patch puts each token's weight on it on the token list. The models are test_images.py's tiny random ones,
built offline."""

from __future__ import annotations

import base64
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import TINY, open_offline
from picture_models import planted_vit

from attnviz.render.page import head_values
from attnviz.render.page_schema import check_page_data
from attnviz.render.pyramid import decode_tile

TEXT = "what is in the picture ?"


@pytest.fixture(scope="module")
def vit(tmp_path_factory) -> Path:
    """test_images.py's planted ViT: layer 0, head 0 makes [CLS] read patch 5 (r1c1)."""
    return planted_vit(tmp_path_factory.mktemp("vit") / "planted", 5)


@pytest.fixture(scope="module")
def pictures(tmp_path_factory) -> list[Path]:
    """A wide picture and a tall one (random pixels)."""
    from PIL import Image

    root = tmp_path_factory.mktemp("pictures")
    paths = []
    for n, (width, height) in enumerate([(64, 48), (40, 56)]):
        paths.append(root / f"p{n}.png")
        Image.fromarray((np.random.RandomState(n).rand(height, width, 3) * 255).astype(np.uint8)).save(paths[-1])
    return paths


def _data(path: Path) -> dict:
    text = path.read_text(encoding="utf-8")
    blob = re.search(r'<script type="application/json" id="attnviz-data">(.*?)</script>', text, re.S).group(1)
    return json.loads(blob)


def _tile(data: dict, layer: int, head: int | str) -> np.ndarray:
    """The picture view's ``[queries, patches]`` weights of a layer's head (or ``"mean"``), decoded as the page does."""
    p = data["pictures"]
    text = p["mean"][layer] if head == "mean" else p["weights"][layer][head]
    keys = sum(len(image["positions"]) for image in p["images"])
    return decode_tile(text, p["encoding"], (len(p["queries"]), keys))


def test_the_picture_views_data_is_the_models_attention_on_each_pictures_patches(run_cli, llava, pictures, tmp_path):
    """view TEXT --image P1 --image P2: per layer and head, each text token's weights on every picture's patches
    (picture 2's after picture 1's) equal the result's, to half-float precision, and so does their mean; one token's
    row is checked by hand on the tensor: its weights on picture 2's 16 patch tokens, row-major."""
    from attnviz.images.vlm import vlm_attention

    out = tmp_path / "two.html"
    made = run_cli("view", TEXT, "--image", str(pictures[0]), "--image", str(pictures[1]), "--model", str(llava),
                   "--page", str(out))
    assert made.exit_code == 0, made.stderr
    data = _data(out)
    check_page_data(data)
    result = vlm_attention(TEXT, pictures, str(llava))
    metas = result.metadata["images"]
    p = data["pictures"]
    assert data["initial"]["view"] == "picture"
    assert [image["positions"] for image in p["images"]] == [m["positions"] for m in metas]
    assert [image["boxes"] for image in p["images"]] == [m["boxes"] for m in metas]
    assert [image["at"] for image in p["images"]] == [0, 16]
    text_tokens = [i for i in range(len(result.tokens)) if i not in set(metas[0]["image_positions"] +
                                                                         metas[1]["image_positions"])]
    assert p["queries"] == text_tokens and [result.tokens[i] for i in text_tokens] == TEXT.split()
    keys = metas[0]["positions"] + metas[1]["positions"]
    for layer in range(2):
        for head in range(4):
            expected = result.attentions[layer, head][text_tokens][:, keys].numpy()
            np.testing.assert_allclose(_tile(data, layer, head), expected, rtol=2.0**-10, atol=1e-7)
        mean = result.attentions[layer].double().mean(0)[text_tokens][:, keys].numpy()
        np.testing.assert_allclose(_tile(data, layer, "mean"), mean, rtol=2.0**-10, atol=1e-7)
    # By hand: the last word's row in layer 1, head 2, on picture 2 (its first token and 16 in a row).
    first = metas[1]["first"]
    by_hand = [float(result.attentions[1, 2, len(result.tokens) - 1, first + k]) for k in range(16)]
    row = _tile(data, 1, 2)[-1, 16:32]
    assert row.tolist() == pytest.approx(by_hand, rel=2.0**-10, abs=1e-7)
    assert float(row.sum()) == pytest.approx(float(result.attentions[1, 2, -1, first : first + 16].sum()), rel=1e-3)
    # The pictures themselves: in the page, as the files' own pixels (a small one kept at its size).
    from PIL import Image

    for image, path in zip(p["images"], pictures, strict=True):
        kind, encoded = re.match(r"data:image/(jpeg|png);base64,(.*)", image["src"]).groups()
        assert kind == Image.open(io.BytesIO(base64.b64decode(encoded))).format.lower()
        shown = Image.open(io.BytesIO(base64.b64decode(encoded)))
        assert shown.size == Image.open(path).size == (image["width"], image["height"]) == tuple(image["size"])
    # The other views are the same page's: every token, every layer and head.
    assert data["kinds"]["self"]["rows"] == [t.replace(" ", "␣") for t in result.tokens]
    np.testing.assert_allclose(head_values(data["kinds"]["self"], 1, 3), result.attentions[1, 3].numpy(),
                               rtol=2.0**-10, atol=1e-7)


def test_a_large_picture_is_embedded_downscaled_to_512_pixels(tmp_path):
    from PIL import Image

    from attnviz.views.picture_page import encode_picture

    big = Image.fromarray((np.random.RandomState(3).rand(900, 1600, 3) * 255).astype(np.uint8))
    shown = encode_picture(big)
    assert (shown["width"], shown["height"]) == (512, 288)
    decoded = Image.open(io.BytesIO(base64.b64decode(shown["src"].split(",", 1)[1])))
    assert decoded.size == (512, 288)


def test_the_collapsed_matrix_is_the_sums_of_the_expanded_one(run_cli, llava, pictures, tmp_path):
    """Each picture's tokens as one row and column: a text token's weight on <image 1: 4×4> is the sum of its weights
    on the picture's 16 tokens, the picture's row the mean of their rows (to 1e-6 against the tensor), and the page
    holds that matrix (to its half floats) as the kind the matrix view draws unless --expand-images."""
    from attnviz.images.vlm import vlm_attention
    from attnviz.views.picture_page import collapsed

    result = vlm_attention(TEXT, pictures, str(llava))
    plan = collapsed(result)
    tokens = plan["tokens"]
    assert tokens == ["<image 1: 4×4>", "<image 2: 4×4>", *TEXT.split()]
    attn = result.attentions.double()
    groups = [m["image_positions"] for m in result.metadata["images"]] + [[i] for i in range(32, 38)]
    expected = torch.stack([torch.stack([attn[:, :, rows][:, :, :, cols].sum(-1).mean(-1) for cols in groups], -1)
                            for rows in groups], -2)
    made = torch.stack([plan["layer"](position) for position in plan["positions"]]).double()
    assert made.shape == (2, 4, 8, 8)
    torch.testing.assert_close(made, expected, atol=1e-6, rtol=0)
    torch.testing.assert_close(made.sum(-1), torch.ones(2, 4, 8, dtype=torch.float64), atol=1e-6, rtol=0)
    out = tmp_path / "collapsed.html"
    made = run_cli("view", TEXT, "--image", str(pictures[0]), "--image", str(pictures[1]), "--model", str(llava),
                   "--page", str(out), "--layer", "1", "--show", "matrix")
    assert made.exit_code == 0, made.stderr
    data = _data(out)
    check_page_data(data)
    kind = data["kinds"][data["pictures"]["collapsed"]["kind"]]
    assert kind["rows"] == tokens and kind["layers"] == [1] and data["pictures"]["expand"] is False
    assert data["initial"]["view"] == "matrix"
    for head in range(4):
        np.testing.assert_allclose(head_values(kind, 0, head), expected[1, head].numpy(), rtol=2.0**-10, atol=1e-6)
    assert data["pictures"]["collapsed"]["index"][:16] == [0] * 16 and data["pictures"]["collapsed"]["first"][:3] == \
        [0, 16, 32]
    expanded = tmp_path / "expanded.html"
    made = run_cli("view", TEXT, "--image", str(pictures[0]), "--model", str(llava), "--page", str(expanded),
                   "--expand-images")
    assert made.exit_code == 0, made.stderr
    assert _data(expanded)["pictures"]["expand"] is True


def test_an_encoders_page_lists_every_token_and_collapses_its_patches_beside_cls(run_cli, vit, pictures, tmp_path):
    from attnviz.images.encoder import image_attention

    out = tmp_path / "vit.html"
    made = run_cli("view", "--image", str(pictures[0]), "--model", str(vit), "--page", str(out))
    assert made.exit_code == 0, made.stderr
    data = _data(out)
    check_page_data(data)
    result = image_attention(pictures[0], str(vit))
    assert data["pictures"]["queries"] == list(range(17))  # [CLS] and the 16 patches: an encoder has no text
    assert data["kinds"]["pictures"]["rows"] == ["[CLS]", "<image 1: 4×4>"]
    weights = _tile(data, 0, 0)
    np.testing.assert_allclose(weights, result.attentions[0, 0][:, 1:].numpy(), rtol=2.0**-10, atol=1e-7)
    assert int(weights[0].argmax()) == 5  # the planted patch


def test_a_text_page_has_no_picture_view_and_refuses_it_by_name(run_cli, tmp_path):
    from attnviz import api

    data = api.page_view(api.load(TINY), "The cat sat on the mat.").data()
    check_page_data(data)
    assert data["pictures"] is None and "pictures" not in data["kinds"]
    assert next(v for v in data["views"] if v["name"] == "picture")["needs"] == "pictures"  # offered only with them
    refused = run_cli("view", "The cat sat.", "--model", TINY, "--show", "picture", "--page", str(tmp_path / "x.html"))
    assert refused.exit_code == 2 and "--show picture" in refused.stderr and refused.stderr.count("\n") == 1
    assert not (tmp_path / "x.html").exists()
    expand = run_cli("view", "The cat sat.", "--model", TINY, "--expand-images", "--page", str(tmp_path / "x.html"))
    assert expand.exit_code == 2 and "--expand-images" in expand.stderr and expand.stderr.count("\n") == 1


def test_what_a_picture_page_cannot_take_is_one_line(run_cli, llava, vit, pictures, tmp_path):
    page = str(tmp_path / "p.html")
    cases = [
        (["view", TEXT, "--image", str(tmp_path / "missing.png"), "--model", str(llava)], "does not exist"),
        (["view", TEXT, "--image", str(pictures[0]), "--model", str(llava), "--pair", "x"], "--pair"),
        (["view", TEXT, "--image", str(pictures[0]), "--model", str(llava), "--hide-special"], "--hide-special"),
        (["view", TEXT, "--image", str(pictures[0]), "--model", str(llava), "--show", "qk"], "--show qk"),
        (["view", TEXT, "--image", str(pictures[0]), "--model", str(vit)], "texts with pictures need a vision-language model"),
        (["view", "--image", str(pictures[0]), "--image", str(pictures[1]), "--model", str(vit)], "2 pictures"),
        (["view", "--image", str(pictures[0]), "--model", str(vit), "--head", "9"], "--head 9 is out of range"),
        (["view", "--image", str(pictures[0]), "--model", str(vit), "--layer", "3"], "--layer 3 is out of range"),
        (["serve", "--image", str(pictures[0]), "--model", str(vit)], "image encoder"),
        (["serve", "--model", TINY, "--expand-images"], "--expand-images"),
    ]
    for args, message in cases:
        result = run_cli(*args, *(["--page", page] if args[0] == "view" else []))
        assert result.exit_code != 0 and message in result.stderr, (args, result.stderr)
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, (args, result.stderr)
    assert not Path(page).exists()


def test_the_server_reads_each_text_beside_its_pictures(llava, pictures):
    """serve --image: the home page and /api/page are pages of pictures, each text read beside the pictures fixed at
    the start (the numbers of a fresh run on that text), /api/attention says where the pictures are, and a pair is
    a 422."""
    from starlette.testclient import TestClient

    from attnviz.images.vlm import vlm_attention
    from attnviz.serve import create_app
    from attnviz.views.picture_page import Pictures, encode_pictures

    pictures_read = Pictures(read=lambda text: vlm_attention(text, pictures[:1], str(llava)),
                             images=encode_pictures(pictures[:1]), name="llava")
    client = TestClient(create_app(None, pictures=pictures_read), base_url="http://127.0.0.1:8000")
    home = client.get("/")
    assert home.status_code == 200
    data = json.loads(re.search(r'id="attnviz-data">(.*?)</script>', home.text, re.S).group(1))
    check_page_data(data)
    assert data["live"]["fields"] == [] and data["pictures"]["images"][0]["src"].startswith("data:image/")
    answer = client.post("/api/page", json={"text": "a cat"})
    assert answer.status_code == 200
    served = answer.json()
    check_page_data(served)
    result = vlm_attention("a cat", pictures[:1], str(llava))
    assert served["pictures"]["queries"] == [16, 17] and served["kinds"]["self"]["rows"][-2:] == ["a", "cat"]
    np.testing.assert_allclose(_tile(served, 1, 0), result.attentions[1, 0][[16, 17]][:, :16].numpy(),
                               rtol=2.0**-10, atol=1e-7)
    attention = client.get("/api/attention", params={"text": "a dog"}).json()
    assert attention["images"][0]["positions"] == list(range(16)) and attention["tokens"][-1] == "dog"
    refused = client.get("/api/page", params={"text": "a cat", "pair": "a dog"})
    assert refused.status_code == 422 and "pair" in refused.json()["error"]


# --- in a real browser (the session's one chromium: conftest's browser fixture) --------------------------------------


def _heat_argmax(page, picture: int = 0) -> int:
    """The patch whose box the picture's heat canvas draws most opaque (at each box's centre), read off its pixels."""
    return page.evaluate("""(n) => {
        const canvas = document.querySelectorAll('#picturebox canvas.heat')[n];
        const image = window.attnviz.data.pictures.images[n];
        const d = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
        const sx = canvas.width / image.size[0], sy = canvas.height / image.size[1];
        let best = -1, alpha = -1;
        image.boxes.forEach(([x0, y0, x1, y1], c) => {
          const x = Math.floor((x0 + x1) / 2 * sx), y = Math.floor((y0 + y1) / 2 * sy);
          const a = d[(y * canvas.width + x) * 4 + 3];
          if (a > alpha) { alpha = a; best = c; }
        });
        return best; }""", picture)


def _drawn_after(page, before: str) -> None:
    page.wait_for_function("(before) => { const b = document.getElementById('picturebox'); "
                           "return b.dataset.drawn && b.dataset.drawn !== before; }", arg=before)


@pytest.mark.slow
def test_in_the_browser_a_hovered_token_draws_its_heat_and_a_clicked_patch_weighs_the_tokens(browser, run_cli, vit,
                                                                                            pictures, tmp_path):
    """The planted ViT's page: [CLS]'s heat is on r1c1 (layer 0, head 0); hovering another token moves the heat to
    that token's strongest patch; clicking a patch puts each token's weight on it (its column) on the token list;
    the keyboard does the same (a patch chosen with the arrows and Enter, Esc back, a token focused); no request
    leaves the page."""
    from attnviz.images.encoder import image_attention

    out = tmp_path / "vit.html"
    assert run_cli("view", "--image", str(pictures[0]), "--model", str(vit), "--page", str(out)).exit_code == 0
    result = image_attention(pictures[0], str(vit))
    weights = result.attentions[0, 0][:, 1:]  # [17 queries, 16 patches]
    argmax = weights.argmax(-1).tolist()
    assert argmax[0] == 5
    other = next(q for q in range(1, 17) if argmax[q] != 5)
    strongest = weights[other].topk(2).values
    assert float(strongest[1]) < 0.5 * float(strongest[0])  # a clear heat: its box is the most opaque
    requests: list[str] = []
    errors: list[str] = []
    page = open_offline(browser, out, requests, errors, ready="#picturebox[data-drawn]")
    try:
        tabs = page.evaluate("() => [...document.querySelectorAll('nav.tabs button')].map(b => b.dataset.view)")
        assert "picture" in tabs and page.get_attribute('nav.tabs button[data-view="picture"]', "class") == "active"
        assert page.get_attribute("#picturebox", "data-query") == "0" and _heat_argmax(page) == 5
        before = page.get_attribute("#picturebox", "data-drawn")
        page.hover(f'#pictokens .ptok[data-token="{other}"]')
        _drawn_after(page, before)
        page.wait_for_function(f"() => document.getElementById('picturebox').dataset.query === '{other}'")
        assert _heat_argmax(page) == argmax[other] != 5
        # Click patch r2c3 (cell 11): every token's weight on it, on the token list.
        cell = 11
        box = page.evaluate("""(c) => { const canvas = document.querySelector('#picturebox canvas.heat');
            const r = canvas.getBoundingClientRect(), image = window.attnviz.data.pictures.images[0];
            const [x0, y0, x1, y1] = image.boxes[c];
            return [r.left + (x0 + x1) / 2 / image.size[0] * r.width, r.top + (y0 + y1) / 2 / image.size[1] * r.height]; }""",
                            cell)
        page.mouse.click(*box)
        page.wait_for_function(f"() => document.getElementById('picturebox').dataset.patch === '0/{cell}'")
        shown = page.eval_on_selector_all("#pictokens .ptok .pw", "nodes => nodes.map(n => n.textContent)")
        assert len(shown) == 17 and all(shown)
        np.testing.assert_allclose([float(v) for v in shown], weights[:, cell].numpy(), rtol=2e-3, atol=1e-6)
        assert "r2c3" in page.text_content("#picsummary")
        # The keyboard: focus the picture, one step left of the patch chosen (r2c2), up (r1c2), Enter; Esc goes back.
        page.focus("#picturebox canvas.heat")
        page.keyboard.press("ArrowLeft")
        page.keyboard.press("ArrowUp")
        page.keyboard.press("Enter")
        page.wait_for_function("() => document.getElementById('picturebox').dataset.patch === '0/6'")
        shown = page.eval_on_selector_all("#pictokens .ptok .pw", "nodes => nodes.map(n => n.textContent)")
        np.testing.assert_allclose([float(v) for v in shown], weights[:, 6].numpy(), rtol=2e-3, atol=1e-6)
        page.keyboard.press("Escape")
        page.wait_for_function("() => document.getElementById('picturebox').dataset.mode === 'token'")
        page.focus('#pictokens .ptok[data-token="0"]')
        page.wait_for_function("() => document.getElementById('picturebox').dataset.query === '0'")
        assert _heat_argmax(page) == 5
    finally:
        page.close()
    assert not errors, errors
    assert requests == [out.as_uri()]


@pytest.mark.slow
def test_in_the_browser_the_matrix_collapses_the_pictures_and_a_text_page_offers_no_picture_tab(
        browser, run_cli, llava, pictures, tmp_path):
    """A vision-language model's page: the picture tab lists the text's tokens, hovering one draws its heat with each
    picture's strongest patch the strongest; the matrix view draws each picture as one row and column, the box
    expands it to every image token. A text's page has no picture tab."""
    from attnviz.images.vlm import vlm_attention

    out = tmp_path / "llava.html"
    made = run_cli("view", TEXT, "--image", str(pictures[0]), "--image", str(pictures[1]), "--model", str(llava),
                   "--page", str(out))
    assert made.exit_code == 0, made.stderr
    result = vlm_attention(TEXT, pictures, str(llava))
    requests: list[str] = []
    errors: list[str] = []
    page = open_offline(browser, out, requests, errors, ready="#picturebox[data-drawn]")
    try:
        chips = page.eval_on_selector_all("#pictokens .ptok .ptext", "nodes => nodes.map(n => n.textContent)")
        assert chips == TEXT.split()
        assert page.eval_on_selector_all("#pictokens .pchip", "n => n.length") == 2
        # Each text token's strongest patch over both pictures (layer 0, head 0: the page's first).
        keys = [p for m in result.metadata["images"] for p in m["positions"]]
        rows = result.attentions[0, 0][32:][:, keys]
        for q in range(6):
            before = page.get_attribute("#picturebox", "data-drawn")
            page.hover(f'#pictokens .ptok[data-q="{q}"]')
            page.wait_for_function(f"() => document.getElementById('picturebox').dataset.query === '{32 + q}'")
            if page.get_attribute("#picturebox", "data-drawn") == before:
                _drawn_after(page, before)
            # (random weights: a picture's strongest patches may be equal to the page's half floats)
            shown = page.eval_on_selector_all("#picturebox canvas.heat", "nodes => nodes.map(n => +n.dataset.argmax)")
            for n, cell in enumerate(shown):
                patches = rows[q, 16 * n : 16 * (n + 1)]
                assert float(patches[cell]) >= float(patches.max()) * (1 - 2.0**-10), (q, n)
        page.click('nav.tabs button[data-view="matrix"]')
        page.wait_for_function("() => window.attnviz.matrix.view.dims === 'pictures/8x8'")
        page.wait_for_function("() => document.getElementById('matrixtitle').textContent"
                               ".includes(\"each picture's tokens as one row and column\")")
        page.check("#expandimages")
        page.wait_for_function("() => window.attnviz.matrix.view.dims === 'self/38x38'")
    finally:
        page.close()
    assert not errors, errors
    assert requests == [out.as_uri()]
    text_page = tmp_path / "text.html"
    assert run_cli("view", "The cat sat on the mat.", "--model", TINY, "--page", str(text_page)).exit_code == 0
    page = open_offline(browser, text_page, requests, errors)
    try:
        tabs = page.evaluate("() => [...document.querySelectorAll('nav.tabs button')].map(b => b.dataset.view)")
        assert "picture" not in tabs and tabs[0] == "head" and page.query_selector("#expandlabel") is None
    finally:
        page.close()
    assert not errors, errors


@pytest.mark.slow
def test_in_the_browser_a_server_of_pictures_reads_each_typed_text_beside_them(browser, llava, pictures):
    """attnviz serve --image (a real process, the model loaded once): its page opens on the pictures, and a text
    typed is read beside them, the picture view redrawn for its last word; Ctrl-C stops it cleanly."""
    import signal

    from test_serve import _start

    proc, url = _start("--image", str(pictures[0]), "--model", str(llava))
    try:
        page = browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(url + "/")
        page.wait_for_selector("#picturebox[data-drawn]")
        page.fill("#live-text", "a cat")
        page.wait_for_function("() => window.attnviz.data.kinds.self.rows.slice(16).join(' ') === 'a cat'")
        page.wait_for_function("() => document.getElementById('picturebox').dataset.query === '17'")
        chips = page.eval_on_selector_all("#pictokens .ptok .ptext", "nodes => nodes.map(n => n.textContent)")
        assert chips == ["a", "cat"] and _heat_argmax(page) >= 0
        page.close()
        assert errors == []
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "Traceback" not in err, err
    assert out.startswith("attnviz: serving llava at http://127.0.0.1:")
