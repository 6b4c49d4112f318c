"""Operations declared once, by a typed method: id, description and parameters come from it.

::

    @operation
    def edit_note(self, note: Ref[Literal["note"]], text: str, title: str | None = None) -> ...:
        \"\"\"Replace a note's text, and its title if given.\"\"\"

declares the operation ``edit_note`` with the description "Replace a note's text, and its title
if given" (the docstring's first line, without its final period), the label "Edit Note" and the
``args`` schema ``{"note": "note", "text": "string", "title?": "string"}``. The schema is checked
by :func:`aotui.protocol.args.parse_arg_schema` — the validator the supervisor coerces every
execute against — so a declaration either works end to end or fails when the view first renders.

Parameter types: ``str``, ``int``, ``float``, ``bool`` (string, integer, number, boolean), and
``Ref[Literal["type"]]`` for a list item or entity of that type (``Literal`` because a bare
``Ref["note"]`` would read to a type checker as a class named ``note``). A parameter with a default
is optional. The handler receives typed values; a :class:`Ref` carries the item's stable key and
the ``data-value`` the agent saw.
"""

from __future__ import annotations

import inspect
import json
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar, overload

from aotui.protocol.args import ArgSchema, parse_arg_schema
from aotui.protocol.errors import AotuiError, invalid_cmd

__all__ = ["OperationDef", "Ref", "declared_operations", "marked_handlers", "operation"]

ItemT = TypeVar("ItemT")
HandlerT = TypeVar("HandlerT", bound=Callable[..., Any])

_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}
_MARK = "__aotui_operation__"


@dataclass(frozen=True, slots=True)
class Ref(Generic[ItemT]):
    """An argument the agent gave as a ref (``notes[0]``, an entity id): what it named."""

    #: The item's stable ``key`` (an entity's id), as the agent saw it.
    key: str
    #: The item's ``data-value`` as recorded in the snapshot the agent read (``None`` if absent).
    value: Any = None


@dataclass(frozen=True, slots=True)
class _Declared:
    """What the decorator records on the method; the signature is read on first use."""

    label: str | None
    #: The desktop asks the user before running it (``@operation(confirm=True)``).
    confirm: bool = False


@dataclass(frozen=True, slots=True)
class _Param:
    name: str
    #: ``string``, ``integer``, ``number``, ``boolean`` or a list item type.
    kind: str
    is_ref: bool
    default: Any
    optional: bool


@dataclass(frozen=True, slots=True)
class OperationDef:
    """One operation of a view class, derived from its handler method."""

    op_id: str
    #: The button's text, e.g. ``Edit Note``.
    label: str
    #: The docstring's first line, without its final period.
    description: str
    schema: ArgSchema
    #: The method's name on the view class.
    attr: str
    params: tuple[_Param, ...]
    #: The desktop asks the user before running it.
    confirm: bool = False

    @property
    def args_json(self) -> str:
        """The ``args`` attribute's value; empty when the operation takes no arguments."""
        return json.dumps(self.schema.to_dict()) if self.params else ""

    def arguments(self, args: Mapping[str, Any], stable_keys: Mapping[str, Any]) -> dict[str, Any]:
        """The handler's keyword arguments from a call's (already coerced) args and keys."""
        kwargs: dict[str, Any] = {}
        for param in self.params:
            if param.name not in args and param.name not in stable_keys:
                if not param.optional:
                    raise invalid_cmd(
                        f"missing required argument --{param.name} ({param.kind}) of "
                        f"{self.op_id} (usage: {self.schema.usage})",
                        arg=param.name,
                    )
                kwargs[param.name] = param.default
            elif param.is_ref:
                key = stable_keys.get(param.name)
                if key is None:
                    raise invalid_cmd(
                        f"--{param.name} must reference a {param.kind}: a ref like list_id[0] "
                        "or an entity id",
                        arg=param.name,
                        expected=param.kind,
                    )
                kwargs[param.name] = Ref(str(key), args.get(param.name))
            else:
                kwargs[param.name] = _typed(param, args[param.name])
        return kwargs


def _typed(param: _Param, value: Any) -> Any:
    """A value the supervisor coerced, checked once more (an event or a test may call directly)."""
    kind = param.kind
    if kind == "number" and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    expected = {"string": str, "integer": int, "boolean": bool}[kind]
    if isinstance(value, expected) and (kind == "boolean" or not isinstance(value, bool)):
        return value
    raise invalid_cmd(
        f"--{param.name} expects {kind}, got {type(value).__name__}",
        arg=param.name,
        expected=kind,
    )


@overload
def operation(handler: HandlerT, /) -> HandlerT: ...
@overload
def operation(
    *, label: str | None = None, confirm: bool = False
) -> Callable[[HandlerT], HandlerT]: ...


def operation(target: Any = None, /, *, label: str | None = None, confirm: bool = False) -> Any:
    """Declare a :class:`~aotui.sandbox.sdk.View` method (or an app's event) as an operation.

    ``@operation`` alone: the id is the method's name, the label its words capitalised
    (``add_note`` → ``Add Note``); ``@operation(label="Add")`` names the label.
    ``confirm=True``: the desktop asks the user before running it (its button carries
    ``confirm``; a view that writes its markup by hand writes that too).
    """
    if callable(target):
        setattr(target, _MARK, _Declared(label))
        return target
    if target is not None:
        raise TypeError(
            f"@operation({target!r}) is the first SDK's form, which is gone: the method's name is "
            f"the operation's id, and its typed parameters are the arguments (docs/apps.md §3)"
        )

    def mark(handler: HandlerT) -> HandlerT:
        setattr(handler, _MARK, _Declared(label, confirm=confirm))
        return handler

    return mark


def marked_handlers(cls: type) -> dict[str, str]:
    """``op_id → method name`` for every operation of ``cls`` and its bases (cheap: no types)."""
    found: dict[str, str] = {}
    for base in reversed(cls.__mro__):
        for attr, value in vars(base).items():
            declared = getattr(value, _MARK, None)
            if isinstance(declared, _Declared):
                found[attr] = attr
    return found


def declared_operations(cls: type) -> dict[str, OperationDef]:
    """Every operation of ``cls``, in declaration order, read from the typed signatures once."""
    cached = cls.__dict__.get("_aotui_operations")
    if cached is not None:
        return typing.cast(dict[str, OperationDef], cached)
    found: dict[str, OperationDef] = {}
    for op_id, attr in marked_handlers(cls).items():
        found[op_id] = _define(cls, op_id, attr)
    # Read after the whole module loaded: annotations may name classes defined below the view.
    type.__setattr__(cls, "_aotui_operations", found)
    return found


def _define(cls: type, op_id: str, attr: str) -> OperationDef:
    handler = getattr(cls, attr)
    declared: _Declared = getattr(handler, _MARK)
    label = declared.label or " ".join(word.capitalize() for word in op_id.split("_") if word)
    doc = (inspect.getdoc(handler) or "").strip().split("\n\n")[0]
    description = " ".join(doc.split()).removesuffix(".")
    where = f"{cls.__name__}.{attr}"
    try:
        hints = typing.get_type_hints(handler)
    except Exception as exc:  # noqa: BLE001 - an annotation naming something that does not exist
        raise TypeError(f"{where}: cannot read its parameter types: {exc}") from None
    params: list[_Param] = []
    for name, parameter in list(inspect.signature(handler).parameters.items())[1:]:
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise TypeError(f"{where}: *{name} cannot be an operation's parameter; name each one")
        optional = parameter.default is not parameter.empty
        default = parameter.default if optional else None
        params.append(_param(where, name, hints.get(name, parameter.empty), optional, default))
    spec = {p.name + ("?" if p.optional else ""): p.kind for p in params}
    try:
        schema = parse_arg_schema(spec, operation=op_id)
    except AotuiError as exc:
        raise TypeError(f"{where}: {exc.message}") from None
    return OperationDef(
        op_id, label, description, schema, attr, tuple(params), confirm=declared.confirm
    )


def _param(where: str, name: str, hint: Any, optional: bool, default: Any) -> _Param:
    allowed = 'str, int, float, bool or Ref[Literal["item_type"]], optionally "| None = default"'
    inner = hint
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        options = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        if len(options) == 1 and len(typing.get_args(hint)) == 2:
            if not optional:
                raise TypeError(f"{where}: {name} may be None, so give it a default (= None)")
            inner = options[0]
    if inner in _SCALARS:
        return _Param(name, _SCALARS[inner], False, default, optional)
    if typing.get_origin(inner) is Ref:
        (item,) = typing.get_args(inner)
        if typing.get_origin(item) is Literal and len(typing.get_args(item)) == 1:
            (item_type,) = typing.get_args(item)
            if isinstance(item_type, str):
                return _Param(name, item_type, True, default, optional)
    shown = "no annotation" if hint is inspect.Parameter.empty else repr(hint)
    raise TypeError(f"{where}: parameter {name} has {shown}; use {allowed}")
