"""JSON request bodies with limits: a body over `MAX_REQUEST_BODY_BYTES` gets 413, JSON nested
deeper than `MAX_JSON_DEPTH` gets 400, each with the reason (both limits in settings, from env).

The size is checked while reading (never more than the limit + 1 bytes are read, whatever the
Content-Length says), the depth by a scan of the text before `json.loads`, so a hostile body can
neither fill the memory nor exhaust the recursion of the decoder or of the code that walks the
result. Pinot's bodies (schemas, table configs) are a few levels deep; ZooKeeper keeps a znode's
data under 1 MB, so the default size limit stays below it.
"""

from __future__ import annotations

import codecs
import json
import re
from typing import IO, Any

from django.conf import settings
from rest_framework import status
from rest_framework.exceptions import APIException, ParseError
from rest_framework.parsers import JSONParser

__all__ = ["LimitedJSONParser", "RequestTooLarge", "json_depth_exceeds"]

_TOKEN = re.compile(r'[\\"\[\]{}]')


class RequestTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "request body too large"
    default_code = "request_too_large"


def too_large_message(limit: int) -> str:
    return (
        f"the request body is over the limit of {limit} bytes "
        "(MAX_REQUEST_BODY_BYTES; a ZooKeeper znode holds less than 1 MB)"
    )


def json_depth_exceeds(text: str, limit: int) -> bool:
    """Whether the JSON `text` nests arrays and objects more than `limit` levels deep.

    One linear pass over the characters that matter: brackets inside strings do not count, an
    escaped quote does not end a string. Malformed text is left to the decoder."""
    depth = 0
    in_string = False
    escaped_at = -1
    for match in _TOKEN.finditer(text):
        at, char = match.start(), match.group()
        if at == escaped_at:
            continue
        if in_string:
            if char == "\\":
                escaped_at = at + 1
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > limit:
                return True
        elif char in "]}":
            depth -= 1
    return False


def read_limited(stream: IO[bytes] | None, limit: int) -> bytes:
    """At most `limit` bytes of `stream`; RequestTooLarge when there are more."""
    if stream is None:
        return b""
    body = stream.read(limit + 1)
    if len(body) > limit:
        raise RequestTooLarge(too_large_message(limit))
    return body


class LimitedJSONParser(JSONParser):
    """DRF's JSON parser with the size and depth limits (settings MAX_REQUEST_BODY_BYTES and
    MAX_JSON_DEPTH)."""

    def parse(
        self,
        stream: IO[bytes] | None,
        media_type: str | None = None,
        parser_context: dict[str, Any] | None = None,
    ) -> Any:
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        body = read_limited(stream, settings.MAX_REQUEST_BODY_BYTES)
        try:
            text = codecs.decode(body, encoding)
        except (UnicodeDecodeError, LookupError) as exc:
            raise ParseError(f"JSON parse error - the body is not {encoding} text: {exc}") from None
        limit = settings.MAX_JSON_DEPTH
        if json_depth_exceeds(text, limit):
            raise ParseError(
                f"JSON parse error - nested more than {limit} levels deep (MAX_JSON_DEPTH)"
            )
        try:
            return json.loads(text, parse_constant=_refuse_constant)
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from None


def _refuse_constant(name: str) -> None:
    # NaN and Infinity are not JSON; Python's decoder takes them unless told not to.
    raise ValueError(f"{name} is not valid JSON")
