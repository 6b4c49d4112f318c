"""``serve_desktop``: one desktop's supervisor with the product layer's faces attached."""

from __future__ import annotations

import os
from typing import Any

from aotui.protocol.api import SnapshotFormat, SnapshotParams
from aotui.supervisor.config import DesktopConfig
from aotui.supervisor.interface.awi import AwiTty
from aotui.supervisor.interface.rpc_server import RpcLimits, RpcServer
from aotui.supervisor.interface.snapshot_json import policy_confirms, snapshot_json
from aotui.supervisor.interface.state_transfer import StateTransfer
from aotui.supervisor.interface.waits import DesktopWaits
from aotui.supervisor.paths import DesktopPaths
from aotui.supervisor.server.process import Method, Supervisor

__all__ = ["serve_desktop"]


async def serve_desktop(config: DesktopConfig, paths: DesktopPaths) -> None:
    """Run the desktop until shutdown, with ``rpc.sock`` and the methods these faces add."""
    supervisor = Supervisor(config, paths)
    rpc = RpcServer(supervisor, RpcLimits(idle_timeout_s=config.rpc_idle_timeout_s))
    supervisor.services.append(rpc)
    supervisor.methods["get_capabilities"] = rpc.get_capabilities
    supervisor.methods["wait_for"] = DesktopWaits(supervisor).wait_for
    transfer = StateTransfer(supervisor)
    supervisor.methods["export"] = transfer.export_state
    supervisor.methods["import"] = transfer.import_state
    supervisor.methods["snapshot"] = structured_snapshots(
        supervisor, supervisor.methods["snapshot"]
    )
    AwiTty(supervisor).install()  # the Browser's tab as a terminal browser (seed 002)
    if os.environ.get("AOTUI_CHAOS"):  # started by `aotui chaos run`: record and inject
        from aotui.supervisor.chaos.nemesis import attach

        supervisor.instrument_with = attach
    await supervisor.serve()


def structured_snapshots(supervisor: Supervisor, pull: Method) -> Method:
    """``snapshot`` with ``format: json`` too: the pull's structure (apps, views, operations,
    refs) beside its Markdown."""

    async def snapshot(call: SnapshotParams) -> dict[str, Any]:
        pulled: dict[str, Any] = await pull(call)
        if call.format is not SnapshotFormat.JSON:
            return pulled
        refs = supervisor.desktop.registry.get(pulled["snapshot_id"])
        confirms = policy_confirms(supervisor.desktop)
        structured = snapshot_json(pulled["snapshot_id"], pulled["markdown"], refs, confirms)
        extra = {"meta": pulled["meta"]} if "meta" in pulled else {}
        return {**structured, "markdown": pulled["markdown"], **extra}

    return snapshot
