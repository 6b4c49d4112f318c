"""The OS side: the supervisor process and everything that talks to it, in rooms by role.

- :mod:`~supervisor.server` — the supervisor process: sockets, dispatch, snapshot ids, the lease,
  signals, sessions, per-client budgets (circus's arbiter and controller).
- :mod:`~supervisor.desktop` — one desktop's apps, view trees and the assembled snapshot.
- :mod:`~supervisor.workers` — worker processes: the zygote, worker channels, heartbeats, the
  watchdog, restarts, per-app uids and logs (circus's watcher and process).
- :mod:`~supervisor.store` — durable desktops: the SQLite store, its faults, lock and repair.
- :mod:`~supervisor.broker` — HTTP performed for apps under their ``net:http`` grants.
- :mod:`~supervisor.interface` — the product layer: Python client, CLI, JSON-RPC, MCP, demo.
- :mod:`~supervisor.manifest`, :mod:`~supervisor.config`, :mod:`~supervisor.paths` — validated
  inputs, shared by all of them.

Arrows point one way: ``interface`` uses the others; nothing outside it imports it, except the
``aotui up`` entry that attaches its faces to a supervisor.
"""

# Exports load on first use (protocol/lazy.py): `aotui status` and every worker import one
# submodule, not the whole room, so a command's start-up pays only for what it runs.
from __future__ import annotations

from aotui.protocol.lazy import lazy_exports

TYPE_CHECKING = False  # typing's, without importing typing (~2 ms of every CLI call)

if TYPE_CHECKING:
    from aotui.supervisor.config import DesktopConfig, load_config
    from aotui.supervisor.interface.client import Client, DesktopUnavailable
    from aotui.supervisor.manifest import Manifest, load_manifest

__all__ = [
    "Client",
    "DesktopConfig",
    "DesktopUnavailable",
    "Manifest",
    "load_config",
    "load_manifest",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "aotui.supervisor.interface.client": ("Client", "DesktopUnavailable"),
        "aotui.supervisor.config": ("DesktopConfig", "load_config"),
        "aotui.supervisor.manifest": ("Manifest", "load_manifest"),
    },
)
