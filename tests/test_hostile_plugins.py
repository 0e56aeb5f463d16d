"""Hostile plugins and broken distributions (issue 50, D.11): another tool's unreadable metadata, a plugin that exits,
is interrupted or hangs as it imports, a plugin whose record fails later, and the built-in records sealed against
item assignment. The loading runs in this process with the distributions on ``sys.path`` (and its state restored);
one fresh process shows the command's own lines."""

from __future__ import annotations

import warnings

import pytest
from conftest import TINY
from test_plugins import FAR_PLUGIN, install

from attnviz import plugins
from attnviz.analysis import statistics
from attnviz.errors import AttnvizWarning

TEXT = "the cat sat on the mat and the dog sat on the log"


@pytest.fixture
def fresh_plugins(monkeypatch, tmp_path):
    """This process's plugin state as if nothing had loaded, with ``tmp_path`` on ``sys.path``; the records and
    modules a test's plugins add are removed afterwards."""
    monkeypatch.setattr(plugins, "_started", False)
    monkeypatch.setattr(plugins, "LOADED", [])
    monkeypatch.setattr(plugins, "MODULES", {})
    monkeypatch.delenv(plugins.NO_PLUGINS_ENV, raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(dict.keys(statistics.STATISTICS))  # read without loading plugins (the test installs them first)
    yield tmp_path
    for name in set(dict.keys(statistics.STATISTICS)) - before:
        statistics.unregister(name)


def _load() -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plugins.load_plugins()
    return [str(w.message) for w in caught if issubclass(w.category, AttnvizWarning)]


def _broken_distributions(folder) -> None:
    """Two other tools' distributions whose metadata importlib cannot read: an entry point line without '=' and
    METADATA that is not UTF-8."""
    bad = folder / "badtool-1.0.dist-info"
    bad.mkdir()
    (bad / "METADATA").write_text("Metadata-Version: 2.1\nName: badtool\nVersion: 1.0\n", encoding="utf-8")
    (bad / "entry_points.txt").write_text("[console_scripts]\nbadtool\n", encoding="utf-8")
    latin = folder / "latintool-1.0.dist-info"
    latin.mkdir()
    (latin / "METADATA").write_bytes(b"Metadata-Version: 2.1\nName: latin\xe9tool\nVersion: 1.0\n")
    (latin / "entry_points.txt").write_bytes(b"[console_scripts]\nlatin = l\xe9:main\n")


def test_another_tools_broken_metadata_does_not_stop_the_plugins(fresh_plugins):
    _broken_distributions(fresh_plugins)
    install(fresh_plugins, "myplug", "myplug_r5", FAR_PLUGIN, "far = myplug_r5")
    said = _load()
    assert said == []
    assert plugins.LOADED == ["far (myplug)"]
    assert "far" in statistics.STATISTICS


@pytest.mark.parametrize(("code", "says"), [
    ("import sys\nsys.exit(0)\n", "it called exit(0)"),
    ("import os\nos._exit(3)\n", "it called exit(3)"),
    ("raise KeyboardInterrupt\n", "it raised KeyboardInterrupt"),
    ("raise SystemExit('bye')\n", "it raised SystemExit('bye')"),
    ("import time\ntime.sleep(60)\n", "it took more than 0.5 s to import"),
    ("while True:\n    pass\n", "it took more than 0.5 s to import"),
])
def test_a_plugin_that_exits_is_interrupted_or_hangs_is_one_warning_naming_it(fresh_plugins, monkeypatch, code, says):
    monkeypatch.setattr(plugins, "PLUGIN_SECONDS", 0.5)
    install(fresh_plugins, "rogue", "rogue_r5", code, "rogue = rogue_r5")
    install(fresh_plugins, "myplug", "myplug_r5b", FAR_PLUGIN, "far = myplug_r5b")
    said = _load()
    assert said == [f"plugin rogue (rogue) could not load: {says}; attnviz goes on without it "
                    f"({plugins.NO_PLUGINS_ENV}=1 loads no plugin)"]
    assert plugins.LOADED == ["far (myplug)"]  # the next plugin still loaded, and attnviz is still running


BLAMED = '''
from attnviz.analysis.statistics import Statistic, register


def _fails(block):
    raise ZeroDivisionError("the plugin divided by zero")


register(Statistic("fails", "fail", "a statistic that fails", _fails))
'''

LABELLED = '''
import torch

from attnviz.analysis.statistics import Statistic, register


def _one(block):
    return torch.ones(block.weights.shape[0], dtype=torch.float64)


register(Statistic("shout", "sh", "every head, labelled", _one, label="\\x1b[31mred\\x1b[0m", threshold=0.5))
'''


def test_the_built_in_records_are_sealed_against_item_assignment():
    from attnviz.render.registry import FORMATS
    from attnviz.sources.native import FAMILIES

    llama, png = FAMILIES["llama"], FORMATS["png"]
    with pytest.raises(TypeError, match="llama is one of attnviz's own native families"):
        FAMILIES["llama"] = None  # type: ignore[assignment]
    for change in (lambda: FORMATS.update({"png": None}), lambda: FORMATS.pop("png"),
                   lambda: FORMATS.__delitem__("png"), lambda: FORMATS.__ior__({"png": None})):
        with pytest.raises(TypeError, match="png is one of attnviz's own formats"):
            change()
    assert FORMATS.setdefault("png", None) is png  # a present key is left as it is
    FORMATS.clear()  # drops what was added, never the built-ins
    assert FAMILIES["llama"] is llama and FORMATS["png"] is png and set(FORMATS.built_in) <= set(FORMATS)


def test_a_label_with_an_escape_is_refused_when_its_plugin_registers_it(fresh_plugins):
    """A plugin's label reached the terminal raw in `heads --format csv`; a name, label or description with a
    control character is refused as the record registers, so the plugin is one warning and its columns never print."""
    install(fresh_plugins, "shoutplug", "shoutplug_r5", LABELLED, "shout = shoutplug_r5")
    said = _load()
    assert len(said) == 1 and said[0].startswith("plugin shout (shoutplug) could not load: ValueError: shout: a "
                                                 "statistic's label is printable text")
    assert "\x1b" not in said[0] and "shout" not in statistics.STATISTICS


def test_the_command_names_the_plugin_that_failed(run_cli, fresh_plugins):
    _broken_distributions(fresh_plugins)
    install(fresh_plugins, "failplug", "failplug_r5", BLAMED, "fails = failplug_r5")
    install(fresh_plugins, "exitplug", "exitplug_r5", "import sys\nsys.exit(0)\n", "exits = exitplug_r5")
    failed = run_cli("heads", TEXT, "--model", TINY, "--format", "json")
    assert failed.exit_code == 1, failed.stderr
    lines = failed.stderr.splitlines()
    assert any(line.startswith("attnviz: warning: plugin exits (exitplug) could not load: it called exit(0)")
               for line in lines)
    assert ("attnviz: error: plugin fails (failplug) failed (ZeroDivisionError: the plugin divided by "
            "zero); report it to that plugin's authors, or run without plugins (ATTNVIZ_NO_PLUGINS=1)") in lines
    assert len(lines) == 2 and "internal error" not in failed.stderr
