"""The floor plan holds (issue 42 part 2): a head's name is spelt in one place, and dead code stays gone."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from attnviz.labels import head_name

PACKAGE = Path(__file__).resolve().parent.parent / "attnviz"
ASSETS = PACKAGE / "render" / "assets"

# a layer number, maybe a space or a middle dot, then a head number: "L{}H{}", "L{} H{}", "L{}·H{}"
HAND_MADE = re.compile(r"L(?:\{\}|%[ds])[ ·.]?H(?:\{\}|%[ds])")


def _templates(tree: ast.AST) -> list[tuple[int, str]]:
    """Every string literal of a module, with each f-string's replacement fields written as ``{}``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            found.append((node.lineno, "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.append((node.lineno, re.sub(r"\{[^{}]*\}", "{}", node.value)))  # str.format's fields too
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):  # "L" + str(layer) + "H" + ...
            parts = []
            while isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
                parts.append(node.right)
                node = node.left
            parts.append(node)
            text = "".join(p.value if isinstance(p, ast.Constant) and isinstance(p.value, str) else "{}"
                           for p in reversed(parts))
            found.append((parts[-1].lineno, text))
    return found


def test_the_one_spelling_of_a_head_name():
    assert head_name(3, 7) == "L3H7"
    assert head_name(0, 0) == "L0H0"


def test_no_head_name_is_spelt_by_hand_in_the_python_code():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == "head_name" and path.name == "labels.py":
                node.body = []  # the one place allowed to spell it
        offenders += [f"{path.relative_to(PACKAGE.parent)}:{line}: {text!r}" for line, text in _templates(tree)
                      if HAND_MADE.search(text)]
    assert not offenders, "use attnviz.labels.head_name:\n" + "\n".join(offenders)


def test_the_scan_catches_the_old_spellings():
    for source in ('f"L{layer}H{head}"', 'f"L{la} H{h}"', 'f"L{layers[i]}·H{i % n}: {v}"', '"L%dH%d" % (1, 2)',
                   '"L{}H{}".format(1, 2)', '"L" + str(layer) + "H" + str(head)', '"L" + str(layer) + " H" + str(h)'):
        assert any(HAND_MADE.search(text) for _, text in _templates(ast.parse(source))), source
    for source in ('f"L{layer}"', 'f"H{h}"', 'f"layer {layer}, head {head}"', 'head_name(layer, head)'):
        assert not any(HAND_MADE.search(text) for _, text in _templates(ast.parse(source))), source


def test_the_page_scripts_name_heads_with_head_name_only():
    names = (ASSETS / "names.js").read_text(encoding="utf-8")
    assert 'function headName(layer, head) { return "L" + layer + "H" + head; }' in names
    by_hand = re.compile(r"\"L\"\s*\+[^;\n]*\+\s*\"[ ·]?H\"|`[^`]*L\$\{[^}]*\}[ ·]?H\$\{")
    offenders = [f"{path.name}:{n}: {line.strip()}" for path in sorted(ASSETS.glob("*.js")) if path.name != "names.js"
                 for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if by_hand.search(line)]
    assert not offenders, "use headName (assets/names.js):\n" + "\n".join(offenders)
    from attnviz.render.html import SCRIPTS

    assert SCRIPTS[0] == "names.js"  # first, so every script after it can call headName


@pytest.mark.parametrize(("module", "owner", "name"), [
    ("attnviz.analysis.compare", None, "head_names"),
    ("attnviz.sources.layer_reader", None, "SQUARE"),
    ("attnviz.export.manifest", None, "_REQUIRED"),
    ("attnviz.explain.text", None, "LANGS"),
    ("attnviz.render.view", "HeatmapView", "with_note"),
    ("attnviz.analysis.heads", "HeadTableBuilder", "add_layers"),
])
def test_the_dead_code_of_issue_42_stays_gone(module, owner, name):
    where = importlib.import_module(module)
    if owner is not None:
        where = getattr(where, owner)
    assert not hasattr(where, name), f"{module}.{owner + '.' if owner else ''}{name} was dead and removed (issue 42)"
    # nor did it move elsewhere in attnviz (HeatmapView's parts went to views/heatmap.py, views/layers.py to sources/)
    defined = [str(path.relative_to(PACKAGE.parent)) for path in sorted(PACKAGE.rglob("*.py"))
               if re.search(rf"^{name}\b.*=|^\s*def {name}\b", path.read_text(encoding="utf-8"), re.M)]
    assert not defined, defined


def test_the_docs_floor_plan_table_places_every_module_as_parts_does():
    """docs/development.md's table of parts lists, for each part, exactly the packages and modules PARTS places
    there (it lacked images/, organisms/, tables and result_formats)."""
    import re

    from docs_text import DOCS
    from test_imports import PARTS

    table = DOCS["development.md"].split("```text\npart       modules", 1)[1].split("```", 1)[0]
    found: dict[str, set[str]] = {}
    part = ""
    for line in table.splitlines()[1:]:
        cells = re.split(r"\s{2,}", re.sub(r"\([^)]*\)", "", line).strip())
        if not line.startswith(" "):
            part, cells = cells[0], cells[1:]
        names = re.findall(r"[A-Za-z_]+(?:\.py|/)?", cells[0]) if cells else []
        found.setdefault(part, set()).update(n.removesuffix(".py").removesuffix("/") for n in names)
    for name, modules in PARTS.items():
        expected = {m.removeprefix("attnviz.") for m in modules}
        assert found.get(name) == expected, (name, sorted(expected ^ found.get(name, set())))
