"""The page scripts' data contract: what :meth:`attnviz.render.page.Page.data` hands ``assets/*.js``, declared
once (:data:`PAGE`) and checked on the Python side (:func:`check_page_data`).

The declaration is plain data: a Python type (``str``, ``int``, ``bool``; :data:`NUMBER` is an int or a
float, never a bool), :class:`Obj` (an object with these keys, some optional), :class:`ListOf`,
:class:`MapOf` (an object of any string keys, each value alike), :class:`Maybe` (null allowed) and
:class:`OneOf` (one of these values). :func:`check_page_data` also checks what ties the parts together
(a kind's pyramids to its layers and heads, a stats row to its columns, the page opened on a view and a
kind it has, a view's ``needs`` naming a key of the page). A page script that reads a new key, or Python
that hands a new one, changes :data:`PAGE` with it. No dependency: the standard library alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class PageDataError(ValueError):
    """The page's data breaks its contract: the message names the key path (``kinds.self.pyramids[0][1].vmax``)."""


@dataclass(frozen=True)
class Obj:
    """A JSON object with exactly these ``keys`` (each key → its schema); those in ``optional`` may be absent."""

    keys: dict[str, Any]
    optional: frozenset[str] = field(default_factory=frozenset)


@dataclass(frozen=True)
class ListOf:
    """A JSON array, each item of ``item``'s schema."""

    item: Any


@dataclass(frozen=True)
class MapOf:
    """A JSON object of any string keys, each value of ``value``'s schema (a kind's name → its data)."""

    value: Any


@dataclass(frozen=True)
class Maybe:
    """``null``, or ``schema``."""

    schema: Any


@dataclass(frozen=True)
class OneOf:
    """One of these values."""

    values: tuple[Any, ...]


NUMBER = (int, float)
"""A number: an int or a float (a bool is neither, here)."""


def _obj(optional: tuple[str, ...] = (), **keys: Any) -> Obj:
    return Obj(keys, frozenset(optional))


LEVEL = _obj(factor=int, rows=int, cols=int, encoding=OneOf(("f16", "log8", "lin8")))
"""One level of a kind's pyramid: its pooling factor, its shape in cells, how its tiles are stored."""

HEAD = _obj(("lines",), tiles=ListOf(MapOf(str)), vmax=NUMBER, sinks=ListOf(int), vmaxNoSinks=NUMBER, rowMax=str,
            lines=MapOf(str))
"""One head of one layer: its tiles per level (``"x,y"`` → the tile, base64 gzip), its largest value with and
without its attention sinks, the sinks' keys, each row's largest value, and (a long input) each query's
strongest keys."""

KIND = _obj(("panelTitles",), rows=ListOf(str), cols=ListOf(str), rowSpecial=ListOf(bool), colSpecial=ListOf(bool),
            layers=ListOf(int), heads=int, pyramids=ListOf(ListOf(HEAD)), vmax=NUMBER, causal=bool, breaks=ListOf(int),
            scale=NUMBER, offset=NUMBER, centre=NUMBER, tile=int, levels=ListOf(LEVEL), encoding=OneOf(("f16", "log8")),
            included=int, lines=int, panelTitles=ListOf(str))
"""One kind of attention (self, decoder, cross): the tokens, the layers and their heads' pyramids
[layer][head], the colour scale (a value is ``offset + stored · scale``), the levels held (``included``)."""

STATS = _obj(columns=ListOf(str), rows=ListOf(ListOf(object)), descriptions=MapOf(str))
"""The heads table: ``columns`` (layer, head, each statistic in its order), a row per head (its values, then
its labels: each cell checked by :func:`check_page_data`) and each statistic's description."""

VECTORS = _obj(q=ListOf(ListOf(NUMBER)), k=ListOf(ListOf(NUMBER)))
QK = MapOf(MapOf(VECTORS))
"""The query-key view's vectors: layer (the model's number, as a string) → head → q and k ``[tokens, d]``."""

INITIAL = _obj(("kind", "query"), kind=str, layer=int, head=int, view=str, query=int)
"""What the page opens on (``kind`` defaults to its first; ``query``: a generation's first generated token)."""

LIVE = _obj(endpoint=str, text=str, fields=ListOf(str))
"""``attnviz serve``'s page: where it asks for another text's page, the text shown, the boxes beside it."""

EXTRA = _obj(name=str, title=str, rows=ListOf(str), cols=ListOf(str), values=ListOf(ListOf(NUMBER)), vmax=NUMBER,
             valueName=str, notes=ListOf(str))
"""Another matrix in its own tab (compare-heads' head distances: :meth:`attnviz.render.page.Page.add_matrix`)."""

GENERATION = _obj(promptLength=int, generated=int, kinds=ListOf(str), keyKinds=ListOf(str))
"""A generated text's step slider (:func:`attnviz.views.page_parts.generation_steps`)."""

TILES = _obj(endpoint=str, page=str, kind=str)
"""A served page's finer tiles: where to ask for them (:meth:`attnviz.views.live_tiles.LiveTiles.script_data`)."""

PICTURE = _obj(label=str, name=str, src=str, width=int, height=int, size=ListOf(int), layout=str, rows=int, cols=int,
               patch=int, boxes=ListOf(ListOf(NUMBER)), positions=ListOf(int), tokens=ListOf(int), at=int)
"""One picture of the picture view: its label and file name, the picture itself (``src``: a ``data:`` URL of at most
512 pixels a side, ``width`` × ``height``), its original ``size``, its finest grid (``rows`` × ``cols`` patches of
``patch`` pixels) with each patch's box in the original's pixels and token (``positions``, row-major), every token
of the picture (``tokens``), and where its patches start among the weights' keys (``at``)."""

COLLAPSED = _obj(kind=str, index=ListOf(int), first=ListOf(int))
"""The matrix with each picture's tokens as one row and column: its kind, each token's row in it (``index``) and each
of its rows' first token (``first``)."""

PICTURES = _obj(images=ListOf(PICTURE), queries=ListOf(int), layers=ListOf(int), heads=int,
                encoding=OneOf(("f16", "log8")), weights=Maybe(ListOf(ListOf(str))), mean=ListOf(str),
                collapsed=COLLAPSED, expand=bool)
"""The picture view (:func:`attnviz.views.picture_page.picture_data`): the pictures, the tokens whose weights the page
holds (``queries``), and per layer each head's (``weights``: null where they would not fit) and their mean's
weights, a ``[queries, patches]`` tile each (the pictures' patches in order), stored as ``encoding``."""

VIEW = _obj(name=str, tab=str, needs=Maybe(OneOf(("qk", "stats", "extras", "pictures"))), heads=bool)
"""One view of the page (:meth:`attnviz.render.page_views.PageView.script_data`); ``needs`` names the key of
the page's data without which the view is not offered."""

PAGE = _obj(title=str, model=str, kinds=MapOf(KIND), stats=Maybe(STATS), qk=Maybe(QK), initial=INITIAL, valueName=str,
            notes=ListOf(str), live=Maybe(LIVE), extras=ListOf(EXTRA), generation=Maybe(GENERATION),
            tiles=Maybe(TILES), pictures=Maybe(PICTURES), views=ListOf(VIEW), cmap=ListOf(ListOf(int)), format=OneOf(("attnviz-page",)),
            version=OneOf((1,)))
"""Everything :meth:`attnviz.render.page.Page.data` hands the page's scripts, every key always there."""


def _kind_of(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _check(value: Any, schema: Any, path: str) -> None:
    where = path or "the page's data"
    if isinstance(schema, Maybe):
        if value is not None:
            _check(value, schema.schema, path)
    elif isinstance(schema, OneOf):
        if isinstance(value, bool) or value not in schema.values:
            raise PageDataError(f"{where}: expected one of {', '.join(map(repr, schema.values))}, got {value!r}")
    elif isinstance(schema, Obj):
        if not isinstance(value, Mapping):
            raise PageDataError(f"{where}: expected an object, got {_kind_of(value)}")
        missing = [k for k in schema.keys if k not in value and k not in schema.optional]
        unknown = [k for k in value if k not in schema.keys]
        if missing or unknown:
            raise PageDataError(f"{where}: " + "; ".join(
                ([f"missing {', '.join(f'{path}.{k}'.lstrip('.') for k in missing)}"] if missing else []) +
                ([f"undeclared {', '.join(f'{path}.{k}'.lstrip('.') for k in unknown)} "
                  "(declare it in attnviz/render/page_schema.py)"] if unknown else [])))
        for key, inner in schema.keys.items():
            if key in value:
                _check(value[key], inner, f"{path}.{key}".lstrip("."))
    elif isinstance(schema, MapOf):
        if not isinstance(value, Mapping):
            raise PageDataError(f"{where}: expected an object, got {_kind_of(value)}")
        for key, inner in value.items():
            if not isinstance(key, str):
                raise PageDataError(f"{where}: a key must be a string, got {key!r}")
            _check(inner, schema.value, f"{path}.{key}".lstrip("."))
    elif isinstance(schema, ListOf):
        if not isinstance(value, list | tuple):
            raise PageDataError(f"{where}: expected an array, got {_kind_of(value)}")
        for i, item in enumerate(value):
            _check(item, schema.item, f"{path}[{i}]")
    elif schema is object:
        return
    else:
        types = schema if isinstance(schema, tuple) else (schema,)
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            wanted = "a number" if types == NUMBER else " or ".join(t.__name__ for t in types)
            raise PageDataError(f"{where}: expected {wanted}, got {_kind_of(value)} {value!r}"[:300])


def _fail(path: str, message: str) -> None:
    raise PageDataError(f"{path}: {message}")


def _check_kinds(kinds: Mapping[str, Any]) -> None:
    for name, kind in kinds.items():
        path = f"kinds.{name}"
        if len(kind["pyramids"]) != len(kind["layers"]):
            _fail(f"{path}.pyramids", f"{len(kind['pyramids'])} layers of pyramids for {len(kind['layers'])} layers")
        for i, layer in enumerate(kind["pyramids"]):
            if len(layer) != kind["heads"]:
                _fail(f"{path}.pyramids[{i}]", f"{len(layer)} heads, not {kind['heads']}")
            for h, head in enumerate(layer):
                if len(head["tiles"]) != kind["included"]:
                    _fail(f"{path}.pyramids[{i}][{h}].tiles", f"{len(head['tiles'])} levels, not {kind['included']}")
                if any(not 0 <= k < len(kind["cols"]) for k in head["sinks"]):
                    _fail(f"{path}.pyramids[{i}][{h}].sinks", f"a key outside 0 to {len(kind['cols']) - 1}")
        if not 1 <= kind["included"] <= len(kind["levels"]):
            _fail(f"{path}.included", f"{kind['included']} levels of {len(kind['levels'])}")
        for key, tokens in (("rowSpecial", "rows"), ("colSpecial", "cols")):
            if len(kind[key]) != len(kind[tokens]):
                _fail(f"{path}.{key}", f"{len(kind[key])} flags for {len(kind[tokens])} tokens")


def _check_stats(stats: Mapping[str, Any]) -> None:
    columns = stats["columns"]
    if columns[:2] != ["layer", "head"]:
        _fail("stats.columns", f"must begin with layer and head, not {columns[:2]}")
    if [c for c in columns[2:] if c not in stats["descriptions"]]:
        _fail("stats.descriptions", f"no description of {[c for c in columns[2:] if c not in stats['descriptions']]}")
    for i, row in enumerate(stats["rows"]):
        path = f"stats.rows[{i}]"
        if len(row) != len(columns) + 1:
            _fail(path, f"{len(row)} cells for {len(columns)} columns and the labels")
        for j, cell in enumerate(row[:-1]):
            _check(cell, int if j < 2 else NUMBER, f"{path}[{j}]")
        _check(row[-1], ListOf(str), f"{path}[{len(columns)}]")


def _check_pictures(pictures: Mapping[str, Any], kinds: Mapping[str, Any]) -> None:
    rows = kinds.get("self", {}).get("rows", [])
    if pictures["collapsed"]["kind"] not in kinds:
        _fail("pictures.collapsed.kind", f"{pictures['collapsed']['kind']!r} is not one of the page's kinds")
    if len(pictures["collapsed"]["index"]) != len(rows):
        _fail("pictures.collapsed.index", f"{len(pictures['collapsed']['index'])} rows for {len(rows)} tokens")
    if any(not 0 <= q < len(rows) for q in pictures["queries"]):
        _fail("pictures.queries", f"a token outside 0 to {len(rows) - 1}")
    for i, picture in enumerate(pictures["images"]):
        cells = picture["rows"] * picture["cols"]
        if len(picture["boxes"]) != cells or len(picture["positions"]) != cells:
            _fail(f"pictures.images[{i}]", f"{len(picture['boxes'])} boxes and {len(picture['positions'])} tokens for "
                  f"{picture['rows']} × {picture['cols']} patches")
    layers = len(pictures["layers"])
    if len(pictures["mean"]) != layers or (pictures["weights"] is not None and (
            len(pictures["weights"]) != layers or any(len(w) != pictures["heads"] for w in pictures["weights"]))):
        _fail("pictures.weights", f"not one tile per head and one mean for each of {layers} layers")


def check_page_data(data: Mapping[str, Any]) -> None:
    """Raise :class:`PageDataError`, naming the key path, where ``data`` (:meth:`~attnviz.render.page.Page.data`)
    breaks the contract :data:`PAGE` declares, or its parts do not tie together; else return None."""
    _check(data, PAGE, "")
    _check_kinds(data["kinds"])
    if data["stats"] is not None:
        _check_stats(data["stats"])
    names = [view["name"] for view in data["views"]]
    for i, view in enumerate(data["views"]):
        if view["needs"] is not None and view["needs"] not in PAGE.keys:
            _fail(f"views[{i}].needs", f"{view['needs']!r} is not a key of the page's data")
    initial = data["initial"]
    if initial["view"] not in names:
        _fail("initial.view", f"{initial['view']!r} is not one of the page's views ({', '.join(names)})")
    if "kind" in initial and initial["kind"] not in data["kinds"]:
        _fail("initial.kind", f"{initial['kind']!r} is not one of the page's kinds ({', '.join(data['kinds'])})")
    if data["tiles"] is not None and data["tiles"]["kind"] not in data["kinds"]:
        _fail("tiles.kind", f"{data['tiles']['kind']!r} is not one of the page's kinds")
    if data["pictures"] is not None:
        _check_pictures(data["pictures"], data["kinds"])
