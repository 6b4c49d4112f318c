"""A WebMCP tool's JSON Schema as an aotui operation's ``{name: type}`` args, and back.

The mapping: each property of the tool's ``inputSchema`` is one argument; a ``required`` one
is required, any other optional (``name?``). ``string``, ``number``, ``integer`` and
``boolean`` keep their type (``number`` with ``multipleOf: 1``, which Chromium
gives an ``<input type=number>``, is ``integer``; ``["string", "null"]`` is ``string``; an
``enum``/``const`` list without a type takes the type of its values). Anything else — an object,
an array, a union — is an argument of type ``string`` that carries JSON text. What the args
grammar cannot say (an enum, a bound, a length, the JSON's shape, a property's description) is
written into the operation's description, and :func:`check_input` enforces it before the tool
runs: the browser passes a tool whatever it is given. Names that are not aotui names (``first
name``, ``add-todo``) are spelled with ``_``; a tool whose names then collide is not offered.
"""

from __future__ import annotations

import json
import math
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aotui.protocol.args import SCALAR_TYPES
from aotui.protocol.errors import invalid_cmd, show_value

__all__ = ["ToolArg", "ToolRefused", "WebTool", "check_input", "map_tool"]

#: The largest ``inputSchema`` mapped, in characters of JSON; a bigger one is refused.
MAX_SCHEMA_CHARS = 16 * 1024
#: The most arguments one tool may declare.
MAX_ARGS = 32
#: The longest tool or argument name.
MAX_NAME = 64
#: The longest description (the tool's own plus the parameters' hints).
MAX_DESCRIPTION = 800
_NOT_OP = re.compile(r"[^A-Za-z0-9_]+")
_NOT_ARG = re.compile(r"[^A-Za-z0-9_-]+")
_JSON_KINDS = {"object": dict, "array": list}
#: (schema keyword, the test a value must pass against it, the words of a refusal)
_BOUNDS: tuple[tuple[str, Callable[[Any, Any], bool], str], ...] = (
    ("minimum", operator.ge, "at least"),
    ("maximum", operator.le, "at most"),
    ("exclusiveMinimum", operator.gt, "over"),
    ("exclusiveMaximum", operator.lt, "under"),
)


class ToolRefused(ValueError):
    """A tool that cannot be offered as an operation (the message says why)."""


@dataclass(frozen=True, slots=True)
class ToolArg:
    """One argument of a tool: its aotui name and type, and its property in the schema."""

    #: The aotui argument name (``first_name``).
    name: str
    #: The schema's property name (``first name``): the key the tool receives.
    prop: str
    #: ``string``, ``number``, ``integer`` or ``boolean``.
    type: str
    #: Whether the agent may leave it out.
    optional: bool
    #: The property's schema, for :func:`check_input`.
    schema: Mapping[str, Any]
    #: ``"object"``, ``"array"`` or ``"any"`` when the string carries JSON text; else ``""``.
    json: str = ""


@dataclass(frozen=True, slots=True)
class WebTool:
    """A tool a page offers, as the operation it is shown as."""

    #: The page's name for it (``add_todo``).
    name: str
    #: The operation id (``add_todo``; ``add-todo`` becomes ``add_todo``).
    op_id: str
    #: The operation's label (``Add Todo``).
    label: str
    #: The tool's description and the hints of its parameters.
    description: str
    #: The frame the tool was registered in.
    frame_id: str
    #: The declarative form's backend node id; ``None`` for an imperative tool.
    node: int | None
    #: Its arguments, in the schema's order.
    args: tuple[ToolArg, ...]
    #: A declarative form submitted only once the user agrees (no ``toolautosubmit``), or a
    #: tool the page calls consequential: the desktop asks the user first.
    confirm: bool
    #: The form submits itself once filled (``toolautosubmit``).
    autosubmit: bool

    @property
    def args_json(self) -> str:
        """The ``args`` attribute: ``{"title": "string", "count?": "integer"}``."""
        return json.dumps(
            {a.name + ("?" if a.optional else ""): a.type for a in self.args}, ensure_ascii=False
        )


def map_tool(raw: Mapping[str, Any]) -> WebTool:
    """A ``WebMCP.Tool`` as an operation; :class:`ToolRefused` when it cannot be one."""
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ToolRefused("it has no name")
    op_id = _spelled(name, _NOT_OP, "its name")
    args = _arguments(raw.get("inputSchema") or {})
    annotations = raw.get("annotations")
    annotations = annotations if isinstance(annotations, Mapping) else {}
    node = raw.get("backendNodeId")
    node = node if isinstance(node, int) and not isinstance(node, bool) else None
    autosubmit = bool(annotations.get("autosubmit"))
    description = str(raw.get("description") or "")
    hints = "; ".join(f"{a.name}: {h}" for a in args if (h := _hint(a)))
    if hints:
        description = f"{description.rstrip()} — {hints}" if description.strip() else hints
    if len(description) > MAX_DESCRIPTION:
        description = description[: MAX_DESCRIPTION - 1] + "…"
    words = [w for w in re.split(r"[\W_]+", name) if w]
    return WebTool(
        name=name,
        op_id=op_id,
        label=" ".join(w[:1].upper() + w[1:] for w in words) or op_id,
        description=description,
        frame_id=str(raw.get("frameId") or ""),
        node=node,
        args=args,
        confirm=(node is not None and not autosubmit) or bool(annotations.get("consequential")),
        autosubmit=autosubmit,
    )


def _spelled(name: str, outside: re.Pattern[str], what: str) -> str:
    """``name`` as an aotui name: runs of other characters become ``_``, never a leading digit."""
    if len(name) > MAX_NAME:
        raise ToolRefused(f"{what} is over {MAX_NAME} characters")
    spelled = outside.sub("_", name.strip()).strip("_")
    if not spelled:
        raise ToolRefused(f"{what} has no letter or digit")
    return spelled if not spelled[0].isdigit() else "_" + spelled


def _arguments(schema: Any) -> tuple[ToolArg, ...]:
    """The arguments of an ``inputSchema``, in its order."""
    if not isinstance(schema, Mapping):
        raise ToolRefused("its inputSchema is not an object")
    if len(json.dumps(schema)) > MAX_SCHEMA_CHARS:
        raise ToolRefused(f"its inputSchema is over {MAX_SCHEMA_CHARS} characters")
    properties = schema.get("properties") or {}
    required = schema.get("required") or []
    if not isinstance(properties, Mapping) or not isinstance(required, list):
        raise ToolRefused("its inputSchema's properties or required is malformed")
    if len(properties) > MAX_ARGS:
        raise ToolRefused(f"it takes {len(properties)} arguments; at most {MAX_ARGS} are offered")
    args: list[ToolArg] = []
    for prop, spec in properties.items():
        spec = spec if isinstance(spec, Mapping) else {}
        arg_name = _spelled(str(prop), _NOT_ARG, f"argument {str(prop)[:20]!r}")
        if any(a.name == arg_name for a in args):
            raise ToolRefused(f"two of its arguments are both spelled {arg_name}")
        kind, carried = _arg_type(spec)
        args.append(ToolArg(arg_name, str(prop), kind, prop not in required, spec, carried))
    return tuple(args)


def _choices(spec: Mapping[str, Any]) -> list[Any] | None:
    """The values an ``enum``, a ``const`` or an ``anyOf``/``oneOf`` of consts allows."""
    if isinstance(spec.get("enum"), list):
        return list(spec["enum"])
    if "const" in spec:
        return [spec["const"]]
    for key in ("anyOf", "oneOf"):
        options = spec.get(key)
        if (
            isinstance(options, list)
            and options
            and all(isinstance(o, Mapping) and "const" in o for o in options)
        ):
            return [o["const"] for o in options]
    return None


def _arg_type(spec: Mapping[str, Any]) -> tuple[str, str]:
    """(aotui type, JSON kind carried in a string or ``""``) of one property."""
    kind = spec.get("type")
    if isinstance(kind, list):
        named = [k for k in kind if k != "null"]
        kind = named[0] if len(named) == 1 else None
    if kind == "number" and spec.get("multipleOf") == 1:
        return "integer", ""
    if kind in SCALAR_TYPES:
        return str(kind), ""
    choices = _choices(spec)
    if kind is None and choices:
        if all(isinstance(c, str) for c in choices):
            return "string", ""
        if all(isinstance(c, bool) for c in choices):
            return "boolean", ""
        if all(isinstance(c, int) and not isinstance(c, bool) for c in choices):
            return "integer", ""
        if all(isinstance(c, int | float) and not isinstance(c, bool) for c in choices):
            return "number", ""
    return "string", kind if kind in _JSON_KINDS else "any"


def _hint(arg: ToolArg) -> str:
    """What the args grammar cannot say about ``arg``, in a few words."""
    spec, parts = arg.schema, []
    said = spec.get("description") or spec.get("title")
    if isinstance(said, str) and said.strip():
        parts.append(said.strip())
    choices = _choices(spec)
    if choices is not None:
        parts.append("one of " + ", ".join(json.dumps(c, ensure_ascii=False) for c in choices))
    for key, word in (("minimum", "≥"), ("maximum", "≤"), ("exclusiveMinimum", ">"),
                      ("exclusiveMaximum", "<")):  # fmt: skip
        if _is_number(spec.get(key)):
            parts.append(f"{word} {spec[key]}")
    for key, word in (("minLength", "at least"), ("maxLength", "at most")):
        if isinstance(spec.get(key), int):
            parts.append(f"{word} {_characters(spec[key])}")
    if arg.json:
        parts.append("JSON" + ("" if arg.json == "any" else f" {arg.json}"))
    return ", ".join(parts)


def _characters(count: int) -> str:
    return f"{count} character" + ("" if count == 1 else "s")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def check_input(tool: WebTool, args: Mapping[str, Any]) -> dict[str, Any]:
    """The tool's input from an operation's coerced ``args`` (keyed by schema property),
    checked against what its schema says; ``E_INVALID_CMD`` naming the argument."""
    known = {a.name: a for a in tool.args}
    for name in args:
        if name not in known:
            accepted = ", ".join(f"--{a}" for a in known) or "none"
            raise invalid_cmd(f"unknown argument --{name}; accepted: {accepted}", arg=name)
    out: dict[str, Any] = {}
    for arg in tool.args:
        if arg.name not in args:
            if not arg.optional:
                raise invalid_cmd(
                    f"missing required argument --{arg.name} ({arg.type})", arg=arg.name
                )
            continue
        value = args[arg.name]
        if arg.json:
            value = _json_value(arg, value)
        _check_value(arg, value)
        out[arg.prop] = value
    return out


def _json_value(arg: ToolArg, value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        decoded = json.loads(value)
    except ValueError:
        if arg.json == "any":
            return value  # an untyped property: plain text is a string
        raise invalid_cmd(
            f"--{arg.name} expects JSON text of {_a(arg.json)}, got {show_value(value)}",
            arg=arg.name,
            expected=arg.json,
        ) from None
    wanted = _JSON_KINDS.get(arg.json)
    if wanted is not None and not isinstance(decoded, wanted):
        raise invalid_cmd(
            f"--{arg.name} expects JSON text of {_a(arg.json)}, got {show_value(value)}",
            arg=arg.name,
            expected=arg.json,
        )
    return decoded


def _same(value: Any, choice: Any) -> bool:
    """``value`` is ``choice`` as JSON sees it (``1 == 1.0``; ``true`` is not ``1``)."""
    if _is_number(value) and _is_number(choice):
        return bool(value == choice)
    return type(value) is type(choice) and value == choice


def _a(kind: str) -> str:
    return "an object" if kind == "object" else f"an {kind}" if kind == "array" else kind


def _check_value(arg: ToolArg, value: Any) -> None:
    spec = arg.schema
    choices = _choices(spec)
    if choices is not None and not any(_same(value, c) for c in choices):
        listed = ", ".join(json.dumps(c, ensure_ascii=False) for c in choices)
        raise invalid_cmd(
            f"--{arg.name} must be one of {listed}, got {show_value(value)}",
            arg=arg.name,
            expected=arg.type,
        )
    if _is_number(value):
        for key, holds, word in _BOUNDS:
            bound = spec.get(key)
            if _is_number(bound) and not holds(value, bound):
                raise invalid_cmd(
                    f"--{arg.name} must be {word} {bound}, got {show_value(value)}",
                    arg=arg.name,
                    expected=arg.type,
                )
    if isinstance(value, str):
        low, high = spec.get("minLength"), spec.get("maxLength")
        if isinstance(low, int) and len(value) < low:
            raise invalid_cmd(
                f"--{arg.name} needs at least {_characters(low)}, got {len(value)}", arg=arg.name
            )
        if isinstance(high, int) and len(value) > high:
            raise invalid_cmd(
                f"--{arg.name} takes at most {_characters(high)}, got {len(value)}", arg=arg.name
            )
