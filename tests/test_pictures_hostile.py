"""Pictures as hostile input, and what they may cost (issue 58): a corpus's paths kept inside its folder, decompression
bombs of every size, thin pictures drawn and processed in bounded memory, a prompt past the model's positions or a
processor saved to truncate refused by length, decoded pictures in the memory estimate and each decoded and hashed
once, and MPO JPEGs, PNG metadata chunks, a superscript query and a refused export's folder. Every input is built
here: PIL's files, headers written with struct and zlib, the tiny LLaVA of picture_models and a planted ViT."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import struct
import tracemalloc
import zlib
from pathlib import Path

import numpy as np
import pytest
from picture_models import planted_vit

QUESTION = "what is in the picture ?"


# Files -------------------------------------------------------------------------------------------------------------

def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png_of(width: int, height: int, *, whole: bool = True, grey: int = 128) -> bytes:
    """A PNG of ``width`` × ``height`` of one grey, its rows compressed as they are made (a 50-million-pixel picture
    in a few hundred KB and a fraction of a second); ``whole=False``: its header and a scrap of data only."""
    header = b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
    if not whole:
        return header + _chunk(b"IDAT", zlib.compress(b"\0" * 16)) + _chunk(b"IEND", b"")
    squeeze = zlib.compressobj(6)
    row = b"\0" + bytes([grey]) * (3 * width)
    body = b"".join(squeeze.compress(row) for _ in range(height)) + squeeze.flush()
    return header + _chunk(b"IDAT", body) + _chunk(b"IEND", b"")


def jpeg_of(width: int, height: int) -> bytes:
    """A JPEG whose frame header (SOF0) says ``width`` × ``height`` (its 8 × 8 body unchanged)."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), "red").save(buffer, "JPEG")
    data = bytearray(buffer.getvalue())
    at = data.index(b"\xff\xc0")
    data[at + 5 : at + 9] = struct.pack(">HH", height, width)
    return bytes(data)


def webp_of(width: int, height: int) -> bytes:
    """An animated WebP whose canvas (VP8X) says ``width`` × ``height`` (its two 8 × 8 frames unchanged)."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), "red").save(buffer, "WEBP", save_all=True, lossless=True,
                                         append_images=[Image.new("RGB", (8, 8), "blue")])
    data = bytearray(buffer.getvalue())
    assert data[12:16] == b"VP8X"
    data[24:27], data[27:30] = (width - 1).to_bytes(3, "little"), (height - 1).to_bytes(3, "little")
    return bytes(data)


def noise(path: Path, width: int = 64, height: int = 48, seed: int = 0) -> Path:
    from PIL import Image

    Image.fromarray((np.random.RandomState(seed).rand(height, width, 3) * 255).astype(np.uint8)).save(path)
    return path


def thin(path: Path, height: int, width: int = 1) -> Path:
    from PIL import Image

    Image.fromarray(np.full((height, width, 3), 100, dtype=np.uint8)).save(path)
    return path


def refused_in_one_line(result, *needles: str) -> None:
    """A refusal as the house makes them: a non-zero exit, one line on stderr naming ``needles``, no internal
    error."""
    assert result.exit_code != 0, result.stdout
    assert result.stderr.count("\n") == 1, result.stderr
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr, result.stderr
    for needle in needles:
        assert needle in result.stderr, (needle, result.stderr)


@pytest.fixture(scope="module")
def vit(tmp_path_factory) -> Path:
    return planted_vit(tmp_path_factory.mktemp("vit") / "vit", 5)


@pytest.fixture
def picture(tmp_path) -> Path:
    return noise(tmp_path / "picture.png")


@pytest.fixture
def no_server(monkeypatch):
    """serve must refuse before it listens: a server that starts fails the test instead of waiting forever."""
    import uvicorn

    def started(self, *args, **kwargs):
        raise AssertionError("the server started")

    monkeypatch.setattr(uvicorn.Server, "run", started)


# A2: a corpus's pictures stay inside its folder ---------------------------------------------------------------------

def _corpus(folder: Path, *images: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "corpus.jsonl"
    path.write_text("".join(json.dumps({"text": QUESTION, "image": image}) + "\n" for image in images))
    return path


def test_a_corpus_picture_outside_its_folder_is_refused_by_its_row_in_the_same_words_whether_it_exists(tmp_path):
    from attnviz.errors import InputError
    from attnviz.images.corpus import picture_rows

    corpus_folder, outside = tmp_path / "corpus", tmp_path / "outside"
    outside.mkdir()
    corpus_folder.mkdir()
    secret = noise(outside / "secret.png")
    noise(corpus_folder / "inside.png")
    (corpus_folder / "link.png").symlink_to(secret)
    (corpus_folder / "dangling.png").symlink_to(outside / "gone.png")
    (corpus_folder / "sub").symlink_to(outside, target_is_directory=True)
    written = ["../outside/secret.png", str(secret), "link.png", "sub/secret.png", "dangling.png",
               "inside.png/../../outside/secret.png"]

    def refusal(image: str) -> str:
        with pytest.raises(InputError) as caught:
            picture_rows(_corpus(corpus_folder, "inside.png", image))
        return str(caught.value)

    for image in written:
        said = refusal(image)
        assert "row 2" in said and "outside the corpus's folder" in said and "allow_outside_pictures" in said
        assert str(outside) not in said or str(outside) in image  # never where a link leads
    present = {image: refusal(image) for image in written}
    secret.unlink()  # the same rows, the file gone: not one word differs
    assert {image: refusal(image) for image in written} == present
    noise(secret)
    rows = picture_rows(_corpus(corpus_folder, "inside.png", "link.png", "../outside/secret.png"), allow_outside=True)
    assert [row.pictures[0] for row in rows] == [(corpus_folder / "inside.png").resolve(), secret.resolve(),
                                                  secret.resolve()]


def test_export_and_atlas_refuse_an_outside_picture_unless_allowed(run_cli, llava, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = noise(outside / "secret.png", seed=3)
    corpus = _corpus(tmp_path / "corpus", "inside.png", "../outside/secret.png")
    noise(corpus.parent / "inside.png")
    out = tmp_path / "out"
    for args in (("export", str(corpus), "--model", str(llava), "--out", str(out), "--formats", "json"),
                 ("atlas", str(corpus), "--model", str(llava), "--format", "json")):
        refused_in_one_line(run_cli(*args), "row 2", "../outside/secret.png", "--allow-outside-pictures")
        assert not out.exists()  # nothing read, drawn or named
    for args in (("atlas", str(corpus), "--model", str(llava), "--format", "json"),
                 ("export", str(corpus), "--model", str(llava), "--out", str(out), "--formats", "json")):
        allowed = run_cli(*args, "--allow-outside-pictures")
        assert allowed.exit_code == 0, allowed.stderr
    stats = sorted(out.glob("*.stats.json"))
    assert [json.loads(path.read_text())["pictures"] for path in stats] == [[str((corpus.parent / "inside.png")
                                                                                  .resolve())], [str(secret.resolve())]]
    refused_in_one_line(run_cli("export", str(tmp_path / "corpus" / "corpus.jsonl"), "--out", str(tmp_path / "t"),
                                "--allow-outside-pictures"), "--allow-outside-pictures")


# B4: decompression bombs, every size past the limit ------------------------------------------------------------------

BOMBS = {  # past our limit only, past Pillow's warning, past Pillow's error; its JPEG and WebP past its error
    "8000x8000.png": (png_of(8000, 8000, whole=False), 8000, 8000),
    "12000x12000.png": (png_of(12000, 12000, whole=False), 12000, 12000),
    "100000x100000.png": (png_of(100_000, 100_000, whole=False), 100_000, 100_000),
    "65500x65500.jpg": (jpeg_of(65_500, 65_500), 65_500, 65_500),
    "12000x12000.jpg": (jpeg_of(12_000, 12_000), 12_000, 12_000),
    "16000x16000.webp": (webp_of(16_000, 16_000), 16_000, 16_000),
}


def test_a_decompression_bomb_of_any_size_past_the_limit_is_refused_from_its_header(tmp_path):
    import warnings

    from PIL import Image

    from attnviz.errors import ResourceError
    from attnviz.images.files import MAX_PIXELS, read_image

    pillow_limit = Image.MAX_IMAGE_PIXELS
    for name, (data, width, height) in BOMBS.items():
        (tmp_path / name).write_bytes(data)
        with warnings.catch_warnings(record=True) as said, pytest.raises(ResourceError) as caught:
            warnings.simplefilter("always")
            read_image(tmp_path / name)
        assert width * height > MAX_PIXELS and not said, [str(w.message) for w in said]  # no Pillow warning either
        assert f"{width:,} × {height:,} pixels" in str(caught.value) and name in str(caught.value)
        assert pillow_limit == Image.MAX_IMAGE_PIXELS  # Pillow's own limit as it was


def test_every_picture_command_refuses_a_bomb_in_one_line(run_cli, llava, vit, tmp_path, no_server):
    bombs = []
    for name, (data, width, height) in BOMBS.items():
        (tmp_path / name).write_bytes(data)
        bombs.append((tmp_path / name, f"{width:,} × {height:,}"))
    questions = tmp_path / "questions.txt"
    questions.write_text(QUESTION + "\n")
    model = ("--model", str(llava))
    commands = [
        ("heatmap", QUESTION, *model), ("heads", QUESTION, *model), ("generate", QUESTION, "-n", "1", *model),
        ("view", QUESTION, *model, "--page", str(tmp_path / "page.html")), ("tui", QUESTION, *model),
        ("serve", *model, "--port", "0"), ("atlas", str(questions), *model),
        ("export", str(questions), *model, "--out", str(tmp_path / "out")), ("rollout", "--model", str(vit)),
        ("heatmap", "--model", str(vit)),
    ]
    for n, command in enumerate(commands):
        bomb, size = bombs[n % len(bombs)]
        refused_in_one_line(run_cli(*command, "--image", str(bomb)), bomb.name, size, "50,000,000")


# B5: a thin picture is drawn in bounded memory -----------------------------------------------------------------------

def test_a_thin_picture_is_drawn_within_the_panel_aspect_in_bounded_memory(vit, tmp_path):
    from PIL import Image

    from attnviz.images.encoder import image_attention
    from attnviz.images.files import read_image
    from attnviz.render.overlay import overlay_png

    for height, width in ((200, 1), (1, 300)):  # tall, wide
        path = thin(tmp_path / f"thin{height}x{width}.png", height, width)
        result = image_attention(path, str(vit))
        image = read_image(path)
        # Drawn once untraced first: what the first drawing in a process imports (matplotlib's colour maps, fonts:
        # ~8 MB, in whichever test draws first in a worker) is not the panel's memory.
        overlay_png(result, [image], tmp_path / "warm.png", layers=[0], heads=[0], query=0)
        tracemalloc.start()
        drawn = overlay_png(result, [image], tmp_path / f"heat{height}.png", layers=[0], heads=[0, 1], query=0)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < 24 << 20, peak  # the old panel of 160 × 32,000 pixels held ~400 MB of float64
        from attnviz.render.overlay import PANEL_ASPECT

        shown = Image.open(drawn)
        panel = 160
        assert shown.size[1] <= panel * PANEL_ASPECT + 40 and shown.size[1] >= panel / PANEL_ASPECT
        pixels = np.asarray(shown)
        assert pixels.std() > 0  # something is drawn


def test_an_export_draws_a_thin_row_squeezed_and_records_one_too_thin_to_process_as_failed(run_cli, llava, tmp_path):
    corpus = _corpus(tmp_path, "p0.png", "tall.png", "thinner.png")
    noise(tmp_path / "p0.png")
    thin(tmp_path / "tall.png", 300)  # CLIP's shortest edge to 32: 32 × 9,600 (drawn squeezed)
    thin(tmp_path / "thinner.png", 20_000)  # 32 × 640,000: more than a processed picture may be
    out = tmp_path / "out"
    done = run_cli("export", str(corpus), "--model", str(llava), "--out", str(out), "--formats", "png,json",
                   "--quiet")
    assert done.exit_code == 1 and "1 of 3 items failed" in done.stderr, done.stderr
    entries = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    status = {entry["index"]: entry for entry in entries if "index" in entry}
    assert status[0]["status"] == status[1]["status"] == "ok" and status[2]["status"] == "failed"
    assert "16,000,000" in json.dumps(status[2]) and "thinner.png" in json.dumps(status[2])
    from PIL import Image

    tall = Image.open(next(out.glob("000001-*.L0.png")))
    assert tall.size[1] < 4 * 160 + 40  # not 160 × 48,000 pixels a panel


# B6: what a processor would make of a picture, checked first ---------------------------------------------------------

def test_a_picture_a_processor_would_blow_up_is_refused_before_the_processor_runs(llava, tmp_path):
    from attnviz.errors import ResourceError
    from attnviz.images.vlm import load_vlm

    model = load_vlm(str(llava))
    path = thin(tmp_path / "line.png", 1_000_000)
    assert path.stat().st_size < 8192
    tracemalloc.start()
    with pytest.raises(ResourceError) as caught:
        model.read(QUESTION, [path], rows="text")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    from attnviz.images.sizes import MAX_PROCESSED_PIXELS

    said = str(caught.value)
    assert str(path) in said and f"{MAX_PROCESSED_PIXELS:,}" in said and "32 × 32,000,000" in said
    assert peak < 256 << 20, peak  # not the 3 GB of a 32 × 32,000,000 picture (a file's read buffer is 64 MB)


# B7, B8: a prompt past the model's positions, a processor saved to truncate ----------------------------------------

def test_a_prompt_with_pictures_past_the_language_models_positions_is_refused_as_a_text_is(run_cli, llava,
                                                                                            picture, tmp_path,
                                                                                            no_server):
    from attnviz.errors import InputError
    from attnviz.images.vlm import load_vlm

    model = load_vlm(str(llava))  # 128 positions
    long = " ".join(["cat"] * 120) + " ?"
    with pytest.raises(InputError, match="takes at most 128"):
        model.read(long, [picture])
    with pytest.raises(InputError, match=r"max_new_tokens=110.*takes at most 128"):
        model.read(QUESTION, [picture], max_new_tokens=110)
    several = [arg for _ in range(9) for arg in ("--image", str(picture))]  # 9 × 16 image tokens
    for command in (("view", QUESTION, *several, "--page", str(tmp_path / "page.html")),
                    ("serve", *several, "--port", "0"), ("heatmap", long, "--image", str(picture))):
        refused_in_one_line(run_cli(*command, "--model", str(llava)), "takes at most 128")
    assert not (tmp_path / "page.html").exists()


@pytest.fixture(scope="module")
def truncating(llava, tmp_path_factory) -> Path:
    """The tiny LLaVA, its tokenizer saved to truncate at 64 tokens (a processor then cuts what it reads)."""
    folder = tmp_path_factory.mktemp("truncating") / "llava"
    shutil.copytree(llava, folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "max_length": 64, "truncation": True}))
    return folder


def test_a_processor_saved_to_truncate_never_cuts_the_text_or_the_pictures(run_cli, truncating, picture, tmp_path):
    from attnviz.errors import InputError
    from attnviz.images.vlm import load_vlm

    model = load_vlm(str(truncating))
    words = " ".join(["cat"] * 80) + " dog"  # 82 words and 16 image tokens: past 64, within the 128 positions
    read = model.read(words, [picture], rows="text")
    assert read.tokens[-1] == "dog" and len(read.tokens) > 64 + 16
    with pytest.raises(InputError, match="tokens long but llava takes at most 128"):
        model.read(" ".join(["cat"] * 301) + " dog", [picture])
    with pytest.raises(InputError, match="480 tokens"):
        model.read(QUESTION, [picture] * 30)  # not a processor's "Mismatch in image token count"
    questions = tmp_path / "questions.txt"
    questions.write_text(QUESTION + "\n")
    several = [arg for _ in range(30) for arg in ("--image", str(picture))]
    refused_in_one_line(run_cli("atlas", str(questions), *several, "--model", str(truncating)), "takes at most 128")


# B9: decoded pictures in the memory estimate; each decoded and hashed once --------------------------------------------

def test_decoded_pictures_count_in_the_memory_estimate_before_they_are_decoded(llava, tmp_path, monkeypatch):
    from PIL import ImageFile

    from attnviz.errors import ResourceError
    from attnviz.images.vlm import load_vlm

    big = tmp_path / "big.png"
    big.write_bytes(png_of(5000, 4000))  # 20 million pixels: 60 MB decoded
    model = load_vlm(str(llava))
    decoded = []
    load = ImageFile.ImageFile.load

    def counted(self):
        if self.tile:
            decoded.append(self.size)
        return load(self)

    monkeypatch.setattr(ImageFile.ImageFile, "load", counted)
    monkeypatch.setenv("ATTNVIZ_MAX_MEMORY", "256M")
    with pytest.raises(ResourceError) as caught:
        model.read(QUESTION, [big] * 3, rows="text")
    assert "3 pictures of 60,000,000 pixels" in str(caught.value) and "ATTNVIZ_MAX_MEMORY" in str(caught.value)
    assert decoded == []  # refused before any was decoded
    monkeypatch.setenv("ATTNVIZ_MAX_MEMORY", "120M")
    with pytest.raises(ResourceError, match="ATTNVIZ_MAX_MEMORY"):
        model.read(QUESTION, [big], rows="text")  # one, under a smaller budget
    monkeypatch.setenv("ATTNVIZ_MAX_MEMORY", "2G")
    assert model.read(QUESTION, [big], rows="text").metadata["images"][0]["size"] == [5000, 4000]


def test_a_corpus_decodes_and_hashes_each_distinct_picture_once(run_cli, llava, tmp_path, monkeypatch):
    from PIL import ImageFile

    pictures = [noise(tmp_path / f"p{n}.png", seed=n) for n in range(2)]
    corpus = _corpus(tmp_path, *[f"p{n % 2}.png" for n in range(8)])
    sizes = {path.stat().st_size for path in pictures}
    decoded, hashed = [], []
    load, sha256 = ImageFile.ImageFile.load, hashlib.sha256

    def counted_load(self):
        if self.tile:
            decoded.append(self.size)
        return load(self)

    def counted_hash(data=b"", **kwargs):
        if len(data) in sizes:
            hashed.append(len(data))
        return sha256(data, **kwargs)

    monkeypatch.setattr(ImageFile.ImageFile, "load", counted_load)
    monkeypatch.setattr(hashlib, "sha256", counted_hash)
    done = run_cli("export", str(corpus), "--model", str(llava), "--out", str(tmp_path / "out"), "--formats",
                   "png,json", "--quiet")
    assert done.exit_code == 0, done.stderr
    assert len(decoded) <= len(pictures) and len(hashed) <= len(pictures), (decoded, hashed)
    decoded.clear()
    shown = run_cli("atlas", str(corpus), "--model", str(llava), "--format", "json")
    assert shown.exit_code == 0 and json.loads(shown.stdout)["texts"] == 8, shown.stderr
    assert decoded == []  # the files unchanged: read as they were


# B14: a superscript query, MPO, PNG metadata, a refused export's folder --------------------------------------------

def test_a_superscript_query_is_a_usage_error_not_an_internal_error(run_cli, vit, llava, picture):
    for args in (("heatmap", "--image", str(picture), "--model", str(vit)),
                 ("heatmap", QUESTION, "--image", str(picture), "--model", str(llava))):
        for query in ("²", "٣", "1²"):
            result = run_cli(*args, "--query", query)
            refused_in_one_line(result, "is not a token")
            assert result.exit_code == 2


def test_an_mpo_jpeg_is_read_as_its_first_picture(tmp_path, run_cli, vit):
    from PIL import Image

    from attnviz.images.files import read_image

    first = Image.fromarray((np.random.RandomState(1).rand(48, 64, 3) * 255).astype(np.uint8))
    path = tmp_path / "camera.jpg"
    first.save(path, format="MPO", save_all=True, append_images=[first.rotate(90, expand=True)])
    with Image.open(path) as opened:
        assert opened.format == "MPO" and getattr(opened, "n_frames", 1) == 2
        opened.seek(0)
        expected = np.asarray(opened.convert("RGB"))
    assert np.array_equal(np.asarray(read_image(path)), expected)
    shown = run_cli("heatmap", "--image", str(path), "--model", str(vit))
    assert shown.exit_code == 0, shown.stderr


def test_a_png_with_large_text_or_colour_profile_chunks_is_read_ignoring_them(tmp_path):
    from PIL import Image, PngImagePlugin

    from attnviz.images.files import read_image

    pixels = (np.random.RandomState(2).rand(48, 64, 3) * 255).astype(np.uint8)
    text = PngImagePlugin.PngInfo()
    text.add_text("comment", "x" * (2 * PngImagePlugin.MAX_TEXT_CHUNK), zip=True)  # zTXt past Pillow's limit
    Image.fromarray(pixels).save(tmp_path / "text.png", pnginfo=text)
    Image.fromarray(pixels).save(tmp_path / "profile.png", icc_profile=b"\0" * (2 * PngImagePlugin.MAX_TEXT_CHUNK))
    for name in ("text.png", "profile.png"):
        assert (tmp_path / name).stat().st_size < 64 << 10
        assert np.array_equal(np.asarray(read_image(tmp_path / name)), pixels)


def test_a_refused_picture_export_leaves_no_empty_out_folder(run_cli, llava, tmp_path):
    corpus = _corpus(tmp_path, "p0.png")
    noise(tmp_path / "p0.png")
    out = tmp_path / "out"
    refused_in_one_line(run_cli("export", str(corpus), "--model", str(llava), "--out", str(out), "--layer", "5"),
                        "--layer")
    assert not out.exists()
    out.mkdir()  # a folder that was there stays
    refused_in_one_line(run_cli("export", str(corpus), "--model", str(llava), "--out", str(out), "--layer", "5"))
    assert out.is_dir() and not any(out.iterdir())


@pytest.mark.parametrize("argv", [("heatmap", "the cat", "--query", "²"), ("heatmap", "the cat", "--rows", "²:"),
                                  ("heatmap", "the cat", "--cols", ":٣")])
def test_digits_that_are_not_ascii_are_one_line_in_the_text_commands_too(run_cli, argv):
    """`--query ²` (and a region of them) passed str.isdigit() and then int(): an internal error."""
    from conftest import TINY

    done = run_cli(*argv, "--model", TINY)
    assert done.exit_code != 0 and done.stderr.count("\n") == 1 and "internal error" not in done.stderr, done.stderr


def test_a_device_that_refuses_to_be_read_is_named(run_cli, tmp_path):
    """`--image /proc/self/mem` said "cannot use: Input/output error" and named no file."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    done = run_cli("heatmap", "--image", "/proc/self/mem", "--model", str(root / "sample_configs" / "organism_vit.toml"))
    assert done.exit_code != 0 and done.stderr.count("\n") == 1 and "/proc/self/mem" in done.stderr, done.stderr
