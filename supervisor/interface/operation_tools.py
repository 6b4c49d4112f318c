"""The per-operation tool mode of ``aotui mcp``: one MCP tool per operation the agent can see.

Derived from the structured snapshot (:mod:`~supervisor.interface.snapshot_json`), the way the
operation's parameters are declared once by its app: ``string``/``number``/``integer``/
``boolean`` become those JSON Schema types; a list item type (``message``) becomes a string
matching the refs of that type the view shows (``message_history[i]`` or an entity id).

Tool names are ``APP__VIEW__OPERATION`` (``app_0__view_3__reply_message``) when that is a name
every LLM API takes (``^[A-Za-z0-9_-]{1,64}$``). The operation id is the app's, so it may not be:
then each other character becomes ``_`` (after NFKC, so a fullwidth letter is its ASCII one), and
the name ends in ``_`` and 8 hex digits of the SHA-256 of the whole ``APP__VIEW__OPERATION``,
truncated before it to fit 64 (``app_0__view_0__mail_send_3f1a9c2e`` for ``mail.send``). A name
met twice in one list gets ``_2``, ``_3``, … in snapshot order. Every tool keeps its real app,
view and operation, so a call reaches the operation it was named for. An operation the command
language cannot name (``protocol.commands.ID_PATTERN``: a space, ``/``, a fullwidth letter)
could never run, so it gets no tool, as an operation whose arguments do not parse.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass
from typing import Any

from aotui.protocol.args import parse_arg_schema
from aotui.protocol.commands import ID_PATTERN
from aotui.protocol.errors import AotuiError

__all__ = ["TOOL_NAME", "OperationTool", "operation_tools", "tool_name"]

#: What a tool name must be for the LLM APIs that call tools (OpenAI's and Anthropic's rule).
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_OTHER = re.compile(r"[^A-Za-z0-9_-]")
_LONGEST = 64

#: What a confirm-marked operation's tool says it does first.
_ASKS = (
    ". Asks the user first: the call answers that it waits (C1); wait with confirmation: C1 "
    "for the outcome"
)

_JSON_TYPES = {"string": "string", "number": "number", "integer": "integer", "boolean": "boolean"}


@dataclass(frozen=True)
class OperationTool:
    """One visible operation as a tool."""

    name: str
    description: str
    input_schema: dict[str, Any]
    app: str
    view: str
    operation: str
    #: Marked ``confirm``: a call asks the user first (the tool's ``destructiveHint``).
    confirm: bool = False


def tool_name(app: str, view: str, operation: str) -> str:
    """``APP__VIEW__OPERATION``, or a valid name made of it with a hash of it (module doc)."""
    plain = f"{app}__{view}__{operation}"
    if TOOL_NAME.fullmatch(plain):
        return plain
    mapped = _OTHER.sub("_", unicodedata.normalize("NFKC", plain))
    digest = hashlib.sha256(plain.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{mapped[: _LONGEST - 9]}_{digest}"


def _distinct(name: str, used: set[str]) -> str:
    """``name``, or ``name_2``, ``name_3``, … (kept within 64): the first not in ``used``."""
    candidate, n = name, 1
    while candidate in used:
        n += 1
        suffix = f"_{n}"
        candidate = name[: _LONGEST - len(suffix)] + suffix
    return candidate


def operation_tools(structured: dict[str, Any]) -> list[OperationTool]:
    """Every operation of every shown view of a structured snapshot, as a tool; the names are
    valid tool names and distinct."""
    tools: list[OperationTool] = []
    used: set[str] = set()
    targets: set[tuple[str, str, str]] = set()
    for app in structured["apps"]:
        for view in app["views"]:
            refs: dict[str, dict[str, Any]] = view.get("refs", {})
            for op in view.get("operations", []):
                target = (app["app"], view["view"], op["id"])
                if not ID_PATTERN.fullmatch(op["id"]) or target in targets:
                    continue  # no command can name it; or the same operation listed again
                try:
                    schema = parse_arg_schema(op["args"], operation=op["id"])
                except AotuiError:
                    continue  # the desktop shows no such operation as callable either
                properties: dict[str, Any] = {}
                for param in schema.params:
                    properties[param.name] = _param_schema(param.type, refs)
                    optional = " (optional)" if param.optional else ""
                    properties[param.name].setdefault("description", f"a {param.type}{optional}")
                required = [p.name for p in schema.params if not p.optional]
                described = " — ".join(t for t in (op["label"], op["description"]) if t)
                name = _distinct(tool_name(*target), used)
                real = "" if name == "__".join(target) else f"; operation {op['id']}"
                confirm = bool(op.get("confirm"))
                asks = _ASKS if confirm else ""
                used.add(name)
                targets.add(target)
                tools.append(
                    OperationTool(
                        name,
                        f"{described} ({app['name']}, {view['name']}{real})"[:500] + asks,
                        {
                            "type": "object",
                            "properties": properties,
                            "required": required,
                            "additionalProperties": False,
                        },
                        *target,
                        confirm,
                    )
                )
    return tools


def _param_schema(kind: str, refs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    if kind in _JSON_TYPES:
        return {"type": _JSON_TYPES[kind]}
    lists = sorted(
        {ref.split("[", 1)[0] for ref, r in refs.items() if "[" in ref and r["type"] == kind}
    )
    entities = sorted(ref for ref, r in refs.items() if "[" not in ref and r["type"] == kind)
    names = [f"{re.escape(name)}\\[\\d+\\]" for name in lists] + [re.escape(e) for e in entities]
    schema: dict[str, Any] = {
        "type": "string",
        "description": f"a {kind} you read, e.g. {(lists or entities or ['list'])[0]}"
        + ("[0]" if lists else ""),
    }
    if names:
        schema["pattern"] = f"^({'|'.join(names)})$"
    return schema
