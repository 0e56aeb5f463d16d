"""Plugins through entry points (issue 42 part 3): a distribution that declares an ``attnviz.plugins``
entry point is loaded when a command reads the registries, and its statistic reaches ``heads`` as a
built-in one does; a broken plugin is one warning line; ``ATTNVIZ_NO_PLUGINS=1`` loads none; and
``attnviz --help`` loads none. The distributions are installed into a temporary folder (a module and a
``.dist-info`` with ``entry_points.txt``) put on ``PYTHONPATH`` of a fresh process."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from conftest import ROOT, TINY
from processes import run_each

from attnviz import api

TEXT = "the cat sat on the mat and the dog sat on the log"

FAR_PLUGIN = '''
import sys

import torch

from attnviz.analysis.statistics import Statistic, register

sys.stderr.write("myplug: imported\\n")


def _far_rows(block):
    w = block.weights  # [heads, rows, width]
    rows = torch.arange(block.start, block.start + w.shape[1])[:, None]
    keys = torch.arange(w.shape[2])[None, :]
    return (w * ((rows - keys).abs() > 2)).sum((-1, -2)).double()


register(Statistic("far", "far", "mean weight on keys more than 2 tokens away", _far_rows))
'''


def install(folder: Path, dist: str, module: str, code: str, entry: str) -> None:
    """A distribution ``dist`` 0.1 in ``folder``: ``module``.py holding ``code``, and its ``.dist-info``
    declaring ``entry`` (``NAME = module[:callable]``) in the group attnviz.plugins."""
    (folder / f"{module}.py").write_text(code, encoding="utf-8")
    info = folder / f"{dist}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[attnviz.plugins]\n{entry}\n", encoding="utf-8")


def _env(folder: Path, **more: str) -> dict[str, str]:
    path = os.pathsep.join([str(folder), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])
    return {"PYTHONPATH": path, "ATTNVIZ_NO_PLUGINS": "", **more}


def _far_by_hand(attentions: torch.Tensor) -> torch.Tensor:
    """The plugin's statistic from whole layers ``[L, H, n, n]``: a mask and a mean over query rows."""
    n = attentions.shape[-1]
    i = torch.arange(n)
    far = ((i[:, None] - i[None, :]).abs() > 2).double()
    return (attentions.double() * far).sum(-1).mean(-1)


HEADS = ["heads", TEXT, "--model", TINY, "--sort", "far", "--format", "json"]

# A second plugin's statistic, registered by a callable entry point (``near = nearplug:setup``).
NEAR_PLUGIN = '''
import torch

from attnviz.analysis.statistics import Statistic, register


def _near_rows(block):
    w = block.weights
    rows = torch.arange(block.start, block.start + w.shape[1])[:, None]
    keys = torch.arange(w.shape[2])[None, :]
    return (w * ((rows - keys).abs() <= 2)).sum((-1, -2)).double()


def setup():
    register(Statistic("near", "near", "mean weight on keys at most 2 tokens away", _near_rows))
'''
BROKEN = "raise RuntimeError('boom\\nand a second line')\n"


@pytest.fixture(scope="module")
def three_plugins(tmp_path_factory) -> dict[str, tuple[int, str, str]]:
    """One fresh process with three plugin distributions installed (a module entry point, a callable one, and one
    that raises as it imports) runs --help, the heads table sorted by the plugin's column, and a --sort the
    registries lack: (exit code, stdout, stderr) of each (one start-up of torch for the three tests below)."""
    folder = tmp_path_factory.mktemp("plugins")
    install(folder, "myplug", "myplug", FAR_PLUGIN, "far = myplug")
    install(folder, "nearplug", "nearplug", NEAR_PLUGIN, "near = nearplug:setup")
    install(folder, "badplug", "badplug", BROKEN, "bad = badplug")
    commands = {"help": ["--help"], "heads": HEADS, "unknown": ["heads", TEXT, "--model", TINY, "--sort", "nope"]}
    return dict(zip(commands, run_each(list(commands.values()), _env(folder)), strict=True))


def test_a_plugin_distributions_statistic_reaches_heads_sorted_and_exact(three_plugins):
    code_help, _, err_help = three_plugins["help"]
    assert code_help == 0 and "myplug" not in err_help and "warning" not in err_help  # --help loads no plugin
    code, out, err = three_plugins["heads"]
    assert code == 0, err
    assert err.count("myplug: imported") == 1
    heads = json.loads(out)["heads"]
    far = [h["far"] for h in heads]
    assert far == sorted(far, reverse=True)
    expected = _far_by_hand(api.load(TINY).extract(TEXT).attentions)
    assert {(h["layer"], h["head"]): h["far"] for h in heads} == pytest.approx(
        {(layer, head): float(expected[layer, head]) for layer in range(expected.shape[0])
         for head in range(expected.shape[1])}, abs=2e-6)
    code_sort, _, err_sort = three_plugins["unknown"]
    assert code_sort == 2 and "sink, far" in err_sort  # the check's message lists it with the built-ins


def test_a_callable_entry_point_is_called(three_plugins):
    code, out, err = three_plugins["heads"]
    assert code == 0, err
    heads = json.loads(out)["heads"]
    assert all(h["near"] == pytest.approx(1 - h["far"], abs=1e-5) for h in heads)  # every row's weights sum to 1


def test_a_broken_plugin_is_one_warning_line_and_the_command_goes_on(three_plugins):
    status, out, err = three_plugins["heads"]
    assert status == 0, err
    warned = [line for line in err.splitlines() if "warning" in line]
    assert warned == ["attnviz: warning: plugin bad (badplug) could not load: RuntimeError: boom; "
                      "attnviz goes on without it (ATTNVIZ_NO_PLUGINS=1 loads no plugin)"], err
    assert all("far" in h and "near" in h for h in json.loads(out)["heads"])  # the good plugins still loaded


def test_no_plugins_when_the_environment_says_so(tmp_path):
    install(tmp_path, "myplug", "myplug", FAR_PLUGIN, "far = myplug")
    install(tmp_path, "badplug", "badplug", "raise RuntimeError('boom')\n", "bad = badplug")
    [(status, _, err)] = run_each([HEADS], _env(tmp_path, ATTNVIZ_NO_PLUGINS="1"))
    assert status == 2 and "--sort 'far' is not a column" in err
    assert "myplug" not in err and "warning" not in err
