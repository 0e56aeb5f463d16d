"""The command line is a shell over the library (issue 60, item 1): cli/ imports attnviz.api, attnviz.views, the
renderers, the apps and the core's errors, interrupts, plugins and defaults, and nothing else of attnviz's; what a
command computes or checks, the API offers (``attnviz.api``'s names, each command's among them).

What cli/ still reaches for past the API is listed in DEBT, each entry a module of the core a command still uses
directly (a file check, a text's escaping, a table writer). The list only shrinks: a new import past the API fails
here, and so does an entry no longer made (remove it)."""

from __future__ import annotations

import importlib.util

import pytest
import test_imports as ti

ALLOWED = ("attnviz.api", "attnviz.views", "attnviz.render", "attnviz.serve", "attnviz.export", "attnviz.tui",
           "attnviz.report", "attnviz.notebook", "attnviz.errors", "attnviz.interrupts", "attnviz.plugins",
           "attnviz.defaults", "attnviz.cli")

DEBT: dict[str, set[str]] = {}


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _past_the_api(stem: str) -> set[str]:
    found = ti._imports(ti.PACKAGE / "cli" / f"{stem}.py")
    return {m.removeprefix("attnviz.") for m in found if m.startswith("attnviz.") and m != "attnviz.__version__"
            and not any(m == a or m.startswith(a + ".") for a in ALLOWED) and _is_module(m)}


@pytest.mark.parametrize("stem", sorted(p.stem for p in (ti.PACKAGE / "cli").glob("*.py")))
def test_a_command_reaches_past_the_api_only_where_listed(stem):
    found = _past_the_api(stem)
    listed = DEBT.get(stem, set())
    assert found <= listed, f"cli/{stem}.py imports {sorted(found - listed)} past the API: use attnviz.api"
    assert listed <= found, f"cli/{stem}.py no longer imports {sorted(listed - found)}: remove it from DEBT"


def test_the_api_offers_what_the_commands_take_from_it():
    """Every name a command imports from attnviz.api is there (a lazy name resolves to its library function)."""
    import ast

    from attnviz import api

    for path in sorted((ti.PACKAGE / "cli").glob("*.py")):
        for node in ast.walk(ti._tree(path)):
            if isinstance(node, ast.ImportFrom) and node.module == "api" and node.level == 2:
                for alias in node.names:
                    assert getattr(api, alias.name) is not None, (path.name, alias.name)
