"""The grammar of the mark attributes: ids, ``list``/``entity`` specs, ``data-value``, ``args``.

Each parser returns the parsed value or raises ``AotuiError(E_APP_ERROR)`` whose message names the
element at fault and shows the correct form; :mod:`sandbox.render` decides where the marks go.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable
from typing import Any

from aotui.protocol.args import parse_arg_schema
from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.messages import OperationSpec
from aotui.protocol.structure import escape_structural
from aotui.sandbox.flow import link_label

__all__ = [
    "MAX_VALUE_BYTES",
    "MAX_VALUE_DEPTH",
    "entity_spec",
    "fault",
    "link_key",
    "list_spec",
    "operation_args",
    "operation_id",
    "operation_lines",
    "parse_value",
]

#: Largest ``data-value``, in bytes of UTF-8.
MAX_VALUE_BYTES = 10 * 1024
#: Deepest nesting of arrays and objects in a ``data-value``.
MAX_VALUE_DEPTH = 32

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_LIST_SPEC = re.compile(rf"({_IDENT})\[\]:({_IDENT})")
# An entity id may carry an index, ``control:page[12]``: an element of a collection that is no
# list (the controls of a page rendered generically, sandbox/web_generic.py), a ref like an item's.
_ENTITY_SPEC = re.compile(rf"({_IDENT}):({_IDENT}(?:\[(?:0|[1-9][0-9]{{0,8}})\])?)")
_OP_ID = re.compile(_IDENT)
_LINK_KEY = re.compile(r"[A-Za-z0-9_.:@-]+")
_MAX_MESSAGE = 600
# A JSON escape that may decode to a lone surrogate, which no encoder downstream can carry.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def fault(message: str, **data: Any) -> AotuiError:
    """An app fault in the view's markup."""
    # Messages quote the app's attribute values and may reach a snapshot's logs.
    message = escape_structural(message)
    if len(message) > _MAX_MESSAGE:
        message = message[: _MAX_MESSAGE - 1] + "…"
    return AotuiError(ErrorCode.E_APP_ERROR, message, data)


def list_spec(spec: str) -> tuple[str, str]:
    """``type[]:list_id`` → ``(type, list_id)``."""
    found = _LIST_SPEC.fullmatch(spec)
    if found is None:
        raise fault(
            f'list="{spec}" is not valid: write list="type[]:list_id", '
            'e.g. list="message[]:message_history"'
        )
    return found.group(1), found.group(2)


def entity_spec(spec: str) -> tuple[str, str]:
    """``type:entity_id`` (or ``type:name[i]``) → ``(type, entity_id)``."""
    found = _ENTITY_SPEC.fullmatch(spec)
    if found is None:
        raise fault(
            f'entity="{spec}" is not valid: write entity="type:entity_id", '
            'e.g. entity="title:conversation_title"'
        )
    return found.group(1), found.group(2)


def link_key(key: str) -> str:
    """A checked ``view-link`` key."""
    if not _LINK_KEY.fullmatch(key):
        raise fault(
            f'view-link="{key}" is not a valid view key: use letters, digits and _ . : @ -, '
            'e.g. view-link="conversation:johnny"'
        )
    return key


def operation_id(value: str) -> str:
    """A checked operation id."""
    if not _OP_ID.fullmatch(value):
        raise fault(
            f'operation="{value}" is not a valid operation id: use letters, digits and _, '
            'not starting with a digit, e.g. operation="send_message"'
        )
    return value


def parse_value(raw: str | None, what: str) -> Any:
    """A ``data-value`` parsed and checked: plain JSON, at most 10 KB and 32 levels deep."""
    if raw is None:
        return None
    if len(raw) * 4 > MAX_VALUE_BYTES and len(raw.encode("utf-8")) > MAX_VALUE_BYTES:
        size = len(raw.encode("utf-8"))
        raise fault(f"data-value of {what} is {size} bytes; the limit is {MAX_VALUE_BYTES}")
    try:
        value = _decode(raw)
    except RecursionError:
        raise fault(f"data-value of {what} is nested deeper than {MAX_VALUE_DEPTH}") from None
    except ValueError as exc:
        raise fault(f"data-value of {what} is not valid JSON: {exc}") from None
    # Depth can only exceed the limit if there are that many brackets; skip the walk otherwise.
    if raw.count("[") + raw.count("{") > MAX_VALUE_DEPTH and _depth(value) > MAX_VALUE_DEPTH:
        raise fault(f"data-value of {what} is nested deeper than {MAX_VALUE_DEPTH}")
    if "\\" in raw and _SURROGATE_ESCAPE.search(raw):
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise fault(f"data-value of {what} holds a lone surrogate (\\ud8xx)") from None
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not plain JSON")


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"{text} is out of range for a JSON number")
    return number


# One decoder for all values: json.loads() with hooks would build a new one per call.
_DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite_float)
# The decoder's C scanner, called directly; typeshed does not declare the attribute.
_SCAN: Callable[[str, int], tuple[Any, int]] = _DECODER.scan_once  # type: ignore[attr-defined]
_JSON_SPACE = " \t\n\r"


def _decode(raw: str) -> Any:
    """``_DECODER.decode(raw)``, calling its C scanner directly (half the cost per value)."""
    start = len(raw) - len(raw.lstrip(_JSON_SPACE))
    try:
        value, end = _SCAN(raw, start)
    except StopIteration:
        end = -1
    if end < 0 or (end != len(raw) and raw[end:].strip(_JSON_SPACE)):
        return _DECODER.decode(raw)  # not one JSON value: let the decoder say what is wrong
    return value


def _depth(value: Any) -> int:
    deepest = 0
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            node = list(node.values())
        if isinstance(node, list):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in node)
    return deepest


def operation_args(raw: str | None, op_id: str) -> dict[str, str]:
    """The ``args`` attribute of an operation, checked by the supervisor's own validator.

    One rule for both sides of the wall (:func:`aotui.protocol.args.parse_arg_schema`): a schema
    the renderer accepts is one every execute can be coerced against.
    """
    if raw is None:
        return {}
    try:
        schema = parse_arg_schema(raw, operation=op_id)
    except AotuiError as exc:
        raise fault(exc.message, operation=op_id) from None
    return schema.to_dict()


def operation_lines(operations: Iterable[OperationSpec]) -> list[str]:
    """The lines under ``#### Operations``."""
    lines: list[str] = []
    for spec in operations:
        lines.append(f"- [{link_label(spec.label)}](operation:{spec.op_id})")
        if spec.description:
            lines.append(f"    - Description: {spec.description}")
        if spec.confirm:
            lines.append("    - Asks the user first: it runs once they confirm")
        if spec.args:
            lines.append("    - Parameters:")
            lines.extend(f"        - {name}: {kind}" for name, kind in spec.args.items())
    return lines
