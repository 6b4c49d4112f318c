"""JSON-RPC 2.0 framing of the ``rpc.sock`` face: one request a line in, one response a line out.

Every line becomes an :class:`RpcCall` or an :class:`RpcFailure`, with the standard codes for
what is not a valid call — ``-32700`` parse error, ``-32600`` invalid request, ``-32601`` unknown
method, ``-32602`` bad params (checked against the method's declaration in :mod:`protocol.api`,
default deny: each call carries its typed record). A line may
also be a batch (a JSON array of 1 to :data:`MAX_BATCH` requests, JSON-RPC 2.0 §6): an
:class:`RpcBatch`, answered by one array line (one entry a request, none for a notification); an
empty batch or a longer one is one ``-32600`` error. aotui's own errors map through
:attr:`~protocol.errors.ErrorCode.jsonrpc_code` (CONTRACT §7) with ``data: {code, recoverable}``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aotui.protocol import api
from aotui.protocol.api import Face, ParamError
from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.structure import sanitize

__all__ = [
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "MAX_BATCH",
    "METHODS",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "RpcBatch",
    "RpcCall",
    "RpcFailure",
    "batch_line",
    "error_line",
    "notification_line",
    "parse_line",
    "result_line",
]

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
#: Most requests one batch may hold (its calls run in order, one after the other).
MAX_BATCH = 32

RequestId = str | int | None


#: Every method of this face, by name: those :mod:`protocol.api` declares with ``Face.JSONRPC``.
METHODS: dict[str, api.Method] = {
    name: method for name, method in api.METHODS.items() if Face.JSONRPC in method.faces
}


@dataclass(frozen=True)
class RpcCall:
    """A valid request (or notification, which gets no response)."""

    id: RequestId
    method: str
    params: dict[str, Any]
    #: Sent without ``id``: run it, answer nothing (JSON-RPC 2.0 §4.1).
    notification: bool
    #: The params as the method's declared record, checked.
    call: api.Params


@dataclass(frozen=True)
class RpcFailure:
    """A line that is not a valid call: the error response to send."""

    id: RequestId
    code: int
    message: str
    #: A well-formed notification (no ``id``) with an unknown method or bad params: no answer.
    notification: bool = False


@dataclass(frozen=True)
class RpcBatch:
    """A batch: its requests in order, each a call or the error it deserves."""

    calls: tuple[RpcCall | RpcFailure, ...]


def parse_line(line: bytes) -> RpcCall | RpcFailure | RpcBatch:
    """One line of input as a call (or a batch of them), or the standard error it deserves."""
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):
        return RpcFailure(
            None, PARSE_ERROR, "parse error: a line must be one JSON object (or an array of them)"
        )
    if not isinstance(message, list):
        return _parse_message(message)
    if not message:
        return RpcFailure(None, INVALID_REQUEST, "an empty batch: a batch holds 1 or more requests")
    if len(message) > MAX_BATCH:
        return RpcFailure(
            None,
            INVALID_REQUEST,
            f"a batch holds at most {MAX_BATCH} requests, not {len(message)}; "
            f"send the rest in another batch (nothing of this one ran)",
        )
    return RpcBatch(tuple(_parse_message(item) for item in message))


def _parse_message(message: object) -> RpcCall | RpcFailure:
    if not isinstance(message, dict):
        return RpcFailure(None, INVALID_REQUEST, "a request must be a JSON object")
    raw_id = message.get("id")
    request_id: RequestId = raw_id if _valid_id(raw_id) else None
    if message.get("jsonrpc") != "2.0":
        return RpcFailure(request_id, INVALID_REQUEST, 'a request needs "jsonrpc": "2.0"')
    if not _valid_id(raw_id):
        return RpcFailure(None, INVALID_REQUEST, '"id" must be a string, an integer or null')
    method = message.get("method")
    if not isinstance(method, str):
        return RpcFailure(request_id, INVALID_REQUEST, '"method" must be a string')
    extra = set(message) - {"jsonrpc", "id", "method", "params"}
    if extra:
        return RpcFailure(
            request_id, INVALID_REQUEST, f"unknown member(s) {', '.join(sorted(extra))[:200]}"
        )
    notification = "id" not in message
    spec = METHODS.get(method)
    if spec is None:
        known = ", ".join(sorted(METHODS))
        message_text = f"unknown method {method[:80]!r}; known: {known}"
        return RpcFailure(request_id, METHOD_NOT_FOUND, message_text, notification)
    params = message.get("params", {})
    if not isinstance(params, dict):
        return RpcFailure(
            request_id, INVALID_PARAMS, "params must be an object (by name)", notification
        )
    try:
        call = spec.parse(params, Face.JSONRPC)
    except ParamError as exc:
        return RpcFailure(request_id, INVALID_PARAMS, exc.message, notification)
    return RpcCall(request_id, method, params, notification, call)


def _valid_id(value: object) -> bool:
    return value is None or isinstance(value, str) or type(value) is int


def result_line(request_id: RequestId, result: Any) -> bytes:
    """A success response, one line."""
    return _line({"jsonrpc": "2.0", "id": request_id, "result": result})


def error_line(
    request_id: RequestId, error: AotuiError | RpcFailure, sanitized: bool = True
) -> bytes:
    """An error response, one line: CONTRACT §7's JSON-RPC code, ``data: {code, recoverable}``.

    ``sanitized=False`` keeps the message as raised, as the control socket sends it.
    """
    if isinstance(error, RpcFailure):
        code = ErrorCode.E_INVALID_CMD
        body = {
            "code": error.code,
            "message": error.message,
            "data": {"code": code.value, "recoverable": code.recoverable},
        }
    else:
        body = error.to_jsonrpc()
        if sanitized:  # the last gate before the agent: a message may quote app text
            # ... sanitized where it was composed (AppRecord.name, a worker's error): the
            # desktop's own command hints reach the agent as written, any other tag escaped.
            body["message"] = sanitize(error.message, limit=4000, hints=True)
    return _line({"jsonrpc": "2.0", "id": request_id, "error": body})


def batch_line(replies: list[bytes]) -> bytes:
    """The answer to a batch, one line: the responses (lines of their own) as one JSON array."""
    return b"[" + b",".join(reply.rstrip(b"\n") for reply in replies) + b"]\n"


def notification_line(method: str, params: Mapping[str, Any]) -> bytes:
    """A notification from the desktop (``event``), one line."""
    return _line({"jsonrpc": "2.0", "method": method, "params": dict(params)})


def _line(message: dict[str, Any]) -> bytes:
    # ensure_ascii: a line is plain ASCII, whatever an app put in its text (no raw U+2028 etc.).
    return json.dumps(message, default=str, separators=(",", ":")).encode() + b"\n"
