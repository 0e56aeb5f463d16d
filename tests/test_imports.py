"""The layering of design.md, held: imports point down (cli → api → sources → analysis → render),
and only cli/ speaks the command line's library (typer/click)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "attnviz"
ANALYSIS = ("metrics", "heads", "compare", "transforms", "probes", "explain", "explain_inputs")


def _module(path: Path) -> str:
    return ".".join(("attnviz", *path.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__")


def _imports(path: Path) -> set[str]:
    """Every attnviz module a file imports, at any depth (lazy imports inside functions count too)."""
    module = _module(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found |= {f"{target}.{alias.name}" for alias in node.names}
    return found


MODULES = {_module(p): p for p in PACKAGE.rglob("*.py")}


def _offenders(modules: list[str], forbidden: tuple[str, ...]) -> list[str]:
    return sorted(f"{m} imports {i}" for m in modules for i in _imports(MODULES[m])
                  if any(i == f or i.startswith(f + ".") for f in forbidden))


def test_only_cli_imports_typer_or_click():
    outside = [m for m in MODULES if not m.startswith("attnviz.cli")]
    assert _offenders(outside, ("typer", "click")) == []


def test_analysis_never_reaches_up_into_sources_cli_api_export_or_render():
    analysis = [f"attnviz.{name}" for name in ANALYSIS]
    assert all(m in MODULES for m in analysis)
    forbidden = ("attnviz.sources", "attnviz.cli", "attnviz.api", "attnviz.export", "attnviz.render", "attnviz.report")
    assert _offenders(analysis, forbidden) == []


@pytest.mark.parametrize(("package", "forbidden"), [
    ("attnviz.sources", ("attnviz.cli", "attnviz.api", "attnviz.export", "attnviz.render", "attnviz.report")),
    ("attnviz.render", ("attnviz.cli", "attnviz.api", "attnviz.export", "attnviz.sources")),
])
def test_lower_packages_never_import_upper_ones(package, forbidden):
    assert _offenders([m for m in MODULES if m.startswith(package)], forbidden) == []


def test_the_checker_sees_lazy_and_relative_imports():
    """A negative control: the checker finds what a known module really imports."""
    found = _imports(MODULES["attnviz.api"])
    assert "attnviz.sources.resolve" in found and "attnviz.heads" in found  # relative, one inside a function
