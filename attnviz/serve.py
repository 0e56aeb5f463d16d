"""``attnviz serve``: the interactive page on a local web server that keeps the model loaded.

Built on Starlette (an ASGI toolkit) and served by uvicorn, both in the optional extra
``attnviz[serve]``. The model is loaded once; each request runs it under a lock (one forward pass
at a time, so concurrent requests are safe and never share half-computed state) in Starlette's
thread pool, so the event loop keeps answering.

Contract (tests and scripts rely on it):

* ``GET /``: the page, with a text box (and pair/target boxes where the model takes them), the
  same views as ``attnviz view``, recomputed as the user types (from ``/api/page``).
* ``GET /api/attention?text=…[&pair=…][&target=…]``: ``{"model", "tokens", "token_ids", "special",
  "layers", "attentions": [layers][heads][q][k]}`` (plus the decoder's and cross-attention for
  encoder-decoder models), equal to ``attnviz.extract`` for that text.
* ``GET /api/page?text=…``: the page's data for a text (what the page loads as one types).
* Both also take a POST of a JSON object (``{"text": …, "pair": …}``), for texts too long for a URL.
* A missing text is 400; a text over :data:`MAX_TEXT_BYTES` 413; a text the model cannot take
  (too long, empty, a bad option) 422; each with ``{"error": …}``, and the server keeps serving.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import warnings
from typing import Any

from .errors import AttnvizError, AttnvizWarning, UsageError

MAX_TEXT_BYTES = 64 * 1024
"""Bytes of text (all fields together) one request may send."""

EXAMPLE = "The cat sat on the mat because it was tired."


def check_available() -> None:
    """Starlette and uvicorn are an optional extra: say how to get them."""
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise UsageError("attnviz serve needs the serve extra: pip install 'attnviz[serve]' "
                         "(Starlette and uvicorn)") from None


def create_app(source: Any, *, cmap: str = "viridis") -> Any:
    """The Starlette application serving ``source`` (a loaded model, :func:`attnviz.api.load`)."""
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, Response
    from starlette.routing import Route

    from .api import page_view
    from .render.html import page_html

    lock = threading.Lock()
    can = source.capabilities
    fields = ["target"] if can.cross else ["pair"] if can.pairs else []  # the boxes beside the text box

    async def inputs(request: Request) -> dict[str, str | None]:
        """The fields of a GET query, or of a POST's JSON object (for texts too long for a URL)."""
        if request.method == "POST":
            body = await request.body()
            if len(body) > MAX_TEXT_BYTES + 1024:
                raise _Reply(413, f"the text is over {MAX_TEXT_BYTES // 1024} kB; send less")
            try:
                params = json.loads(body)
            except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
                raise _Reply(400, "the body must be a JSON object such as {\"text\": \"…\"}") from None
            if not isinstance(params, dict) or not all(isinstance(v, str) for v in params.values()):
                raise _Reply(400, "the body must be a JSON object of strings such as {\"text\": \"…\"}")
        else:
            params = request.query_params
        text = params.get("text")
        if text is None or not text.strip():
            raise _Reply(400, "give the text to read: ?text=… (or POST {\"text\": …})")
        values = {"text": text, "pair": params.get("pair") or None, "target": params.get("target") or None}
        if sum(len(v.encode("utf-8", "surrogatepass")) for v in values.values() if v) > MAX_TEXT_BYTES:
            raise _Reply(413, f"the text is over {MAX_TEXT_BYTES // 1024} kB; send less")
        return values

    def locked(work: Any) -> Any:
        with lock, warnings.catch_warnings():  # one forward pass at a time
            warnings.simplefilter("ignore", AttnvizWarning)  # (a short text's statistics: the page says little)
            try:
                return work()
            except AttnvizError as exc:
                raise _Reply(422, exc.message) from None
            except Exception as exc:  # a bug: one line in the log, a 500 to the client, and serving goes on
                first = (str(exc).strip().splitlines() or [""])[0][:200]
                sys.stderr.write(f"attnviz: error: internal error ({type(exc).__name__}: {first}); report it\n")
                raise _Reply(500, f"internal error ({type(exc).__name__}); the server's log has a line on it") from None

    async def run(work: Any) -> Any:
        return await run_in_threadpool(locked, work)  # the event loop keeps answering meanwhile

    async def homepage(request: Request) -> Response:
        page = await run(lambda: page_view(source, EXAMPLE, stats=True))
        page.live = {"endpoint": "/api/page", "text": EXAMPLE, "fields": fields}
        return HTMLResponse(page_html(page, cmap=cmap, connect="'self'"))

    async def attention(request: Request) -> Response:
        try:
            values = await inputs(request)
            result = await run(lambda: source.extract(values["text"], pair=values["pair"], target=values["target"]))
        except _Reply as reply:
            return reply.response()
        body: dict[str, Any] = {
            "model": result.model_name, "tokens": result.tokens, "token_ids": result.token_ids,
            "special": result.special, "layers": result.metadata.get("layers") or list(range(result.n_layers)),
            "causal": result.causal, "attentions": result.attentions.tolist(),
        }
        if result.cross_attentions is not None:
            body.update(target_tokens=result.target_tokens, decoder_attentions=result.decoder_attentions.tolist(),
                        cross_attentions=result.cross_attentions.tolist())
        return Response(json.dumps(body, ensure_ascii=False, separators=(",", ":")), media_type="application/json")

    async def page(request: Request) -> Response:
        try:
            values = await inputs(request)
            built = await run(lambda: page_view(source, values["text"], pair=values["pair"], target=values["target"]))
        except _Reply as reply:
            return reply.response()
        return Response(json.dumps(built.data(cmap), ensure_ascii=False, separators=(",", ":")),
                        media_type="application/json")

    both = ["GET", "POST"]
    return Starlette(routes=[Route("/", homepage), Route("/api/attention", attention, methods=both),
                             Route("/api/page", page, methods=both)])


class _Reply(Exception):
    """An answer other than 200: a status and a message, as JSON."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message

    def response(self) -> Any:
        from starlette.responses import JSONResponse

        return JSONResponse({"error": self.message}, status_code=self.status)


def serve(source: Any, *, host: str = "127.0.0.1", port: int = 8000, cmap: str = "viridis",
          on_ready: Any = None) -> None:
    """Serve ``source`` until Ctrl-C (uvicorn stops cleanly on SIGINT and SIGTERM)."""
    import uvicorn

    config = uvicorn.Config(create_app(source, cmap=cmap), host=host, port=port, log_level="warning",
                            access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    if on_ready is not None:
        on_ready(host, port)
    with contextlib.suppress(KeyboardInterrupt):  # uvicorn has shut down; it passes the signal on once it has
        server.run()
    from ._entry import handled

    handled()  # Ctrl-C is how a server stops: a clean exit, not an interruption
