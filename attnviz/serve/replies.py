"""What the server answers a request it cannot serve as asked (:class:`Reply`: a status and a message as JSON), and
the checks of a request's parts that give one: whole numbers, a tile out of range, text that is Unicode, a flag."""

from __future__ import annotations

from typing import Any

from ..errors import AttnvizError, in_request_terms

MAX_TILE_NUMBER = 999_999_999
"""The largest number ``/api/tile`` reads (nine digits): no matrix has more layers, heads, levels or tiles."""


def whole_number(value: str, digits: int = len(str(MAX_TILE_NUMBER))) -> int | None:
    """``"12"`` → 12; None for anything but 1 to ``digits`` ASCII digits (``"²"``, ``"١"``, ``"-1"``, ``" 1"``)."""
    if not (value.isascii() and value.isdigit()) or len(value) > digits:
        return None
    return int(value)


def out_of_range(live: Any, numbers: dict[str, int]) -> Reply | None:
    """The 422 for a tile outside ``live``'s page, naming the parameter; None for a tile it has."""
    try:
        live.check(**numbers)
    except AttnvizError as exc:
        return Reply(422, in_request_terms(exc.template))
    return None


def is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def flag(value: Any) -> bool:
    """``truncate``: true/false as JSON, or 1/0, true/false, yes/no in a query string."""
    if value is None or isinstance(value, bool):
        return bool(value)
    word = value.strip().lower()
    if word in ("1", "true", "yes", "on"):
        return True
    if word in ("", "0", "false", "no", "off"):
        return False
    raise Reply(400, f"truncate takes true or false, not {value!r}")


class Reply(Exception):
    """An answer other than 200: a status and a message, as JSON."""

    def __init__(self, status: int, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.retry_after = status, message, retry_after

    def response(self) -> Any:
        from starlette.responses import JSONResponse

        headers = {"Retry-After": str(self.retry_after)} if self.retry_after else None
        return JSONResponse({"error": self.message}, status_code=self.status, headers=headers)
