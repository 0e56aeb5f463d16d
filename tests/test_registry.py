"""One registry of output formats (issue 11, point 5): adding a format is one module plus one line."""

from __future__ import annotations

from pathlib import Path

from attnviz.render import registry
from attnviz.render.registry import Format


def test_the_registry_is_what_the_commands_accept(run_cli, tmp_path):
    assert registry.output_suffixes() == [".png", ".svg", ".pdf", ".html", ".npz", ".json"]
    assert set(registry.FORMATS) >= {"png", "svg", "pdf", "html", "npz", "json"}
    r = run_cli("heatmap", "The cat sat.", "--out", str(tmp_path / "x.gif"))
    assert r.exit_code == 2 and "use one of .png, .svg, .pdf, .html, .npz, .json" in r.stderr


def test_a_new_format_is_one_module_and_one_line(run_cli, tmp_path, monkeypatch):
    module = tmp_path / "shape_renderer.py"
    module.write_text("from pathlib import Path\n\ndef render(view, path, **options):\n"
                      "    Path(path).write_text(str(view.panels.shape))\n    return Path(path)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(registry.FORMATS, "shape", Format("shape", "view", ".shape", "shape_renderer:render"))
    out = tmp_path / "x.shape"
    r = run_cli("heatmap", "The cat sat.", "--out", str(out), "--head", "all", "--layer", "0")
    assert r.exit_code == 0, r.stderr
    assert out.read_text() == "(12, 6, 6)"  # every head of layer 0, [CLS] the cat sat . [SEP]
    texts = tmp_path / "texts.txt"
    texts.write_text("The cat sat.\n")
    r = run_cli("export", str(texts), "--out", str(tmp_path / "o"), "--formats", "shape,json", "--layer", "0",
                "--jobs", "1", "--quiet")
    assert r.exit_code == 0, r.stderr
    assert Path(tmp_path / "o" / "000000-the-cat-sat.L0.shape").read_text() == "(12, 6, 6)"


def test_export_takes_the_shared_model_options(run_cli, tmp_path):
    """export speaks the vocabulary of the other commands: --cmap, --revision, --trust-remote-code, --verbose."""
    texts = tmp_path / "texts.txt"
    texts.write_text("The cat sat on the mat.\n")
    common = ["export", str(texts), "--layer", "0", "--formats", "png", "--style", "tiles", "--quiet"]
    r = run_cli(*common, "--out", str(tmp_path / "v"), "--cmap", "viridis", "--verbose")
    assert r.exit_code == 0, r.stderr
    assert "attnviz: engine native (bert)" in r.stderr
    r = run_cli(*common, "--out", str(tmp_path / "m"), "--cmap", "magma")
    assert r.exit_code == 0, r.stderr
    name = "000000-the-cat-sat-on-the-mat.L0.png"
    assert (tmp_path / "v" / name).read_bytes() != (tmp_path / "m" / name).read_bytes()  # the colormap is used
    r = run_cli(*common, "--out", str(tmp_path / "x"), "--cmap", "jet")
    assert r.exit_code == 2 and "'jet' is not one of" in r.stderr and "--cmap" in r.stderr  # a choice, as on every command
    r = run_cli(*common, "--out", str(tmp_path / "y"), "--revision", "main")
    assert r.exit_code == 2 and "--revision applies to hub ids" in r.stderr
