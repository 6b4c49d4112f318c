"""AWI-TTY (seed 002) on the desktop's sockets: a Browser tab driven like a terminal browser.

The methods (``navigate``, ``send_key``, ``scroll``, ``snapshot`` with ``format: "text"``,
``get_title``, ``get_url``, ``get_nav_state``, ``set_viewport``, ``type_text``,
``wait_for_frame_quiescence``, ``wait_for_title_contains``) are declared in
:mod:`protocol.api`; each is sent to the Browser app (``com.aotui.browser``, opened when it is not
running) as its ``awi`` event, which runs it on the active tab (``sandbox/browser_app.py``). Like
``exec``, a call that changes the page needs the input lease (or takes it for its length, as a
JSON-RPC connection does); reads do not.
"""

from __future__ import annotations

import json
from typing import Any

from aotui.protocol import api
from aotui.protocol.api import AWI_VERSION
from aotui.protocol.messages import Operation
from aotui.supervisor.desktop.app_record import AppRecord
from aotui.supervisor.server.process import Method, Supervisor

__all__ = ["AWI_METHODS", "AWI_VERSION", "AwiTty"]

#: The declared AWI-TTY methods served here (``snapshot`` is the desktop's, with ``text``).
AWI_METHODS = (
    "navigate", "send_key", "scroll", "get_title", "get_url", "get_nav_state", "set_viewport",
    "type_text", "wait_for_frame_quiescence", "wait_for_title_contains",
)  # fmt: skip
#: Those that only read: no lease needed.
_READS = {"get_title", "get_url", "get_nav_state", "snapshot"}
#: What a call's record holds besides the method's own parameters.
_COMMON = {"browser", "session", "token", "peer"}


class AwiTty:
    """Serves the AWI-TTY methods of one supervisor."""

    def __init__(self, supervisor: Supervisor) -> None:
        self.supervisor = supervisor

    def install(self) -> None:
        """Add the methods, and ``snapshot``'s ``text`` format, to the supervisor's."""
        for name in AWI_METHODS:
            self.supervisor.methods[name] = self.call
        pull = self.supervisor.methods["snapshot"]
        self.supervisor.methods["snapshot"] = self._snapshots(pull)

    async def call(self, record: api.Params) -> Any:
        """One AWI-TTY method, run by the Browser on its active tab."""
        name = record.METHOD.name
        params = {
            field: getattr(record, field)
            for field in record.FIELDS
            if field not in _COMMON and getattr(record, field) is not None
        }
        return await self._send(name, params, record)

    def _snapshots(self, pull: Method) -> Method:
        async def snapshot(call: api.SnapshotParams) -> Any:
            if call.format is not api.SnapshotFormat.TEXT:
                return await pull(call)
            params = {"format": "text", "include_meta": bool(call.include_meta)}
            return await self._send("snapshot", params, call)

        return snapshot

    async def _send(self, name: str, params: dict[str, Any], record: api.Params) -> Any:
        supervisor = self.supervisor
        if name not in _READS:
            supervisor.lease.check(getattr(record, "token", None))
            supervisor.desktop.require_writable()
        app = await self._browser(getattr(record, "browser", None) or "com.aotui.browser")
        text = json.dumps(params)
        timeout = supervisor.config.operation_timeout_ms
        return await supervisor.desktop.deliver(
            app,
            lambda rid: Operation(rid, "", "awi", {"method": name, "params": text}, {}, timeout),
            f"awi {name}",
        )

    async def _browser(self, ref: str) -> AppRecord:
        """The Browser app, opened when it is not running."""
        desktop = self.supervisor.desktop
        app = desktop.app(ref)
        if not app.is_live:
            await desktop.open_app(app)
        app.require_live()
        return app
