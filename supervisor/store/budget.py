"""The most data one app may store: keyed parts are admitted against a per-app budget.

An app's keyed data grows part by part, each within a frame, so nothing else bounds its total:
the supervisor holds it in memory, writes it, and hands it to every new worker. An acknowledged
operation that would take the app past :data:`MAX_APP_DATA_BYTES` is refused before its effect
is stored (``E_APP_ERROR``; the desktop restarts the app from its last acknowledged data).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aotui.protocol.errors import AotuiError, ErrorCode, Outcome
from aotui.supervisor.workers.restore import part_bytes

__all__ = ["MAX_APP_DATA_BYTES", "DataBudget"]

#: The most bytes of data (as stored: encoded) one app may keep.
MAX_APP_DATA_BYTES = 64 << 20


@dataclass
class _Measured:
    """An app's stored parts as last measured: their sizes, their total, and the dict measured."""

    data: dict[str, Any]
    sizes: dict[str, int]
    total: int


class DataBudget:
    """Per app, the encoded size of each stored part; admits changes within the budget.

    Measuring costs what changed, not what is stored: the sizes of the acknowledged parts are
    kept, and an admitted change is folded in when the desktop adopts it (:meth:`adopted`). Data
    the desktop replaced some other way (a restore, an import, a whole-state write) is a new dict,
    measured once in full.
    """

    def __init__(self, limit: int = MAX_APP_DATA_BYTES) -> None:
        self.limit = limit
        self._measured: dict[str, _Measured] = {}
        #: app → (part → its new size, ``None`` when deleted; the total after) until adopted.
        self._pending: dict[str, tuple[dict[str, int | None], int]] = {}

    def admit(self, app: str, name: str, stored: dict[str, Any], changes: dict[str, Any]) -> int:
        """The app's total after ``changes``; ``E_APP_ERROR`` if that is over the budget."""
        measured = self._measured.get(app)
        if measured is None or measured.data is not stored:
            sizes = {part: part_bytes(part, value) for part, value in stored.items()}
            measured = self._measured[app] = _Measured(stored, sizes, sum(sizes.values()))
        before = total = measured.total
        delta: dict[str, int | None] = {}
        for part, value in changes.items():
            size = None if value is None else part_bytes(part, value)
            total += (size or 0) - measured.sizes.get(part, 0)
            delta[part] = size
        # Over the budget, what does not grow the data still goes (a delete must always work).
        if total > self.limit and total > before:
            self._pending.pop(app, None)
            raise AotuiError(
                ErrorCode.E_APP_ERROR,
                f"{app} ({name}) would store {total >> 20} MiB of data, over the "
                f"{self.limit >> 20} MiB an app may keep; the operation took no effect: the app "
                f"restarts from its last acknowledged data. Delete some of its data (or keep "
                f"less of it) before adding more.",
                {"outcome": Outcome.NOT_APPLIED, "stored_bytes": total, "limit_bytes": self.limit},
            )
        self._pending[app] = (delta, total)
        return total

    def adopted(self, app: str, stored: dict[str, Any]) -> None:
        """The changes last admitted for ``app`` are now its stored data ``stored``."""
        pending = self._pending.pop(app, None)
        measured = self._measured.get(app)
        if pending is None or measured is None:
            return
        delta, total = pending
        for part, size in delta.items():
            if size is None:
                measured.sizes.pop(part, None)
            else:
                measured.sizes[part] = size
        measured.data, measured.total = stored, total

    def forget(self, app: str) -> None:
        """Drop what is known of ``app`` (uninstalled)."""
        self._measured.pop(app, None)
        self._pending.pop(app, None)
