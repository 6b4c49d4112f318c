"""Export and import a desktop's state (seed 000's persistence, given to the product layer).

``export`` answers the desktop as :class:`~supervisor.store.state.DesktopState` data (format
``aotui.desktop``, versioned): apps, their view ids and their own data. ``import`` takes such data
and gives each app it names (matched by manifest id) that app's data: a running app is closed and
opened again from it, so it shows the imported state at once. Apps the data names that are not
installed here are reported as skipped, never installed behind the user's back. The desktop's
store stays the embedded default: this is how state moves between desktops or is kept aside.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.supervisor.store.state import DesktopState

if TYPE_CHECKING:
    from aotui.supervisor.server.process import Supervisor

__all__ = ["StateTransfer"]


class StateTransfer:
    """The ``export`` and ``import`` methods of one desktop."""

    def __init__(self, supervisor: Supervisor) -> None:
        self.supervisor = supervisor

    async def export_state(self, params: dict[str, Any]) -> dict[str, Any]:
        """The desktop's state as plain data (``DesktopState.to_dict``)."""
        return self.supervisor.desktop.serialize().to_dict()

    async def import_state(self, params: dict[str, Any]) -> dict[str, Any]:
        """Give the apps named in ``state`` their data; restart the running ones from it."""
        token = params.get("token")
        self.supervisor.lease.check(token if isinstance(token, str) else None)
        state = DesktopState.from_dict(params.get("state"))  # type: ignore[arg-type]
        desktop = self.supervisor.desktop
        desktop.require_writable()
        installed = {app.manifest.id: app for app in desktop.apps}
        imported: list[str] = []
        skipped: list[str] = []
        for entry in state.apps:
            app = installed.get(entry.manifest_id)
            if app is None:
                skipped.append(entry.manifest_id)
                continue
            lock = self.supervisor.app_locks.setdefault(app.app_id, asyncio.Lock())
            async with lock:  # never under an execute on the same app
                live = app.is_live
                if live:
                    await desktop.runner.close(app)
                app.saved_state = entry.data
                await desktop.persist(app)
                if live:
                    await desktop.open_app(app)
            imported.append(app.app_id)
        desktop.log(
            f"Imported the data of {len(imported)} app(s)"
            + (f"; not installed here, skipped: {', '.join(skipped)}" if skipped else "")
            + "."
        )
        if not imported and not skipped:
            raise AotuiError(ErrorCode.E_INVALID_CMD, "the state names no apps; nothing imported")
        return {"imported": imported, "skipped": skipped}
