"""``aotui mcp``: one desktop as an MCP server (stdio; streamable HTTP in :mod:`.mcp_http`).

Built on the official ``mcp`` SDK's low-level server. Tools ``snapshot``, ``run_commands``,
``call_operation``, ``wait`` and ``status`` (:mod:`.mcp_tools`); resources
``aotui://NAME/snapshot`` (and the template ``aotui://NAME/snapshot/{app}``),
``aotui://NAME/status`` and ``aotui://NAME/instructions``, with a resource-updated notification to
subscribers on every desktop signal. Each MCP session has its own desktop client: its own snapshot
id (refs resolve against what *it* read). It takes the input lease with each command and keeps it
only :data:`~.mcp_tools.IDLE_S` after its last one (server/lease.py), so a connected, idle session
keeps nobody out. Errors come back as tool results with ``isError`` and ``{code, message,
recoverable}``, so the model can recover; a desktop that is not up is such an error
(``E_UNAVAILABLE``, saying how to start it), and the server uses the desktop once it answers.

The server needs of a desktop only :class:`Client`'s typed API: ``connect`` makes each session's
client, a local ``Client`` by default; ``aotui mcp --fleet`` gives a fleet's
:class:`~aotui.supervisor.fleet.client.FleetDesktop` instead, whose ``signals()`` (read on a
thread) drive the resource updates.

Imported only by the ``mcp`` command: the SDK costs start-up time no other command should pay.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import mcp.types as types
import zmq
import zmq.asyncio
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.server.session import ServerSession
from pydantic import AnyUrl

from aotui.protocol import codec
from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.messages import Signal
from aotui.supervisor.desktop.instructions import SYSTEM_INSTRUCTIONS
from aotui.supervisor.interface.client import Client, DesktopUnavailable
from aotui.supervisor.interface.mcp_tools import IDLE_S, INSTRUCTIONS, TOOLS, WAIT_REASON_DEFAULT
from aotui.supervisor.interface.operation_tools import OperationTool, operation_tools

__all__ = ["TOOLS", "DesktopMcp", "running", "serve_stdio"]

_MARKDOWN, _JSON = "text/markdown", "application/json"


class DesktopMcp:
    """The MCP face of one desktop: a low-level SDK server and one client per MCP session."""

    def __init__(
        self,
        desktop: str,
        socket_dir: str | None,
        per_operation: bool = False,
        connect: Callable[[], Client] | None = None,
    ) -> None:
        self.desktop = desktop
        self.socket_dir = socket_dir
        #: Makes one session's client (with :class:`Client`'s API); ``None``: a local Client.
        self.connect = connect
        #: Also one tool per visible operation (from each session's last pull).
        self.per_operation = per_operation
        self._operation_tools: dict[int, dict[str, OperationTool]] = {}
        # The System Instructions go once, as the server's instructions, not in every read.
        instructions = f"{INSTRUCTIONS}\n\n{SYSTEM_INSTRUCTIONS}"
        self.server: Server[Any, Any] = Server(
            "aotui", version=_version(), instructions=instructions
        )
        kinds = ("snapshot", "status", "instructions")
        self.uris = {kind: f"aotui://{desktop}/{kind}" for kind in kinds}
        self._clients: dict[int, tuple[Client, anyio.Lock]] = {}
        self._subscribed: dict[int, tuple[ServerSession, set[str]]] = {}
        self._register()

    def options(self) -> Any:
        """The initialization options: tools, resources with subscriptions."""
        changes = NotificationOptions(tools_changed=self.per_operation)
        options = self.server.create_initialization_options(changes)
        # The SDK's low-level server always says subscribe: false; ours sends the updates.
        options.capabilities.resources = types.ResourcesCapability(
            subscribe=True, listChanged=False
        )
        return options

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
            if self.per_operation:
                options["format"] = "json"
            result: dict[str, Any] = client.call("snapshot", release=client.snapshot_id, **options)
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
            if self.connect is not None:
                client = await anyio.to_thread.run_sync(self.connect)
            else:
                client = Client(self.desktop, self.socket_dir, timeout_s=30.0)
            client.owner = f"mcp-{os.getpid()}-{len(self._clients) + 1}"
            self._clients[key] = (client, anyio.Lock())
        client, lock = self._clients[key]
        async with lock:
            try:
                return await anyio.to_thread.run_sync(work, client)
            except DesktopUnavailable as exc:
                # The socket is asked again on the next call: a desktop started later is used.
                raise AotuiError(
                    ErrorCode.E_UNAVAILABLE,
                    f"{exc.message}; this MCP server stays up and uses the desktop once it "
                    f"answers: start it, then call the tool again",
                ) from None

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
                types.Tool(
                    name=t.name,
                    description=t.description,
                    inputSchema=t.input_schema,
                    annotations=types.ToolAnnotations(destructiveHint=True) if t.confirm else None,
                )
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
            named = f"the desktop {self.desktop!r}"
            listed = (
                ("snapshot", f"{named} as the agent reads it", _MARKDOWN),
                ("status", f"apps of {named}: state, pid, memory", _JSON),
                ("instructions", f"the System Instructions of {named}", _MARKDOWN),
            )
            return [
                types.Resource(
                    uri=AnyUrl(self.uris[kind]), name=kind, description=about, mimeType=mime
                )
                for kind, about, mime in listed
            ]

        @server.list_resource_templates()  # type: ignore[no-untyped-call, untyped-decorator]
        async def list_resource_templates() -> list[types.ResourceTemplate]:
            return [
                types.ResourceTemplate(
                    uriTemplate=self.uris["snapshot"] + "/{app}",
                    name="app snapshot",
                    description="one app's block of the snapshot (app: app_0 or a manifest id)",
                    mimeType=_MARKDOWN,
                )
            ]

        @server.read_resource()  # type: ignore[no-untyped-call, untyped-decorator]
        async def read_resource(uri: AnyUrl) -> list[ReadResourceContents]:
            text, mime = await self._read(str(uri))
            return [ReadResourceContents(content=text, mime_type=mime)]

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

    async def _read(self, uri: str) -> tuple[str, str]:
        """A resource's text and its listed MIME type."""
        if uri == self.uris["snapshot"]:
            return await self._pull(), _MARKDOWN
        if uri == self.uris["status"]:
            return json.dumps(await self._call(lambda client: client.status())), _JSON
        if uri == self.uris["instructions"]:
            return SYSTEM_INSTRUCTIONS, _MARKDOWN
        app = uri.removeprefix(self.uris["snapshot"] + "/")
        if app != uri and app:
            return await self._pull({"app": app}), _MARKDOWN
        known = ", ".join([*self.uris.values(), self.uris["snapshot"] + "/{app}"])
        raise ValueError(f"no resource {uri}; known: {known}")

    async def _tool(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        if name == "snapshot":
            return _text_result(await self._pull(arguments))
        operation = self._operation_tools.get(id(self._session()), {}).get(name)
        if operation is not None:
            name, arguments = (
                "call_operation",
                {
                    "app": operation.app,
                    "view": operation.view,
                    "operation": operation.operation,
                    "args": arguments,
                },
            )
        if name in ("run_commands", "call_operation"):
            command: Any = arguments["text"] if name == "run_commands" else dict(arguments)

            def run(client: Client) -> Any:
                # Held while this session works and IDLE_S after: an idle session keeps
                # nobody out, and a second one takes its turn (server/lease.py).
                client.acquire(client.owner, heartbeat=False, kind="mcp", idle_s=IDLE_S)
                return client.execute(command, snapshot_id=client.snapshot_id)

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
            condition = dict(arguments)
            if not {"reason", "text", "quiet_ms"} & condition.keys():
                condition["reason"] = WAIT_REASON_DEFAULT
            return _json_result(await self._call(lambda client: client.wait(**condition)))
        if name == "status":
            return _json_result(await self._call(lambda client: client.status()))
        raise AotuiError(ErrorCode.E_NOT_FOUND, f"no tool {name!r}")

    # --- signals → resource updates ---------------------------------------------------------------

    async def follow_signals(self) -> None:
        """Tell subscribed sessions their resources changed, on every desktop signal."""
        if self.connect is not None:
            await self._follow_client_signals()
            return
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
                await self._updated()
        finally:
            sub.close(linger=0)
            context.term()

    async def _updated(self) -> None:
        """One desktop signal: every subscribed resource updated."""
        for key, (session, uris) in list(self._subscribed.items()):
            for uri in sorted(uris):
                try:
                    await session.send_resource_updated(AnyUrl(uri))
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    self._subscribed.pop(key, None)  # that session has gone
                    break

    async def _follow_client_signals(self) -> None:
        """The signals of a client ``connect`` makes (a fleet desktop's), read on a thread of
        its own (a daemon: its blocking read never holds the process up at exit)."""
        assert self.connect is not None
        connect = self.connect
        send, receive = anyio.create_memory_object_stream[Signal](max_buffer_size=256)
        token = anyio.lowlevel.current_token()
        stop = threading.Event()
        sources: list[Client] = []

        def read() -> None:
            while not stop.is_set():
                try:
                    source = connect()
                    sources.append(source)
                    try:
                        for signal in source.signals():
                            if stop.is_set():
                                return
                            anyio.from_thread.run_sync(send.send_nowait, signal, token=token)
                    finally:
                        source.close()
                except anyio.WouldBlock:
                    continue  # behind by a whole buffer: the updates already say "changed"
                except (anyio.ClosedResourceError, anyio.BrokenResourceError, RuntimeError):
                    return  # the server stopped
                except AotuiError as exc:  # no actor took the stream: tried again
                    print(f"aotui mcp: desktop signals: {exc.message}", file=sys.stderr)
                    time.sleep(1.0)

        threading.Thread(target=read, name="aotui-mcp-signals", daemon=True).start()
        try:
            async with receive:
                async for _signal in receive:
                    await self._updated()
        finally:
            stop.set()
            for source in sources:  # its iterator ends (a fleet desktop's within a heartbeat)
                with contextlib.suppress(AotuiError):
                    source.close()


def _version() -> str:
    """aotui's own version, as ``serverInfo.version`` (the SDK would give its own)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("aotui")
    except PackageNotFoundError:  # a checkout run without being installed
        return "unknown"


def _shape(tools: dict[str, OperationTool]) -> list[tuple[str, Any, bool]]:
    return [(name, tool.input_schema, tool.confirm) for name, tool in tools.items()]


def _text_result(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


def _json_result(result: Any) -> types.CallToolResult:
    text = json.dumps(result, ensure_ascii=False, default=str)
    structured = result if isinstance(result, dict) else {"result": result}
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structuredContent=structured
    )


def _pull_options(arguments: dict[str, Any]) -> dict[str, Any]:
    """The snapshot params of a tool call: the System Instructions only when asked (the server's
    ``instructions`` and a resource carry them, and several clients drop the former)."""
    names = ("app", "view", "since", "max_tokens", "include_instructions")
    chosen = {name: arguments.get(name) for name in names}
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


async def serve_stdio(
    desktop: str,
    socket_dir: str | None,
    per_operation: bool = False,
    connect: Callable[[], Client] | None = None,
) -> None:
    """Serve one MCP session over stdin/stdout until the client closes it (``connect``: see
    :class:`DesktopMcp`)."""
    from mcp.server.stdio import stdio_server

    face = DesktopMcp(desktop, socket_dir, per_operation, connect)
    # Copies of the descriptors: the SDK's wrappers close what they wrap, and the process's own
    # stdout must outlive them (the CLI flushes it on the way out).
    stdin = os.fdopen(os.dup(sys.stdin.fileno()), "r", encoding="utf-8", errors="replace")
    stdout = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    with stdin, stdout:
        streams = stdio_server(anyio.wrap_file(stdin), anyio.wrap_file(stdout))
        async with running(face), streams as (read, write):
            await face.server.run(read, write, face.options())
