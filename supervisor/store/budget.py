"""The most data one app may store: keyed parts are admitted against a per-app budget.

An app's keyed data grows part by part, each within a frame, so nothing else bounds its total:
the supervisor holds it in memory, writes it, and hands it to every new worker. An acknowledged
operation that would take the app past :data:`MAX_APP_DATA_BYTES` is refused before its effect
is stored (``E_APP_ERROR``; the desktop restarts the app from its last acknowledged data).
"""

from __future__ import annotations

from typing import Any

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.supervisor.workers.restore import part_bytes

__all__ = ["MAX_APP_DATA_BYTES", "DataBudget"]

#: The most bytes of data (as stored: encoded) one app may keep.
MAX_APP_DATA_BYTES = 64 << 20


class DataBudget:
    """Per app, the encoded size of each stored part; admits changes within the budget."""

    def __init__(self, limit: int = MAX_APP_DATA_BYTES) -> None:
        self.limit = limit
        #: app → part → (id of the value measured, its size). Unchanged parts keep their value
        #: objects from one acknowledged state to the next, so only new values are measured.
        self._sizes: dict[str, dict[str, tuple[int, int]]] = {}

    def admit(self, app: str, name: str, stored: dict[str, Any], changes: dict[str, Any]) -> int:
        """The app's total after ``changes``; ``E_APP_ERROR`` if that is over the budget."""
        known = self._sizes.get(app, {})
        sizes: dict[str, tuple[int, int]] = {}
        for part, value in stored.items():
            seen = known.get(part)
            if seen is None or seen[0] != id(value):
                seen = (id(value), part_bytes(part, value))
            sizes[part] = seen
        before = sum(size for _, size in sizes.values())
        for part, value in changes.items():
            if value is None:
                sizes.pop(part, None)
            else:
                sizes[part] = (id(value), part_bytes(part, value))
        total = sum(size for _, size in sizes.values())
        # Over the budget, what does not grow the data still goes (a delete must always work).
        if total > self.limit and total > before:
            raise AotuiError(
                ErrorCode.E_APP_ERROR,
                f"{app} ({name}) would store {total >> 20} MiB of data, over the "
                f"{self.limit >> 20} MiB an app may keep; the operation took no effect: the app "
                f"restarts from its last acknowledged data. Delete some of its data (or keep "
                f"less of it) before adding more.",
                {"outcome": "not applied", "stored_bytes": total, "limit_bytes": self.limit},
            )
        self._sizes[app] = sizes
        return total

    def forget(self, app: str) -> None:
        """Drop what is known of ``app`` (uninstalled)."""
        self._sizes.pop(app, None)
