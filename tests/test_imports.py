"""The floor plan of docs/development.md, held: every module has a place (:data:`PARTS`), imports point
down the order (:data:`ORDER`: each part imports only the parts below it, counting imports inside functions
and those for types only), every import that does not is named in :data:`EXCEPTIONS` with its reason, no
import circles at all, no private name crosses a module, and only cli/ speaks the command line's library.

Run as a script (``python tests/test_imports.py``), it lists every import that runs up against the order."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "attnviz"
# Every module belongs to one part of the architecture (docs/development.md), named by its package or its
# name. A new module must be placed here, so the picture stays whole. The parts, top to bottom: a part may
# import every part below it and none above it (ORDER).
PARTS = {
    "entry": ("attnviz.__main__", "attnviz._entry"),
    "cli": ("attnviz.cli",),
    "apps": ("attnviz.serve", "attnviz.export", "attnviz.report", "attnviz.tui"),
    "api": ("attnviz", "attnviz.api", "attnviz.api_names", "attnviz.views", "attnviz.notebook"),
    "methods": ("attnviz.attribution", "attnviz.explain", "attnviz.generation", "attnviz.needle", "attnviz.kv",
                "attnviz.images", "attnviz.audio"),
    "sources": ("attnviz.sources", "attnviz.config", "attnviz.organisms"),
    "analysis": ("attnviz.analysis", "attnviz.attention"),
    "render": ("attnviz.render",),
    "data": ("attnviz.result", "attnviz.inputs"),
    "core": ("attnviz.errors", "attnviz.tables", "attnviz.result_formats", "attnviz.layer_range", "attnviz.limits", "attnviz.quiet", "attnviz.fileio",
             "attnviz.labels", "attnviz.interrupts", "attnviz.plugins", "attnviz.cluster", "attnviz.records", "attnviz.spans", "attnviz.threads",
             "attnviz.defaults"),
}
ORDER = tuple(PARTS)

# The imports that run up against ORDER, each with its reason: the one place they are named. Every one
# must still be made (test_every_exception_is_still_needed), so a fixed one leaves this list.
EXCEPTIONS: dict[tuple[str, str], str] = {
    ("attnviz.result", "attnviz.notebook"):
        "AttentionResult._repr_html_ (inside the method, when Jupyter shows a result): Jupyter asks the object's "
        "own class for its display, so the result names the notebook frame that draws its page; nothing the "
        "page is built with imports result at run time, so no circle follows",
}


def _part(module: str) -> str | None:
    found = [name for name, prefixes in PARTS.items()
             for prefix in prefixes if module == prefix or (prefix != "attnviz" and module.startswith(prefix + "."))]
    return found[0] if len(found) == 1 else None


def _module(path: Path) -> str:
    return ".".join(("attnviz", *path.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__")


@functools.cache
def _tree(path: Path) -> ast.Module:
    """A module's syntax tree, parsed once for every test here (read-only)."""
    return ast.parse(path.read_text(encoding="utf-8"))


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node except those under ``if TYPE_CHECKING:`` (annotations only: never run, so they import nothing)."""
    found: list[ast.AST] = []
    work = [tree]
    while work:
        node = work.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            work.extend(node.orelse)
            continue
        found.append(node)
        work.extend(ast.iter_child_nodes(node))
    return found


def _imports(path: Path, *, typing_too: bool = True) -> set[str]:
    """Every attnviz module a file imports, at any depth (lazy imports inside functions count too);
    without ``typing_too``, those under ``if TYPE_CHECKING:`` are left out."""
    module = _module(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: set[str] = set()
    tree = _tree(path)
    for node in ast.walk(tree) if typing_too else _runtime_nodes(tree):
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


def test_every_module_has_one_place_in_the_architecture():
    assert sorted(m for m in MODULES if _part(m) is None) == []


def _in(part: str) -> list[str]:
    return [m for m in MODULES if _part(m) == part]


def _above(part: str) -> tuple[str, ...]:
    """The modules' prefixes a part may not import: those of every part above it in :data:`ORDER`."""
    return tuple(prefix for upper in ORDER[: ORDER.index(part)] for prefix in PARTS[upper])


def test_every_part_is_found():
    """Each part holds modules (a renamed package would empty it, and its rules would hold of nothing)."""
    assert [part for part in ORDER if not _in(part)] == []


def _upward(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Every edge of ``graph`` from a module to one in a part above its own (a module with no part is
    test_every_module_has_one_place_in_the_architecture's to report)."""
    def rank(module: str) -> int:
        part = _part(module)
        return ORDER.index(part) if part else -1

    return sorted((module, target) for module, targets in graph.items() for target in targets
                  if rank(module) >= 0 and rank(target) >= 0 and rank(target) < rank(module))


def test_imports_point_down_the_order():
    """Each part imports only the parts below it (its forbidden set is every part above it, derived from
    ORDER), at import, inside a function or for its types, except what EXCEPTIONS names."""
    assert [edge for edge in _upward(_graph()) if edge not in EXCEPTIONS] == []


def test_every_exception_is_still_needed():
    assert [edge for edge in EXCEPTIONS if edge not in _upward(_graph())] == []


def test_every_exception_runs_up_and_says_why():
    for (module, target), reason in EXCEPTIONS.items():
        assert module in MODULES and target in MODULES and len(reason) > 40
        assert ORDER.index(_part(target)) < ORDER.index(_part(module))


def test_the_order_check_can_fail():
    """A negative control: a core module importing a renderer, a source a method, are found; down is not."""
    graph = {"attnviz.fileio": {"attnviz.render.registry"}, "attnviz.sources.own": {"attnviz.explain"},
             "attnviz.render.view": {"attnviz.labels"}}
    assert _upward(graph) == [("attnviz.fileio", "attnviz.render.registry"), ("attnviz.sources.own", "attnviz.explain")]
    assert "attnviz.cli" in _above("apps") and "attnviz.render" not in _above("render")


def test_no_private_name_crosses_a_module():
    """``from x import _name`` outside x: what one module keeps to itself, another does not lean on."""
    offenders = []
    for module, path in MODULES.items():
        for node in _runtime_nodes(_tree(path)):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("attnviz")):
                offenders += [f"{module}: {alias.name}" for alias in node.names
                              if alias.name.startswith("_") and not alias.name.startswith("__")]
    assert offenders == []


def test_the_checker_sees_lazy_and_relative_imports():
    """A negative control: the checker finds what a known module really imports."""
    found = _imports(MODULES["attnviz.api"])
    assert "attnviz.sources.resolve" in found and "attnviz.analysis.heads" in found  # relative, one inside a function


def _message_strings(path: Path) -> list[tuple[int, str]]:
    """Every string constant (f-string parts included) inside a raise or a warnings.warn call."""
    found = []
    for node in ast.walk(_tree(path)):
        is_warn = isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "warn"
        if isinstance(node, ast.Raise) or is_warn:
            for inner in ast.walk(node):
                if isinstance(inner, ast.Constant) and isinstance(inner.value, str):
                    found.append((inner.lineno, inner.value))
    return found


def test_the_library_never_names_a_command_line_flag():
    """Outside cli/, errors and warnings name options as markers ([[layers=99]]); the CLI words them as flags."""
    import re

    flag = re.compile(r"(?<![\w\[-])--[a-z]")
    offenders = [f"{m}:{line}: {text!r}" for m, path in MODULES.items() if not m.startswith("attnviz.cli")
                 for line, text in _message_strings(path) if flag.search(text)]
    assert offenders == []


def test_the_flag_check_can_fail(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text('def f(x):\n    raise ValueError(f"--layer {x} is out of range")\n')
    assert [text for _, text in _message_strings(bad)] == ["--layer ", " is out of range"]


def _graph(*, typing_too: bool = True) -> dict[str, set[str]]:
    """Module → the attnviz modules it imports, at import, inside a function or for types only (``if
    TYPE_CHECKING:``: a circle of types is a circle of ideas, too). ``from . import metrics`` is an
    edge to ``attnviz.analysis.metrics`` alone, and ``attnviz.render.image.DPI`` counts as its module.
    Without ``typing_too``, the imports under ``if TYPE_CHECKING:`` are left out (those that run)."""
    graph = {}
    for module, path in MODULES.items():
        names = _imports(path, typing_too=typing_too)
        targets = set()
        for name in names:
            if any(other.startswith(name + ".") and other in MODULES for other in names):
                continue  # ``from pkg import module``: the module is the edge, not the package
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name and name != module:
                targets.add(name)
        graph[module] = targets
    return graph


def _circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def test_no_import_circles_at_all():
    """No module imports, at import, inside a function or for its types, a module that imports it back."""
    assert _circles(_graph()) == []


def test_the_circle_check_can_fail():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e2"}, "e2": set()}
    assert _circles(graph) == [{"a", "b", "c"}]


# Private names of other libraries that attnviz uses on purpose: os._exit (leave at once, no clean-up:
# a killed export's drawing process), matplotlib's font cache (cleared when fonts change), IPython's
# display protocol, transformers' config._attn_implementation (the attention function a model runs now: kv's cut
# caches switch it and put it back; transformers has no public reader).
FOREIGN_PRIVATE = {"_exit", "_findfont_cached", "_repr_html_", "_attn_implementation"}


def _private_defined(tree: ast.AST) -> set[str]:
    """The private names a module defines: its functions and methods, and the attributes it assigns."""
    names = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)}
    names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)}
    return {name for name in names if name.startswith("_")}


def test_no_module_reaches_into_another_modules_private_attributes():
    """``thing._name`` outside ``self``/``cls``/``super()`` only for a private name the same module defines."""
    offenders = []
    for module, path in MODULES.items():
        tree = _tree(path)
        own = _private_defined(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                held = ast.unparse(node.value)
                if held in ("self", "cls", "super()") or node.attr in own or node.attr in FOREIGN_PRIVATE:
                    continue
                offenders.append(f"{module}: {held}.{node.attr}")
    assert offenders == []


def upward_report() -> list[str]:
    """Each import that runs up against :data:`ORDER`: importer (part) → imported (part), run or types."""
    run = _graph(typing_too=False)
    return [f"{'run  ' if target in run[module] else 'types'} {module} ({_part(module)}) → {target} ({_part(target)})"
            + ("  [named exception]" if (module, target) in EXCEPTIONS else "")
            for module, target in _upward(_graph())]


if __name__ == "__main__":
    found = upward_report()
    print("\n".join(found))
    print(f"{len(found)} imports run up ({sum(line.startswith('run') for line in found)} at run time)")
