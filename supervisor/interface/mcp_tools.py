"""The fixed tools of ``aotui mcp``: names no model takes for a shell, every property described.

Each tool is a method declared in :mod:`protocol.api` with an ``mcp_tool`` name; its description
is the method's summary and its input schema the params MCP is offered, each with its
description.
``run_commands`` takes ``<context>`` text and ``call_operation`` the structured form (clients
treat tools named ``exec``/``execute`` as shell tools). Every property of every input schema has
a ``description``; the whole ``tools/list`` of a fresh default desktop stays within 700 tokens
(cl100k; ``bench/bench_tokens.py`` prints the figure).
"""

from __future__ import annotations

import mcp.types as types

from aotui.protocol import api
from aotui.protocol.api import Face, SignalReason

__all__ = ["IDLE_S", "INSTRUCTIONS", "TOOLS", "TOOL_METHODS", "WAIT_REASON_DEFAULT"]

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

#: The declared methods MCP offers, by tool name (protocol/api.py).
TOOL_METHODS: dict[str, api.Method] = {
    method.mcp_tool: method for method in api.METHODS.values() if Face.MCP in method.faces
}


def _tool(method: api.Method) -> types.Tool:
    return types.Tool(
        name=method.mcp_tool,
        description=method.summary,
        inputSchema=method.input_schema(Face.MCP),
        annotations=_ANNOTATIONS.get(method.mcp_tool),
    )


#: What a client may tell its user about a tool before calling it (MCP tool annotations).
_ANNOTATIONS = {
    "snapshot": types.ToolAnnotations(readOnlyHint=True),
    "wait": types.ToolAnnotations(readOnlyHint=True),
    "status": types.ToolAnnotations(readOnlyHint=True),
}

TOOLS = [_tool(method) for method in TOOL_METHODS.values()]
