"""The command an agent or a program gives the desktop, whatever form it arrived in (CONTRACT §5).

:mod:`protocol.grammar` builds :class:`Command` values from the text an agent types; programs send
the structured form, read by :meth:`Command.from_structured`. Both end up as the same value.

The structured form of CONTRACT §5 covers ``execute``::

    {"app": "app_0", "view": "view_3", "operation": "reply_message",
     "args": {"content": "Hi"}, "snapshot_id": "T17"}

Extension for the other actions, which the contract does not spell out: an ``action`` key naming the
:class:`Action`, the app, and for view actions the view; ``snapshot_id`` only when set::

    {"action": "open_application", "app": "app_1"}
    {"action": "mount_view", "app": "app_0", "view": "view_3"}

``"action": "execute"`` may also be given explicitly on the execute form.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from aotui.protocol.errors import invalid_cmd, show_value

__all__ = ["APP_ACTIONS", "ID_PATTERN", "VIEW_ACTIONS", "Action", "ArgValues", "Command"]

#: What an app, view, operation or snapshot id may look like; ids are not validated further here.
ID_PATTERN = re.compile(r"[A-Za-z0-9_.:-]+")
#: What an argument name may look like (``?`` of an optional arg is not part of the name).
_ARG_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


class Action(enum.StrEnum):
    """What a command does; the value is the action's name in the structured form."""

    #: Start an installed app (or show it if it runs collapsed).
    OPEN_APPLICATION = "open_application"
    #: Stop an app's worker.
    CLOSE_APPLICATION = "close_application"
    #: Keep an app running but drop its block from the snapshot.
    COLLAPSE_APPLICATION = "collapse_application"
    #: Bring a collapsed app's block back into the snapshot.
    SHOW_APPLICATION = "show_application"
    #: Mount a child view of an app.
    MOUNT_VIEW = "mount_view"
    #: Dismount a mounted view (and its subtree).
    DISMOUNT_VIEW = "dismount_view"
    #: Keep a view mounted but leave it out of the snapshot.
    HIDE_VIEW = "hide_view"
    #: Put a hidden view back into the snapshot.
    SHOW_VIEW = "show_view"
    #: Run an operation of a view.
    EXECUTE = "execute"


#: Actions whose target is an app.
APP_ACTIONS = frozenset(
    {
        Action.OPEN_APPLICATION,
        Action.CLOSE_APPLICATION,
        Action.COLLAPSE_APPLICATION,
        Action.SHOW_APPLICATION,
    }
)
#: Actions whose target is a view of an app.
VIEW_ACTIONS = frozenset(
    {Action.MOUNT_VIEW, Action.DISMOUNT_VIEW, Action.HIDE_VIEW, Action.SHOW_VIEW}
)


class ArgValues(Mapping[str, "str | bool"]):
    """A read-only, hashable, picklable mapping of raw argument values in the order given."""

    __slots__ = ("_items",)

    _items: dict[str, str | bool]

    def __init__(self, items: Mapping[str, str | bool] | None = None) -> None:
        # A private copy: nobody else holds a reference that could mutate it.
        object.__setattr__(self, "_items", dict(items) if items else {})

    def __getitem__(self, key: str) -> str | bool:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(frozenset(self._items.items()))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ArgValues):
            return self._items == other._items
        if isinstance(other, Mapping):
            return self._items == dict(other.items())
        return NotImplemented

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("ArgValues is read-only")

    def __reduce__(self) -> tuple[type[ArgValues], tuple[dict[str, str | bool]]]:
        return (ArgValues, (self._items,))

    def __repr__(self) -> str:
        return f"ArgValues({self._items!r})"


@dataclass(frozen=True, slots=True)
class Command:
    """One command: an action on an app, a view or an operation, with raw argument values."""

    #: What to do.
    action: Action
    #: The app id for app actions, the view id for view actions, the operation id for ``execute``.
    target: str
    #: The app (``app_N`` or a manifest id); equals ``target`` for app actions.
    app_id: str | None
    #: The view; equals ``target`` for view actions, ``None`` for app actions.
    view_id: str | None
    #: Raw argument values (``--flag`` is ``True``), in the order given; coerced later.
    args: Mapping[str, str | bool]
    #: The snapshot the command was written against; the client attaches it.
    snapshot_id: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.args, ArgValues):
            object.__setattr__(self, "args", ArgValues(self.args))

    def with_snapshot(self, snapshot_id: str | None) -> Command:
        """A copy of this command bound to ``snapshot_id``."""
        return replace(self, snapshot_id=snapshot_id)

    def to_structured(self) -> dict[str, Any]:
        """The structured form of CONTRACT §5 (plus ``action`` for non-execute commands)."""
        if self.action is Action.EXECUTE:
            return {
                "app": self.app_id,
                "view": self.view_id,
                "operation": self.target,
                "args": dict(self.args),
                "snapshot_id": self.snapshot_id,
            }
        out: dict[str, Any] = {"action": self.action.value, "app": self.app_id}
        if self.action in VIEW_ACTIONS:
            out["view"] = self.view_id
        if self.snapshot_id is not None:
            out["snapshot_id"] = self.snapshot_id
        if self.args.get("fresh") is True:
            out["fresh"] = True
        return out

    @classmethod
    def from_structured(cls, obj: Any) -> Command:
        """Read and validate the structured form; anything malformed is ``E_INVALID_CMD``."""
        if not isinstance(obj, Mapping):
            raise invalid_cmd(
                f"a structured command must be an object, got {type(obj).__name__}",
                field=None,
            )
        action = _read_action(obj)
        allowed = _ALLOWED_KEYS[action]
        for key in obj:
            if key not in allowed:
                raise invalid_cmd(
                    f"unknown field {show_value(key)} in a structured {action.value} command; "
                    f"allowed: {', '.join(sorted(allowed))}",
                    field=key[:80] if isinstance(key, str) else show_value(key),
                )
        app_id = _read_id(obj, "app")
        snapshot_id = _read_optional_id(obj, "snapshot_id")
        if action is Action.EXECUTE:
            return cls(
                action,
                _read_id(obj, "operation"),
                app_id,
                _read_id(obj, "view"),
                _read_args(obj.get("args", {})),
                snapshot_id,
            )
        if action in VIEW_ACTIONS:
            view_id = _read_id(obj, "view")
            return cls(action, view_id, app_id, view_id, ArgValues(), snapshot_id)
        fresh = obj.get("fresh", False)
        if not isinstance(fresh, bool):
            message = f"field 'fresh' must be true or false, not {show_value(fresh)}"
            raise invalid_cmd(message, field="fresh")
        values = ArgValues({"fresh": True} if fresh else {})
        return cls(action, app_id, app_id, None, values, snapshot_id)


_ALLOWED_KEYS: dict[Action, frozenset[str]] = {
    action: frozenset(
        {"action", "app", "snapshot_id"}
        | ({"view"} if action in VIEW_ACTIONS else set())
        | ({"view", "operation", "args"} if action is Action.EXECUTE else set())
        | ({"fresh"} if action is Action.OPEN_APPLICATION else set())
    )
    for action in Action
}


def _read_action(obj: Mapping[Any, Any]) -> Action:
    """The action of a structured command; without ``action`` it is an ``execute``."""
    if "action" not in obj:
        if "operation" in obj:
            return Action.EXECUTE
        raise invalid_cmd(
            "a structured command needs 'operation' (to execute) or 'action' "
            f"(one of {', '.join(a.value for a in Action)})",
            field="action",
        )
    value = obj["action"]
    if isinstance(value, str):
        try:
            return Action(value)
        except ValueError:
            pass
    raise invalid_cmd(
        f"field 'action' must be one of {', '.join(a.value for a in Action)}, "
        f"got {show_value(value)}",
        field="action",
    )


def _read_optional_id(obj: Mapping[Any, Any], key: str) -> str | None:
    """An optional id field of a structured command; absent or ``null`` is ``None``."""
    return None if obj.get(key) is None else _read_id(obj, key)


def _read_id(obj: Mapping[Any, Any], key: str) -> str:
    """A required id field of a structured command."""
    value = obj.get(key)
    if value is None:
        raise invalid_cmd(f"missing field {key!r} in a structured command", field=key)
    if not isinstance(value, str) or not ID_PATTERN.fullmatch(value):
        raise invalid_cmd(
            f"field {key!r} must be a non-empty id of letters, digits and _ . : -, "
            f"got {show_value(value)}",
            field=key,
        )
    return value


def _read_args(value: Any) -> ArgValues:
    """The ``args`` object: names to raw values; numbers become their text, to be coerced later."""
    if not isinstance(value, Mapping):
        raise invalid_cmd(
            f"field 'args' must be an object, got {type(value).__name__}", field="args"
        )
    out: dict[str, str | bool] = {}
    for name, raw in value.items():
        if not isinstance(name, str) or not _ARG_NAME.fullmatch(name):
            raise invalid_cmd(
                f"argument name {show_value(name)} in 'args' is not a name like message_id",
                field="args",
                arg=name[:80] if isinstance(name, str) else show_value(name),
            )
        if isinstance(raw, str | bool):
            out[name] = raw
        elif isinstance(raw, int | float):
            # Programs naturally send numbers; they are coerced from text like typed ones.
            try:
                out[name] = repr(raw)
            except ValueError:  # an int past the interpreter's digit limit
                raise invalid_cmd(f"args.{name} is too large", field="args", arg=name) from None
        else:
            raise invalid_cmd(
                f"args.{name} must be a string, number or boolean, got {type(raw).__name__}",
                field="args",
                arg=name,
            )
    return ArgValues(out)
