"""``attnviz serve``: the interactive page on a local web server that keeps the model loaded.

Built on Starlette (an ASGI toolkit) and served by uvicorn, both in the optional extra
``attnviz[serve]``. The model is loaded once; each request runs it in its turn (one request
computes at a time, so concurrent requests are safe and never share half-computed state:
:mod:`attnviz.serve.turns`) in Starlette's thread pool, so the event loop keeps answering.

Contract (tests and scripts rely on it):

* ``GET /``: the page, with a text box (and pair/target boxes where the model takes them), the
  same views as ``attnviz view``, recomputed as the user types (from ``/api/page``).
* With pictures (``attnviz serve --image``, :func:`create_app`'s ``pictures``): each text is read
  beside the pictures given at the start, its page the page of pictures (``attnviz view --image``'s),
  ``/api/attention`` adds ``images`` (the result's ``metadata["images"]``); pair, target and truncate
  are 422.
* With a clip (``attnviz serve --audio``, :func:`create_app`'s ``sounds``: a Whisper and a clip, fixed): the text is a
  transcript teacher-forced over the clip (empty: the model's own greedy transcript), the home page the sound page of
  ``attnviz view --audio`` with a box for it, ``/api/page`` that page's data less the clip's sound and spectrogram
  (the page holds them once), ``/api/attention`` the decoder's cross-attention over the clip
  (:mod:`attnviz.serve.sounds`); pair, target and truncate are 422, and ``/api/tile`` has no page.
* ``GET /api/attention?text=…[&pair=…][&target=…]``: ``{"model", "tokens", "token_ids", "special",
  "layers", "attentions": [layers][heads][q][k]}`` (plus the decoder's and cross-attention for
  encoder-decoder models), equal to ``attnviz.extract`` for that text.
* ``GET /api/page?text=…``: the page's data for a text (what the page loads as one types). A long
  text's page holds its matrix's coarse levels; its ``tiles`` entry names the page for
  ``/api/tile``.
* ``GET /api/tile?page=…&layer=…&head=…&level=…&x=…&y=…``: one tile of that page's matrix (level 0:
  the whole matrix max-pooled into at most 256 × 256 cells; the last level: one cell per query
  and key), as little-endian float32, row by row, with headers ``X-Tile-Rows``, ``X-Tile-Cols``
  and ``X-Tile-Exact`` (1: computed from the layer's queries and keys, as the leaves always are:
  equal to ``attnviz.extract``'s weights; 0: decoded from the pooled tiles kept when the page was
  built). Its parameters are ASCII whole numbers, in range, or a 422 naming the parameter. A page
  is kept (its tiles answered) while the server's cache holds it; one no longer kept is 404.
* Both also take a POST of a JSON object (``{"text": …, "pair": …}``), for texts too long for a URL.
* A missing text is 400; a text over :data:`MAX_TEXT_BYTES` 413 (a body is refused on its
  ``Content-Length``, and never read past the limit); a POST that is not ``application/json`` 415;
  an unknown parameter, a lone surrogate, or a text the model cannot take (too long, empty, a bad
  option) 422; an answer over :data:`MAX_RESPONSE_VALUES` weights 413; more than
  :data:`MAX_WAITING` requests waiting 503; 404 and 405 too: each with ``{"error": …}``, and the
  server keeps serving. ``truncate`` (true/false) cuts a text too long for the model.
* It answers only to the host names it was started for, and refuses API requests from other
  sites (:mod:`attnviz.serve.guard`: DNS rebinding and cross-site requests).
* The model runs, and each answer is encoded, on a worker thread, one request at a time; the
  event loop keeps answering (the home page is computed once, before serving). A request whose
  client disconnects stops between two blocks of rows (or never starts); a long one hands the
  model to the requests waiting after each turn (a quarter of a second and 8 blocks of rows), and
  one long request goes on at a time (:mod:`attnviz.serve.turns`).
* What it keeps between requests (pages with their layers' queries and keys or weights and pooled
  tiles, tiles computed, row normalisers) is one cache of at most ``cache_size`` bytes
  (:data:`CACHE_SIZE`, ``--cache-size``), the least recently used evicted first
  (:mod:`attnviz.serve.cache`); only the home page's entry is never evicted.
* No request leaves a traceback in the log: a bug is one line there, and a 500.
"""

from __future__ import annotations

import contextlib
import json
import sys
import warnings
from typing import Any

from ..errors import AttnvizError, AttnvizWarning, ServeError, UsageError, in_request_terms
from .process import listen
from .replies import MAX_TILE_NUMBER, Reply, flag, is_unicode, out_of_range, whole_number

MAX_TEXT_BYTES = 2 * 1024 * 1024
"""Bytes of text (all fields together) one request may send: a document of 128k tokens and more."""

CACHE_SIZE = 512 << 20
"""Bytes the server keeps between requests at most, by default (``attnviz serve --cache-size``)."""

HELD_TILES = 256_000_000
"""Bytes of pooled tiles kept per page beyond what the page itself holds, to answer ``/api/tile`` at
once: a quarter of the cache at most."""


TILE_FIELDS = ("page", "layer", "head", "level", "x", "y")

MAX_BODY_BYTES = MAX_TEXT_BYTES + 1024
"""Bytes of a POST body: the text and its JSON framing. Checked on ``Content-Length``, then while reading."""

MAX_RESPONSE_VALUES = 4_000_000
"""Attention weights one ``/api/attention`` answer may hold (about 40 MB of JSON): every head of
the default model up to about 235 tokens. ``/api/page`` sends quantised weights and has no such cap."""

MAX_WAITING = 16
"""Requests that may wait for the model at once; more get 503 with Retry-After."""

FIELDS = ("text", "pair", "target", "truncate")
"""What a request may send."""

EXAMPLE = "The cat sat on the mat because it was tired."
PICTURE_EXAMPLE = "What is in the picture?"
"""The home page's text of a server of pictures (``attnviz serve --image``), read beside them."""


MIN_CACHE_SIZE = 1 << 20
"""The smallest cache a server takes (1 MiB: the home page and a few tiles)."""


def cache_bytes(text: str) -> int:
    """``"512M"`` → 512·2²⁰: the cache's size as given (:func:`attnviz.limits.parse_size`'s sizes), or a
    :class:`UsageError` saying what to write."""
    from ..errors import ResourceError
    from ..limits import human, parse_size

    try:
        size = parse_size(text.strip())
    except ResourceError:
        raise UsageError(f"[[cache_size={text!r}]] is not a size; write e.g. 512M, 2G or a number of bytes") from None
    if size < MIN_CACHE_SIZE:
        raise UsageError(f"[[cache_size={text!r}]] is under {human(MIN_CACHE_SIZE)}, too little to keep the page; "
                         "give e.g. 512M")
    return size


def check_available() -> None:
    """Starlette and uvicorn are an optional extra: say how to get them."""
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise UsageError("attnviz serve needs the serve extra: pip install starlette uvicorn (or pip install -e '.[serve]' in attnviz's clone) "
                         "(Starlette and uvicorn)") from None


def create_app(source: Any, *, cmap: str = "viridis", host: str = "127.0.0.1",
               allowed_hosts: tuple[str, ...] = (), cache_size: int = CACHE_SIZE, turns: Any = None,
               pictures: Any = None, sounds: Any = None) -> Any:
    """The Starlette application serving ``source`` (a loaded model, :func:`attnviz.api.load`), or with
    ``pictures`` (:class:`attnviz.views.picture_page.Pictures`: a model that reads pictures and the pictures, fixed)
    each text read beside them, its page the page of pictures (``source`` unused: None), or with ``sounds``
    (:class:`attnviz.views.sound_page.Sounds`: a Whisper and a clip, fixed) each text a transcript of the clip, its
    page the sound page (:mod:`attnviz.serve.sounds`; ``source`` unused: None).

    It answers only to IP literals, ``localhost``, ``host`` and ``allowed_hosts`` in the ``Host``
    header, and refuses API requests from other sites (:mod:`attnviz.serve.guard`). It keeps at most
    ``cache_size`` bytes between requests; requests take the model in ``turns`` (default: a
    :class:`~attnviz.serve.turns.Turns` of its default turns). Its ``state`` holds ``turns`` and
    ``cache`` (:class:`~attnviz.serve.cache.ByteCache`)."""
    import anyio
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.exceptions import HTTPException
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, Response
    from starlette.routing import Route

    from ..api import page_view
    from ..render.html import page_html
    from ..views.live_tiles import LiveTiles
    from .cache import ByteCache, KeptLayers, size_of, trim_heap
    from .guard import Guard, allowed_names
    from .sounds import SoundAnswers
    from .turns import Cancelled, Ticket, Turns

    turns = Turns() if turns is None else turns
    cache = ByteCache(cache_size)
    hold = min(HELD_TILES, cache_size // 4)
    waiting = [0]  # requests between arriving and finishing their computation (the event loop's thread only)
    fixed = pictures if pictures is not None else sounds  # what each text is read with, fixed at the start
    cross = fixed is None and source.capabilities.cross
    # the boxes beside the text box
    fields = [] if fixed is not None else ["target"] if cross else ["pair"] if source.capabilities.pairs else []
    heard = None if sounds is None else SoundAnswers(sounds, cmap, MAX_RESPONSE_VALUES)  # a clip's page and answers

    async def body_of(request: Request) -> bytes:
        """The POST body, refused as soon as it is known to be too large (never read whole first)."""
        declared = request.headers.get("content-length")
        if declared is not None and (whole_number(declared, 18) is None or int(declared) > MAX_BODY_BYTES):
            raise Reply(413, f"the text is over {MAX_TEXT_BYTES // 1024} kB; send less")
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != "application/json":
            raise Reply(415, "send the body as JSON (Content-Type: application/json), such as {\"text\": \"…\"}")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise Reply(413, f"the text is over {MAX_TEXT_BYTES // 1024} kB; send less")
            chunks.append(chunk)
        return b"".join(chunks)

    async def inputs(request: Request) -> dict[str, Any]:
        """The fields of a GET query, or of a POST's JSON object (for texts too long for a URL)."""
        if request.method == "POST":
            body = await body_of(request)
            try:
                params = json.loads(body)
            except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
                raise Reply(400, "the body must be a JSON object such as {\"text\": \"…\"}") from None
            if not isinstance(params, dict) or not all(isinstance(v, (str, bool)) for v in params.values()):
                raise Reply(400, "the body must be a JSON object of strings such as {\"text\": \"…\"}")
        else:
            params = request.query_params
        unknown = sorted(set(params) - set(FIELDS))
        if unknown:
            raise Reply(422, f"unknown parameter {', '.join(map(repr, unknown))}; this server takes "
                              f"{', '.join(FIELDS)}")
        text = params.get("text")
        if not isinstance(text, str) or not (text.strip() or sounds is not None):  # (a clip's empty text: its own)
            raise Reply(400, "give the text to read: ?text=… (or POST {\"text\": …})"
                        + ("; an empty transcript asks for the model's own" if sounds is not None else ""))
        values = {"text": text, "pair": params.get("pair") or None, "target": params.get("target") or None}
        if any(not isinstance(v, str) for v in values.values() if v is not None):
            raise Reply(400, "text, pair and target must be strings")
        for name, value in values.items():
            if value is not None and not is_unicode(value):
                raise Reply(422, f"{name} holds a lone surrogate (text that is not valid Unicode); send UTF-8 text")
        if sum(len(v.encode("utf-8")) for v in values.values() if v) > MAX_TEXT_BYTES:
            raise Reply(413, f"the text is over {MAX_TEXT_BYTES // 1024} kB; send less")
        values["truncate"] = flag(params.get("truncate"))
        asked = [name for name in ("pair", "target", "truncate") if values[name]] if fixed is not None else []
        if asked:
            read = "beside its pictures" if sounds is None else "as a transcript of its clip"
            raise Reply(422, f"{', '.join(asked)}: this server reads each text {read} as the model takes it; send "
                              "the text alone")
        return values

    def locked(work: Any, ticket: Ticket, trim: bool = False) -> tuple[bool, Any]:
        """On a worker thread: ``work(checkpoint)`` holding the model in ``ticket``'s turn, as ``(True,
        value)``, or ``(False, reply)``: the :class:`Reply` to send. Nothing is raised past here, so an
        exception (and its traceback, whose frames hold the page worked on) ends with this call: no
        thread pool, future or log keeps it, and no reference cycle through it keeps a page alive.
        ``trim``: then give the memory the work freed back to the system (:func:`attnviz.serve.cache.trim_heap`)."""
        try:
            with turns.turn(ticket), warnings.catch_warnings():
                warnings.simplefilter("ignore", AttnvizWarning)  # (a short text's statistics: the page says little)
                outcome = True, work(lambda: turns.checkpoint(ticket))
        except Cancelled:
            outcome = False, Reply(499, "the client went away")  # nobody reads it
        except Reply as reply:
            outcome = False, Reply(reply.status, reply.message, reply.retry_after)
        except AttnvizError as exc:
            outcome = False, Reply(422, in_request_terms(exc.template))
        except MemoryError:
            outcome = False, Reply(413, "this request needs more memory than the server has; send a shorter text")
        except Exception as exc:  # a bug: one line in the log, a 500 to the client, and serving goes on
            first = (str(exc).strip().splitlines() or [""])[0][:200]
            sys.stderr.write(f"attnviz: error: internal error ({type(exc).__name__}: {first}); report it\n")
            outcome = False, Reply(500, f"internal error ({type(exc).__name__}); the server's log has a line on it")
        if trim:
            trim_heap()
        return outcome

    async def run(work: Any, request: Request, trim: bool = False) -> tuple[bool, Any]:
        """``work`` (the computation and its encoding) on a worker thread in its turn, the event loop
        answering meanwhile, stopped if the client disconnects; answered as :func:`locked` says."""
        if waiting[0] >= MAX_WAITING:
            return False, Reply(503, "the server is busy with other requests; try again in a moment", retry_after=2)
        ticket = Ticket()
        waiting[0] += 1
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(_watch_disconnect, request.receive, lambda: turns.cancel(ticket))
                try:
                    return await run_in_threadpool(locked, work, ticket, trim)
                finally:
                    group.cancel_scope.cancel()
            # (a task group swallows only its own scope's cancellation, which comes after the return above)
            raise AssertionError("the task group ended without the work's outcome")
        except BaseException:  # the server stops while the work runs: the work stops too
            turns.cancel(ticket)
            raise
        finally:
            waiting[0] -= 1

    def tiled_page(values: dict[str, Any], checkpoint: Any, *, home: bool = False) -> Any:
        """The page of a text; kept in the cache with its layers for /api/tile where they fit."""
        layers = KeptLayers(cache.limit)
        if pictures is not None:
            built = pictures.page(values["text"], hold=hold, layers_out=layers, checkpoint=checkpoint)
        else:
            built = page_view(source, values["text"], pair=values["pair"], target=values["target"],
                              truncate=values["truncate"], hold=hold, layers_out=layers, checkpoint=checkpoint)
        if "self" in built.kinds and not cross and not layers.over:
            live = LiveTiles(built, list(layers), store=cache, owned=True)
            layers.clear()
            kept = cache.put(live.id, live, size_of(live), pinned=home)
            if not kept and live.held:  # without its pooled tiles (computed on request instead) it may fit
                live.held = []
                kept = cache.put(live.id, live, size_of(live), pinned=home)
            if kept:
                built.tiles = live.script_data("/api/tile")
        return built

    def build_home(checkpoint: Any) -> str:
        example = EXAMPLE if pictures is None else PICTURE_EXAMPLE
        page = tiled_page({"text": example, "pair": None, "target": None, "truncate": False}, checkpoint, home=True)
        page.live = {"endpoint": "/api/page", "text": example, "fields": fields}
        return page_html(page, cmap=cmap, connect="'self'")

    # once, before serving: a visit never waits behind a request
    built_home, home = locked(build_home if heard is None else heard.home, Ticket())
    if not built_home:
        raise ServeError(f"the server's page could not be built: {home.message}")

    async def homepage(request: Request) -> Response:
        return HTMLResponse(home)

    def attention_json(values: dict[str, Any], checkpoint: Any) -> str:
        if pictures is not None:
            result = pictures.read(values["text"])
        else:
            result = source.extract(values["text"], pair=values["pair"], target=values["target"],
                                    truncate=values["truncate"])
        tensors = [result.attentions]
        if result.cross_attentions is not None:
            tensors += [result.decoder_attentions, result.cross_attentions]
        count = sum(t.numel() for t in tensors)
        if count > MAX_RESPONSE_VALUES:
            raise Reply(413, f"the answer would hold {count:,} weights, over this server's {MAX_RESPONSE_VALUES:,}; "
                              "send a shorter text, or ask /api/page, which sends them quantised")
        body: dict[str, Any] = {
            "model": result.model_name, "tokens": result.tokens, "token_ids": result.token_ids,
            "special": result.special, "layers": result.metadata.get("layers") or list(range(result.n_layers)),
            "causal": result.causal, "attentions": result.attentions.tolist(),
        }
        if result.cross_attentions is not None:
            body.update(target_tokens=result.target_tokens, decoder_attentions=result.decoder_attentions.tolist(),
                        cross_attentions=result.cross_attentions.tolist())
        if pictures is not None:  # where each picture's tokens are, and each patch's box in the picture
            body["images"] = [picture.to_dict() for picture in result.pictures]
        return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)

    def page_json(values: dict[str, Any], checkpoint: Any) -> str:
        return json.dumps(tiled_page(values, checkpoint).data(cmap), ensure_ascii=False, separators=(",", ":"),
                          allow_nan=False)

    async def tile(request: Request) -> Response:
        """One tile of a kept page (see the module), as float32 bytes."""
        params = request.query_params
        unknown = sorted(set(params) - set(TILE_FIELDS))
        if unknown:
            return Reply(422, f"unknown parameter {', '.join(map(repr, unknown))}; /api/tile takes "
                               f"{', '.join(TILE_FIELDS)}").response()
        numbers = {}
        for name in TILE_FIELDS[1:]:
            value = params.get(name, "")
            number = whole_number(value)
            if number is None:
                return Reply(422, f"{name} must be a whole number from 0 to {MAX_TILE_NUMBER:,} in ASCII digits, "
                                   f"not {value[:20]!r}").response()
            numbers[name] = number
        live = cache.get(params.get("page", ""))
        if heard is not None:
            return Reply(404, "a server of a clip keeps no tiles: /api/page sends each transcript's page whole, "
                              "/api/attention its cross-attention").response()
        if not isinstance(live, LiveTiles):
            return Reply(404, "no such page: the server no longer keeps it (or never did); load the page again"
                          ).response()
        refused = out_of_range(live, numbers)
        if refused is not None:
            return refused.response()

        def work(checkpoint: Any) -> tuple[bytes, int, int, bool]:
            values, exact = live.tile(**numbers, checkpoint=checkpoint)
            return values.astype("<f4").tobytes(), values.shape[0], values.shape[1], exact

        done, answer = await run(work, request)
        if not done:
            return answer.response()
        body, rows, cols, exact = answer
        return Response(body, media_type="application/octet-stream", headers={
            "X-Tile-Rows": str(rows), "X-Tile-Cols": str(cols), "X-Tile-Exact": "1" if exact else "0",
            "Cache-Control": "no-store"})

    def answering(encode: Any) -> Any:
        """A route: the request's fields, then ``encode(fields, checkpoint)`` on a worker thread, as JSON."""
        async def route(request: Request) -> Response:
            try:
                values = await inputs(request)
            except Reply as reply:
                return reply.response()
            done, answer = await run(lambda checkpoint: encode(values, checkpoint), request, trim=True)
            if not done:
                return answer.response()
            return Response(answer, media_type="application/json")

        return route

    async def http_error(request: Request, exc: Any) -> Response:
        """404, 405 and the like as JSON, as every other answer of this server."""
        detail = {404: "no such page; the server has /, /api/attention, /api/page and /api/tile",
                  405: f"{request.method} is not allowed here; use GET (or POST for /api/…)"}
        return Reply(exc.status_code, detail.get(exc.status_code, str(exc.detail))).response()

    both = ["GET", "POST"]
    attention_of, page_of = (attention_json, page_json) if heard is None else (heard.attention, heard.page)
    app = Starlette(routes=[Route("/", homepage), Route("/api/attention", answering(attention_of), methods=both),
                            Route("/api/page", answering(page_of), methods=both), Route("/api/tile", tile)],
                    exception_handlers={HTTPException: http_error})
    app.state.turns, app.state.cache = turns, cache
    guard = Guard(app, allowed_names(host, allowed_hosts))
    guard.state = app.state
    return guard


async def _watch_disconnect(receive: Any, gone: Any) -> None:
    """Call ``gone()`` when the client disconnects (what the server receives once the body is read)."""
    try:
        while (await receive())["type"] != "http.disconnect":
            pass
    except Exception:  # a server that cannot say: the work goes on to its end, as it always did
        return
    gone()


def serve(source: Any, *, host: str = "127.0.0.1", port: int = 8000, cmap: str = "viridis",
          allowed_hosts: tuple[str, ...] = (), cache_size: int | None = None, on_ready: Any = None,
          pictures: Any = None, sounds: Any = None) -> None:
    """Serve ``source`` until Ctrl-C (uvicorn stops cleanly on SIGINT and SIGTERM). ``on_ready(host,
    port)`` is called once the socket listens, with the real port (``port=0`` picks a free one);
    ``cache_size``: the bytes kept between requests at most (default :data:`attnviz.serve.CACHE_SIZE`);
    ``pictures``, ``sounds``: as :func:`create_app`'s."""
    import uvicorn

    sock = listen(host, port)
    config = uvicorn.Config(create_app(source, cmap=cmap, host=host, allowed_hosts=allowed_hosts,
                                       cache_size=CACHE_SIZE if cache_size is None else cache_size,
                                       pictures=pictures, sounds=sounds),
                            log_level="warning", access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    if on_ready is not None:
        on_ready(host, sock.getsockname()[1])
    try:
        with contextlib.suppress(KeyboardInterrupt):  # uvicorn has shut down; it passes the signal on once it has
            server.run(sockets=[sock])
    finally:
        sock.close()
    from ..interrupts import handled

    handled()  # Ctrl-C is how a server stops: a clean exit, not an interruption
