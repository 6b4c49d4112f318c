"""The OS side: the supervisor process and everything that talks to it.

- :mod:`supervisor.server` — ``Supervisor``: the process, its sockets, request dispatch, signals.
- :mod:`supervisor.desktop` — ``Desktop``: apps, workers, what each command does.
- :mod:`supervisor.app_record` / :mod:`supervisor.view_tree` — one app's state machine and views.
- :mod:`supervisor.snapshot` — assembling the Markdown snapshot from cached fragments.
- :mod:`supervisor.registry`, :mod:`supervisor.lease`, :mod:`supervisor.throttle` — snapshot ids,
  the input lease, signal throttling (all with an injectable clock); :mod:`supervisor.stall` —
  time the supervisor itself did not run; :mod:`supervisor.sessions` — each reader's last pull.
- :mod:`supervisor.launcher` / :mod:`supervisor.worker_handle` — starting workers, their channels.
- :mod:`supervisor.conn_guard` — the bound on client connections (a flood keeps no descriptors).
- :mod:`supervisor.state`, :mod:`supervisor.store` — the durable desktop; its faults told apart
  (:mod:`~supervisor.store_faults`), one supervisor per store (:mod:`~supervisor.store_lock`),
  listing and repair (:mod:`~supervisor.store_repair`), WAL damage (:mod:`~supervisor.wal_check`).
- :mod:`supervisor.manifest`, :mod:`supervisor.config`, :mod:`supervisor.paths` — validated inputs.
- :mod:`supervisor.client` — ``Client``, the Python API; :mod:`supervisor.cli` — ``aotui``.
- :mod:`supervisor.interface` — the product layer's other faces (JSON-RPC socket, MCP server).
"""

# Exports load on first use (PEP 562): `aotui status` and every worker import one submodule, not the
# whole room, so a command's start-up pays only for what it runs.
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aotui.supervisor.client import Client, DesktopUnavailable
    from aotui.supervisor.config import DesktopConfig, load_config
    from aotui.supervisor.manifest import Manifest, load_manifest

_EXPORTS = {
    "Client": "aotui.supervisor.client",
    "DesktopUnavailable": "aotui.supervisor.client",
    "DesktopConfig": "aotui.supervisor.config",
    "load_config": "aotui.supervisor.config",
    "Manifest": "aotui.supervisor.manifest",
    "load_manifest": "aotui.supervisor.manifest",
}

__all__ = [
    "Client",
    "DesktopConfig",
    "DesktopUnavailable",
    "Manifest",
    "load_config",
    "load_manifest",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
