"""``serve_desktop``: one desktop's supervisor with the product layer's faces attached."""

from __future__ import annotations

from aotui.supervisor.config import DesktopConfig
from aotui.supervisor.interface.rpc_server import RpcServer
from aotui.supervisor.interface.state_transfer import StateTransfer
from aotui.supervisor.interface.waits import DesktopWaits
from aotui.supervisor.paths import DesktopPaths
from aotui.supervisor.server import Supervisor

__all__ = ["serve_desktop"]


async def serve_desktop(config: DesktopConfig, paths: DesktopPaths) -> None:
    """Run the desktop until shutdown, with ``rpc.sock`` and the methods these faces add."""
    supervisor = Supervisor(config, paths)
    rpc = RpcServer(supervisor)
    supervisor.services.append(rpc)
    supervisor.methods["get_capabilities"] = rpc.get_capabilities
    supervisor.methods["wait_for"] = DesktopWaits(supervisor).wait_for
    transfer = StateTransfer(supervisor)
    supervisor.methods["export"] = transfer.export_state
    supervisor.methods["import"] = transfer.import_state
    await supervisor.serve()
