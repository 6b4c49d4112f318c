"""``aotui mcp``: one desktop as an MCP server (stdio; streamable HTTP in :mod:`.mcp_http`).

Built on the official ``mcp`` SDK's low-level server. Tools ``snapshot``, ``exec``, ``execute``,
``wait`` and ``status``; resources ``aotui://NAME/snapshot`` and ``aotui://NAME/status``, with a
resource-updated notification to subscribers on every desktop signal. Each MCP session has its
own desktop client: its own snapshot id (refs resolve against what *it* read) and, from its first
``exec``/``execute``, the input lease. Errors come back as tool results with ``isError`` and
``{code, message, recoverable}``, so the model can recover.

Imported only by the ``mcp`` command: the SDK costs start-up time no other command should pay.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio
import mcp.types as types
import zmq
import zmq.asyncio
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.session import ServerSession
from pydantic import AnyUrl

from aotui.protocol import codec
from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.messages import Signal
from aotui.supervisor.desktop.instructions import SYSTEM_INSTRUCTIONS
from aotui.supervisor.interface.client import Client
from aotui.supervisor.interface.operation_tools import OperationTool, operation_tools

__all__ = ["DesktopMcp", "running", "serve_stdio"]

_OBJECT = "object"
TOOLS = [
    types.Tool(
        name="snapshot",
        description=(
            "Read the desktop as Markdown (what you act on). Optionally only one app's block "
            "(app: app_N) or one of its views (view: view_N); since: \"last\" for only what "
            "changed since your previous read (unchanged blocks left out, gone ids listed); "
            "max_tokens to keep it short (what you touched longest ago is shortened, marked). "
            "Refs like notes[1] in a later exec/execute mean what your reads showed."
        ),
        inputSchema={
            "type": _OBJECT,
            "properties": {
                "app": {"type": "string"},
                "view": {"type": "string"},
                "since": {"type": "string"},
                "max_tokens": {"type": "integer", "minimum": 200},
            },
            "additionalProperties": False,
        },
    ),
    types.Tool(
        name="exec",
        description=(
            "Run commands written as <context> blocks, e.g. "
            '<context app_id="app_2" view_id="view_0">execute add_note --title T --text hi'
            "</context>. Several run in order; the first failure stops the rest."
        ),
        inputSchema={
            "type": _OBJECT,
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
            "additionalProperties": False,
        },
    ),
    types.Tool(
        name="execute",
        description="Run one operation in its structured form (app, view, operation, args).",
        inputSchema={
            "type": _OBJECT,
            "properties": {
                "app": {"type": "string"},
                "view": {"type": "string"},
                "operation": {"type": "string"},
                "args": {"type": "object"},
            },
            "required": ["app", "view", "operation"],
            "additionalProperties": False,
        },
    ),
    types.Tool(
        name="wait",
        description=(
            "Block until one condition holds: a signal reason, a text appearing (or with "
            "gone: true, disappearing) in an app's views, or quiet_ms without a change; or "
            "confirmation: C1 for the outcome of an operation that waits for the user (its "
            "result, or its error: E_PERMISSION when the user refused)."
        ),
        inputSchema={
            "type": _OBJECT,
            "properties": {
                "reason": {"type": "string"},
                "text": {"type": "string"},
                "app": {"type": "string"},
                "view": {"type": "string"},
                "gone": {"type": "boolean"},
                "quiet_ms": {"type": "integer", "minimum": 0},
                "confirmation": {"type": "string"},
                "timeout_ms": {"type": "integer", "minimum": 1, "maximum": 600000},
            },
            "additionalProperties": False,
        },
    ),
    types.Tool(
        name="status",
        description=(
            "The desktop's apps: state, pid, memory, CPU, restarts, last exit; and the "
            "operations waiting for the user's confirmation (confirmations)."
        ),
        inputSchema={"type": _OBJECT, "properties": {}, "additionalProperties": False},
    ),
]


class DesktopMcp:
    """The MCP face of one desktop: a low-level SDK server and one client per MCP session."""

    def __init__(self, desktop: str, socket_dir: str | None, per_operation: bool = False) -> None:
        self.desktop = desktop
        self.socket_dir = socket_dir
        #: Also one tool per visible operation (from each session's last pull).
        self.per_operation = per_operation
        self._operation_tools: dict[int, dict[str, OperationTool]] = {}
        # The System Instructions go once, as the server's instructions, not in every read.
        instructions = f"{_INSTRUCTIONS}\n\n{SYSTEM_INSTRUCTIONS}"
        self.server: Server[Any, Any] = Server("aotui", instructions=instructions)
        self.uris = {kind: f"aotui://{desktop}/{kind}" for kind in ("snapshot", "status")}
        self._clients: dict[int, tuple[Client, anyio.Lock]] = {}
        self._subscribed: dict[int, tuple[ServerSession, set[str]]] = {}
        self._register()

    def options(self) -> Any:
        """The initialization options: tools, resources with subscriptions."""
        changes = NotificationOptions(tools_changed=self.per_operation)
        return self.server.create_initialization_options(changes)

    async def _pull(self, arguments: dict[str, Any] | None = None) -> str:
        """This session's pull; in per-operation mode its tools follow what it read."""
        options = _pull_options(arguments or {})

        def pull(client: Client) -> dict[str, Any]:
            if options.get("since") == "last":
                if client.snapshot_id is None:
                    raise AotuiError(
                        ErrorCode.E_STALE_STATE,
                        "since last: this session has not read the desktop yet; "
                        "call snapshot without since first",
                    )
                options["since"] = client.snapshot_id
            method = "snapshot_structured" if self.per_operation else "snapshot"
            result: dict[str, Any] = client.call(method, release=client.snapshot_id, **options)
            client.snapshot_id = result["snapshot_id"]
            return result

        partial = any(name in options for name in ("app", "view", "since"))
        if not self.per_operation or partial:  # the tools follow whole reads only
            return str((await self._call(pull))["markdown"])

        result = await self._call(pull)
        session = self._session()
        tools = {tool.name: tool for tool in operation_tools(result)}
        before = self._operation_tools.get(id(session), {})
        self._operation_tools[id(session)] = tools
        if _shape(before) != _shape(tools):
            await session.send_tool_list_changed()
        return str(result["markdown"])

    # --- the session's client -------------------------------------------------------------------

    def _session(self) -> ServerSession:
        return self.server.request_context.session

    async def _call(self, work: Any) -> Any:
        """Run ``work(client)`` on this MCP session's client, one call at a time."""
        key = id(self._session())
        if key not in self._clients:
            client = Client(self.desktop, self.socket_dir, timeout_s=30.0)
            client.owner = f"mcp-{os.getpid()}-{len(self._clients) + 1}"
            self._clients[key] = (client, anyio.Lock())
        client, lock = self._clients[key]
        async with lock:
            return await anyio.to_thread.run_sync(work, client)

    def close(self) -> None:
        """Release every session's lease and close its client."""
        for client, _ in self._clients.values():
            with contextlib.suppress(AotuiError):
                client.close()
        self._clients.clear()

    # --- handlers -------------------------------------------------------------------------------

    def _register(self) -> None:
        server = self.server

        @server.list_tools()  # type: ignore[no-untyped-call, untyped-decorator]
        async def list_tools() -> list[types.Tool]:
            mine = self._operation_tools.get(id(self._session()), {})
            return TOOLS + [
                types.Tool(name=t.name, description=t.description, inputSchema=t.input_schema)
                for t in mine.values()
            ]

        @server.call_tool(validate_input=True)  # type: ignore[untyped-decorator]
        async def call_tool(name: str, arguments: dict[str, Any]) -> types.CallToolResult:
            try:
                return await self._tool(name, arguments)
            except AotuiError as exc:
                error: dict[str, Any] = {
                    "code": exc.code.value,
                    "message": exc.message,
                    "recoverable": exc.recoverable,
                }
                return types.CallToolResult(
                    content=[types.TextContent(type="text", text=json.dumps(error))],
                    structuredContent=error,
                    isError=True,
                )

        @server.list_resources()  # type: ignore[no-untyped-call, untyped-decorator]
        async def list_resources() -> list[types.Resource]:
            return [
                types.Resource(
                    uri=AnyUrl(self.uris["snapshot"]),
                    name="snapshot",
                    description=f"The desktop {self.desktop!r} as the agent reads it",
                    mimeType="text/markdown",
                ),
                types.Resource(
                    uri=AnyUrl(self.uris["status"]),
                    name="status",
                    description=f"Apps of the desktop {self.desktop!r}: state, pid, memory",
                    mimeType="application/json",
                ),
            ]

        @server.read_resource()  # type: ignore[no-untyped-call, untyped-decorator]
        async def read_resource(uri: AnyUrl) -> str:
            if str(uri) == self.uris["snapshot"]:
                return await self._pull()
            if str(uri) == self.uris["status"]:
                return json.dumps(await self._call(lambda client: client.status()))
            raise ValueError(f"no resource {uri}; known: {', '.join(self.uris.values())}")

        @server.subscribe_resource()  # type: ignore[no-untyped-call, untyped-decorator]
        async def subscribe(uri: AnyUrl) -> None:
            session = self._session()
            entry = self._subscribed.setdefault(id(session), (session, set()))
            entry[1].add(str(uri))

        @server.unsubscribe_resource()  # type: ignore[no-untyped-call, untyped-decorator]
        async def unsubscribe(uri: AnyUrl) -> None:
            entry = self._subscribed.get(id(self._session()))
            if entry is not None:
                entry[1].discard(str(uri))

    async def _tool(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        if name == "snapshot":
            return _text_result(await self._pull(arguments))
        operation = self._operation_tools.get(id(self._session()), {}).get(name)
        if operation is not None:
            name, arguments = (
                "execute",
                {
                    "app": operation.app,
                    "view": operation.view,
                    "operation": operation.operation,
                    "args": arguments,
                },
            )
        if name in ("exec", "execute"):
            command: Any = arguments["text"] if name == "exec" else dict(arguments)

            def run(client: Client) -> Any:
                if client.lease_token is None:
                    client.acquire()  # the MCP session is the input-lease owner
                return client.execute(command)

            return _json_result(await self._call(run))
        if name == "wait" and "confirmation" in arguments:
            ident = arguments["confirmation"]
            timeout_ms = arguments.get("timeout_ms", 10_000)
            return _json_result(
                await self._call(
                    lambda client: client.call(
                        "confirmation",
                        timeout_s=timeout_ms / 1000 + 5,
                        confirmation=ident,
                        timeout_ms=timeout_ms,
                    )
                )
            )
        if name == "wait":
            return _json_result(await self._call(lambda client: client.wait(**arguments)))
        if name == "status":
            return _json_result(await self._call(lambda client: client.status()))
        raise AotuiError(ErrorCode.E_NOT_FOUND, f"no tool {name!r}")

    # --- signals → resource updates ---------------------------------------------------------------

    async def follow_signals(self) -> None:
        """Tell subscribed sessions their resources changed, on every desktop signal."""
        probe = Client(self.desktop, self.socket_dir)
        endpoint = probe.paths.signals
        probe.close()
        context = zmq.asyncio.Context()
        sub = context.socket(zmq.SUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.MAXMSGSIZE, 1 << 16)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(endpoint)
        try:
            while True:
                frame = await sub.recv()
                with contextlib.suppress(AotuiError):
                    if not isinstance(codec.decode(frame), Signal):
                        continue
                for key, (session, uris) in list(self._subscribed.items()):
                    for uri in sorted(uris):
                        try:
                            await session.send_resource_updated(AnyUrl(uri))
                        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                            self._subscribed.pop(key, None)  # that session has gone
                            break
        finally:
            sub.close(linger=0)
            context.term()


_INSTRUCTIONS = (
    "An aotui desktop: apps you read as Markdown (tool snapshot) and drive with commands "
    "(tools exec and execute). Read first, then act; refs like notes[1] mean what you read."
)


def _shape(tools: dict[str, OperationTool]) -> list[tuple[str, Any]]:
    return [(name, tool.input_schema) for name, tool in tools.items()]


def _text_result(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


def _json_result(result: Any) -> types.CallToolResult:
    text = json.dumps(result, ensure_ascii=False, default=str)
    structured = result if isinstance(result, dict) else {"result": result}
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structuredContent=structured
    )


def _pull_options(arguments: dict[str, Any]) -> dict[str, Any]:
    """The snapshot params of a tool call: never the System Instructions (sent once, above)."""
    chosen = {name: arguments.get(name) for name in ("app", "view", "since", "max_tokens")}
    return {"include_instructions": False} | {k: v for k, v in chosen.items() if v is not None}


@contextlib.asynccontextmanager
async def running(face: DesktopMcp) -> AsyncIterator[None]:
    """The desktop's signals followed while the server runs; every session's client closed after."""
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(face.follow_signals)
        try:
            yield
        finally:
            tasks.cancel_scope.cancel()
            face.close()


async def serve_stdio(desktop: str, socket_dir: str | None, per_operation: bool = False) -> None:
    """Serve one MCP session over stdin/stdout until the client closes it."""
    from mcp.server.stdio import stdio_server

    face = DesktopMcp(desktop, socket_dir, per_operation)
    # Copies of the descriptors: the SDK's wrappers close what they wrap, and the process's own
    # stdout must outlive them (the CLI flushes it on the way out).
    stdin = os.fdopen(os.dup(sys.stdin.fileno()), "r", encoding="utf-8", errors="replace")
    stdout = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    with stdin, stdout:
        streams = stdio_server(anyio.wrap_file(stdin), anyio.wrap_file(stdout))
        async with running(face), streams as (read, write):
            await face.server.run(read, write, face.options())
