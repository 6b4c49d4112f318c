"""Operation argument schemas and the coercion of raw argument values to them (CONTRACT §3, §5).

An operation declares ``args='{"message_to_be_replied": "message", "count?": "integer"}'``:
:func:`parse_arg_schema` reads that into an :class:`ArgSchema`. A schema comes from app code, so a
bad one is ``E_APP_ERROR``. :func:`coerce_args` turns the raw values a command carries (text, or
``True`` for a bare ``--flag``) into typed values; a value that does not fit is the agent's
mistake, ``E_INVALID_CMD``, naming the argument and the expected type.

An argument of a list item type (``message``) takes a ref: ``message_history[0]``, ``list[0]`` or an
entity id. The caller's :data:`RefResolver` turns it into the ``data-value`` recorded in the
snapshot the agent read, plus the item's stable key.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from aotui.protocol.errors import AotuiError, ErrorCode, invalid_cmd, show_value

__all__ = [
    "SCALAR_TYPES",
    "ArgSchema",
    "CoercedArgs",
    "Param",
    "RefResolver",
    "ResolvedRef",
    "coerce_args",
    "parse_arg_schema",
    "parse_ref",
]

#: The built-in argument types; any other identifier names a list item type.
SCALAR_TYPES = frozenset({"string", "number", "integer", "boolean"})

_NAME = re.compile(r"([A-Za-z_][A-Za-z0-9_-]*)(\??)")
_ITEM_TYPE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_INTEGER = re.compile(r"[+-]?[0-9]+")
_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_BOOLEANS = {"true": True, "yes": True, "on": True, "1": True,
             "false": False, "no": False, "off": False, "0": False}  # fmt: skip
# Python spellings app authors reach for; as item types they would silently never resolve.
_PYTHON_TYPES = {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}
_REF = re.compile(r"([A-Za-z0-9_.:-]+)(?:\[([^\]]*)\])?")
# Indexes longer than this are typos, and int() of thousands of digits is refused anyway.
_MAX_INDEX_DIGITS = 9


@dataclass(frozen=True, slots=True)
class Param:
    """One declared argument of an operation."""

    #: The name, without the ``?`` that marks it optional.
    name: str
    #: ``string``, ``number``, ``integer``, ``boolean``, or a list item type like ``message``.
    type: str
    #: Whether the agent may leave it out.
    optional: bool = False

    @property
    def usage(self) -> str:
        """How the parameter is written, e.g. ``--content <string>`` or ``[--count <integer>]``."""
        text = f"--{self.name} <{self.type}>"
        return f"[{text}]" if self.optional else text


@dataclass(frozen=True, slots=True)
class ArgSchema:
    """The declared arguments of one operation, in declaration order."""

    #: The parameters, in the order the app declared them.
    params: tuple[Param, ...] = ()
    _by_name: dict[str, Param] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {p.name: p for p in self.params})

    def get(self, name: str) -> Param | None:
        """The parameter called ``name``, if declared."""
        return self._by_name.get(name)

    @property
    def usage(self) -> str:
        """All parameters as they are written: ``--content <string> [--count <integer>]``."""
        return " ".join(p.usage for p in self.params) or "(no arguments)"

    def to_dict(self) -> dict[str, str]:
        """The schema as the app declared it: ``{name: type}``, optional names ending in ``?``."""
        return {p.name + ("?" if p.optional else ""): p.type for p in self.params}


@dataclass(frozen=True, slots=True)
class ResolvedRef:
    """What a ref in an argument stands for in the snapshot the agent read."""

    #: The recorded ``data-value`` of the item or entity.
    value: Any
    #: The app's stable key for it (``key`` attribute, or the entity id).
    key: Any


#: ``resolve(ref, expected_type)``: what a ref (``message_history[0]``, an entity id) stands for.
#: It raises ``AotuiError`` (``E_NOT_FOUND``, ``E_STALE_STATE``, …), which :func:`coerce_args`
#: passes through unchanged. A Callable rather than a Protocol, so any plain function fits.
RefResolver: TypeAlias = Callable[[str, str], ResolvedRef]


@dataclass(frozen=True, slots=True)
class CoercedArgs:
    """Arguments ready for a handler: typed values, and the stable keys of resolved refs."""

    #: Name → typed value (refs replaced by their recorded value when a resolver was given).
    args: dict[str, Any]
    #: Name → stable key, for each argument that was a resolved ref.
    stable_keys: dict[str, Any]


def _schema_error(message: str, operation: str | None, **data: Any) -> AotuiError:
    where = f"operation {operation!r}: " if operation else ""
    return AotuiError(ErrorCode.E_APP_ERROR, f"{where}{message}", data)


def parse_arg_schema(spec: str | Mapping[str, Any], *, operation: str | None = None) -> ArgSchema:
    """Read an operation's ``args`` declaration; a malformed one is ``E_APP_ERROR``."""
    if isinstance(spec, str):
        try:
            decoded = json.loads(spec, object_pairs_hook=_reject_duplicates)
        except _DuplicateName as dup:
            raise _schema_error(
                f"args declares {show_value(dup.name)} twice", operation, arg=dup.name
            ) from None
        except (ValueError, RecursionError) as exc:
            raise _schema_error(
                f'args is not valid JSON ({exc}); write e.g. {{"content": "string"}}', operation
            ) from None
        spec = decoded
    if not isinstance(spec, Mapping):
        raise _schema_error(
            f"args must be a JSON object {{name: type}}, got {type(spec).__name__}", operation
        )
    params: list[Param] = []
    seen: set[str] = set()
    allowed = "string, number, integer, boolean or a list item type like message"
    for raw_name, type_name in spec.items():
        name = _NAME.fullmatch(raw_name) if isinstance(raw_name, str) else None
        if name is None:
            raise _schema_error(
                f"args name {show_value(raw_name)} is not a name like content or count? "
                "(letters, digits, _ and -, not starting with a digit; ? marks it optional)",
                operation,
                arg=raw_name[:80] if isinstance(raw_name, str) else show_value(raw_name),
            )
        python_type = _PYTHON_TYPES.get(type_name) if isinstance(type_name, str) else None
        if not isinstance(type_name, str) or not _ITEM_TYPE.fullmatch(type_name) or python_type:
            hint = f" (did you mean {python_type}?)" if python_type else ""
            raise _schema_error(
                f"args {show_value(raw_name)} has type {show_value(type_name)}{hint}; "
                f"allowed: {allowed}",
                operation,
                arg=raw_name,
            )
        if name.group(1) in seen:
            raise _schema_error(
                f"args declares {show_value(name.group(1))} twice", operation, arg=raw_name
            )
        seen.add(name.group(1))
        params.append(Param(name.group(1), type_name, bool(name.group(2))))
    return ArgSchema(tuple(params))


class _DuplicateName(Exception):
    def __init__(self, name: str) -> None:
        self.name = name


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in pairs:
        if name in out:
            raise _DuplicateName(name)
        out[name] = value
    return out


def coerce_args(
    schema: ArgSchema,
    raw: Mapping[str, str | bool],
    resolve_ref: RefResolver | None = None,
) -> CoercedArgs:
    """Check ``raw`` against ``schema`` and convert each value to its declared type."""
    for name in raw:
        if schema.get(name) is None:
            accepted = ", ".join(f"--{p.name}" for p in schema.params) or "none"
            raise invalid_cmd(
                f"unknown argument --{name}; accepted: {accepted} (usage: {schema.usage})",
                arg=name,
                accepted=[p.name for p in schema.params],
            )
    missing = [p for p in schema.params if not p.optional and p.name not in raw]
    if missing:
        listed = ", ".join(f"--{p.name} ({p.type})" for p in missing)
        plural = "s" if len(missing) > 1 else ""
        raise invalid_cmd(
            f"missing required argument{plural} {listed} (usage: {schema.usage})",
            arg=missing[0].name,
            expected=missing[0].type,
            missing=[p.name for p in missing],
        )
    args: dict[str, Any] = {}
    stable_keys: dict[str, Any] = {}
    for param in schema.params:
        if param.name not in raw:
            continue
        value = raw[param.name]
        if param.type in SCALAR_TYPES:
            args[param.name] = _coerce_scalar(param, value)
        elif resolve_ref is None:
            args[param.name] = _check_ref(param, value)
        else:
            resolved = resolve_ref(_check_ref(param, value), param.type)
            args[param.name] = resolved.value
            stable_keys[param.name] = resolved.key
    return CoercedArgs(args, stable_keys)


def _mismatch(param: Param, value: str | bool, expected: str) -> AotuiError:
    """``--count expects an integer, got "abc"``; a bare ``--flag`` needs a value."""
    if isinstance(value, bool):
        message = f"--{param.name} needs a value ({param.type})"
    else:
        got = json.dumps(value, ensure_ascii=False)
        got = got if len(got) <= 80 else got[:77] + '..."'
        message = f"--{param.name} expects {expected}, got {got}"
    return invalid_cmd(message, arg=param.name, expected=param.type)


def _coerce_scalar(param: Param, value: str | bool) -> Any:
    kind = param.type
    if kind == "string":
        if isinstance(value, str):
            return value
        raise _mismatch(param, value, "a string")
    if kind == "boolean":
        return _coerce_boolean(param, value)
    text = value.strip() if isinstance(value, str) else ""
    if kind == "integer":
        integer = _as_integer(text)
        if integer is None:
            raise _mismatch(param, value, "an integer")
        return integer
    return _coerce_number(param, value, text)


def _coerce_boolean(param: Param, value: str | bool) -> bool:
    """A boolean argument: a bare flag, or one of the accepted words."""
    if isinstance(value, bool):
        return value
    flag = _BOOLEANS.get(value.strip().lower())
    if flag is None:
        raise _mismatch(param, value, "a boolean (true/false, yes/no, on/off, 1/0)")
    return flag


def _as_integer(text: str) -> int | None:
    """``text`` as an int, or None when it is not one (or is past the interpreter's digit limit)."""
    if not _INTEGER.fullmatch(text):
        return None
    try:
        return int(text)
    except ValueError:  # past the interpreter's digit limit
        return None


def _coerce_number(param: Param, value: str | bool, text: str) -> int | float:
    """A number argument: an integer stays an int, a decimal must be finite."""
    if _INTEGER.fullmatch(text):
        integer = _as_integer(text)
        if integer is not None:
            return integer
    elif _NUMBER.fullmatch(text):
        number = float(text)
        if math.isfinite(number):
            return number
    raise _mismatch(param, value, "a number")


def _check_ref(param: Param, value: str | bool) -> str:
    """The ref text of an item-type argument, checked for shape."""
    expected = f"a {param.type} ref like list_id[0] or an entity id"
    if not isinstance(value, str):
        raise _mismatch(param, value, expected)
    try:
        parse_ref(value)
    except AotuiError as exc:
        raise invalid_cmd(
            f"--{param.name} expects {expected}: {exc.message}",
            arg=param.name,
            expected=param.type,
        ) from None
    return value.strip()


def parse_ref(text: str) -> tuple[str, int | None]:
    """Split ``message_history[3]`` into ``("message_history", 3)``; an entity id has no index."""
    m = _REF.fullmatch(text.strip()) if isinstance(text, str) else None
    if m is None:
        raise invalid_cmd(
            f"{show_value(text)} is not a ref; write list_id[0] (0-based) or an entity id",
            ref=text[:80] if isinstance(text, str) else show_value(text),
        )
    name, index = m.group(1), m.group(2)
    if index is None:
        return name, None
    index = index.strip()
    if not index.isascii() or not index.isdigit():
        raise invalid_cmd(
            f"{show_value(text)} has index [{index:.20}]; an index is a whole number from 0, "
            f"like {name}[0]",
            ref=text[:80],
        )
    if len(index) > _MAX_INDEX_DIGITS:
        raise invalid_cmd(f"{show_value(text)} has an index too large to exist", ref=text[:80])
    return name, int(index)
