"""One registry of output formats (issue 11, point 5): adding a format is one module plus one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import TINY

from attnviz.records import Registry
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


SHAPE_RENDERER = ("from pathlib import Path\n\ndef render(view, path, **options):\n"
                  "    Path(path).write_text(str(view.panels.shape))\n    return Path(path)\n")


def test_formats_are_a_registry_that_refuses_duplicates():
    assert isinstance(registry.FORMATS, Registry) and {"png", "html", "npz", "parquet"} <= registry.BUILT_IN
    with pytest.raises(ValueError, match="already registered"):
        registry.register(Format("png", "view", ".gif", "m:f"))
    with pytest.raises(ValueError, match=r"'svg' already writes \.svg files"):
        registry.register(Format("svg2", "view", ".svg", "m:f"))
    with pytest.raises(ValueError, match=r"'view-json' already writes \.json files"):
        registry.register(Format("myjson", "view", ".json", "m:f"))
    with pytest.raises(ValueError, match="lower-case extension"):
        registry.register(Format("shape", "view", "SHAPE", "m:f"))
    with pytest.raises(ValueError, match="stays"):
        registry.unregister("png")


def test_a_format_added_from_outside_reaches_generate_the_tui_and_exports_stale_files(run_cli, tmp_path, monkeypatch):
    """The extensions generate's --out, the TUI's save and export's manifest accept come from the registry."""
    from types import SimpleNamespace

    from attnviz import api
    from attnviz.tui.saving import save_view

    (tmp_path / "shape_renderer.py").write_text(SHAPE_RENDERER)
    monkeypatch.syspath_prepend(str(tmp_path))
    refused = run_cli("generate", "The cat", "-n", "2", "--out", str(tmp_path / "g.shape"))
    assert refused.exit_code == 2 and "use .npz, .png, .svg, .pdf or .html" in refused.stderr
    with registry.registered(Format("shape", "view", ".shape", "shape_renderer:render")):
        r = run_cli("generate", "The cat", "-n", "2", "--out", str(tmp_path / "g.shape"))
        assert r.exit_code == 0, r.stderr
        assert (tmp_path / "g.shape").read_text().startswith("(")
        r = run_cli("generate", "The cat", "-n", "2", "--out", str(tmp_path / "g.gif"))
        assert r.exit_code == 2 and "use .npz, .png, .svg, .pdf, .shape or .html" in r.stderr

        source = api.load(TINY)
        n = len(source.extract("The cat sat.").tokens)
        explorer = SimpleNamespace(inputs=lambda: (source, "The cat sat.", {}), region=lambda: None,
                                   layer_number=0, head=1, result=None)
        assert save_view(explorer, tmp_path / "head.shape").read_text() == f"(1, {n}, {n})"  # head 1 of layer 0

        texts = tmp_path / "texts.txt"
        texts.write_text("The cat sat.\n")
        common = ["export", str(texts), "--out", str(tmp_path / "o"), "--layer", "0", "--jobs", "1", "--quiet"]
        r = run_cli(*common, "--formats", "shape,json")
        assert r.exit_code == 0, r.stderr
        written = tmp_path / "o" / "000000-the-cat-sat.L0.shape"
        assert written.read_text() == "(12, 6, 6)"
        r = run_cli(*common, "--formats", "json")  # a file of the format this run does not make is stale
        assert r.exit_code == 0, r.stderr
        assert not written.exists()
    assert "shape" not in registry.FORMATS
