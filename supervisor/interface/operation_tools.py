"""The per-operation tool mode of ``aotui mcp``: one MCP tool per operation the agent can see.

Derived from the structured snapshot (:mod:`~supervisor.interface.snapshot_json`), the way the
operation's parameters are declared once by its app: ``string``/``number``/``integer``/
``boolean`` become those JSON Schema types; a list item type (``message``) becomes a string
matching the refs of that type the view shows (``message_history[i]`` or an entity id). Tool
names are ``APP__VIEW__OPERATION`` (``app_0__view_3__reply_message``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from aotui.protocol.args import parse_arg_schema
from aotui.protocol.errors import AotuiError

__all__ = ["OperationTool", "operation_tools"]

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


def operation_tools(structured: dict[str, Any]) -> list[OperationTool]:
    """Every operation of every shown view of a structured snapshot, as a tool."""
    tools: list[OperationTool] = []
    for app in structured["apps"]:
        for view in app["views"]:
            refs: dict[str, dict[str, Any]] = view.get("refs", {})
            for op in view.get("operations", []):
                try:
                    schema = parse_arg_schema(op["args"], operation=op["id"])
                except AotuiError:
                    continue  # the desktop shows no such operation as callable either
                properties: dict[str, Any] = {}
                for param in schema.params:
                    properties[param.name] = _param_schema(param.type, refs)
                required = [p.name for p in schema.params if not p.optional]
                described = " — ".join(t for t in (op["label"], op["description"]) if t)
                tools.append(
                    OperationTool(
                        f"{app['app']}__{view['view']}__{op['id']}"[:64],
                        f"{described} ({app['name']}, {view['name']})"[:500],
                        {
                            "type": "object",
                            "properties": properties,
                            "required": required,
                            "additionalProperties": False,
                        },
                        app["app"],
                        view["view"],
                        op["id"],
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
