"""The fixed tools of ``aotui mcp``: names no model takes for a shell, every property described.

``run_commands`` takes ``<context>`` text and ``call_operation`` the structured form (clients
treat tools named ``exec``/``execute`` as shell tools). Every property of every input schema has
a ``description``; the whole ``tools/list`` of a fresh default desktop stays within 700 tokens
(cl100k; ``bench/bench_tokens.py`` prints the figure).
"""

from __future__ import annotations

from typing import Any

import mcp.types as types

from aotui.protocol.messages import SignalReason

__all__ = ["IDLE_S", "INSTRUCTIONS", "TOOLS", "WAIT_REASON_DEFAULT"]

#: Seconds an MCP session keeps the input lease after its last command (server/lease.py).
IDLE_S = 5.0

#: What ``wait`` waits for when given no condition.
WAIT_REASON_DEFAULT = SignalReason.DOM_MUTATION.value

#: The server's ``instructions``, before the System Instructions.
INSTRUCTIONS = (
    "An aotui desktop: apps you read as Markdown (tool snapshot) and drive with commands "
    "(tools run_commands and call_operation). Read first, then act; refs like notes[1] mean "
    "what you read."
)

_APP = {"type": "string", "description": "app id (app_0) or manifest id"}
_VIEW = {"type": "string", "description": "view id (view_0) of that app"}


def _tool(name: str, description: str, properties: dict[str, Any], **extra: Any) -> types.Tool:
    schema = {"type": "object", "properties": properties, "additionalProperties": False}
    return types.Tool(name=name, description=description, inputSchema=schema | extra)


TOOLS = [
    _tool(
        "snapshot",
        "Read the desktop as Markdown: what you act on.",
        {
            "app": _APP | {"description": "only this app's block (app_0)"},
            "view": _VIEW | {"description": "only this view of app"},
            "since": {"type": "string", "description": '"last": only what changed since'},
            "max_tokens": {
                "type": "integer",
                "minimum": 200,
                "description": "shorten to this (least recently touched first)",
            },
            "include_instructions": {
                "type": "boolean",
                "description": "add the System Instructions (how commands work)",
            },
        },
    ),
    _tool(
        "run_commands",
        "Run desktop commands (not a shell) written as <context> blocks, in order; the first "
        "failure stops the rest.",
        {
            "text": {
                "type": "string",
                "description": '<context app_id="app_0" view_id="view_0">execute add_note '
                "--title T</context>",
            }
        },
        required=["text"],
    ),
    _tool(
        "call_operation",
        "Run one operation of a view (not a shell).",
        {
            "app": _APP,
            "view": _VIEW,
            "operation": {"type": "string", "description": "operation id shown in the view"},
            "args": {
                "type": "object",
                "description": "its parameters by name; a list item is its ref as a string: "
                '"notes[1]"',
            },
        },
        required=["app", "view", "operation"],
    ),
    _tool(
        "wait",
        "Block until one condition holds (default: a dom_mutation signal).",
        {
            "reason": {
                "type": "string",
                "enum": [reason.value for reason in SignalReason],
                "default": WAIT_REASON_DEFAULT,
                "description": "a change of this kind",
            },
            "text": {"type": "string", "description": "this text appears in app's views"},
            "app": _APP | {"description": "the app text looks in"},
            "view": _VIEW | {"description": "the view text looks in"},
            "gone": {"type": "boolean", "description": "text disappears instead"},
            "quiet_ms": {"type": "integer", "minimum": 0, "description": "no change for this"},
            "confirmation": {
                "type": "string",
                "description": "C1: the outcome of an operation waiting for the user",
            },
            "timeout_ms": {
                "type": "integer",
                "minimum": 1,
                "maximum": 600000,
                "default": 10000,
                "description": "give up after (E_TIMEOUT)",
            },
        },
    ),
    _tool(
        "status",
        "The apps (state, pid, memory, restarts) and confirmations waiting for the user.",
        {},
    ),
]
