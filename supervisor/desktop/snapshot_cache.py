"""Per-app snapshot parts kept between pulls, so a pull of an unchanged desktop only assembles.

An app's part (its blocks, refs and text: :class:`~supervisor.desktop.snapshot.AppPart`) is a
function of a few inputs held on its :class:`~supervisor.desktop.app_record.AppRecord`: its
manifest, id and status, its Operation Log, and its view tree (its view records, view ids, hidden
views). The cache keeps each app's part with those inputs as they were and rebuilds it when any
differs. The inputs are compared, not tracked: every view record and log entry is replaced, never
changed in place, so an unchanged one compares by identity
and the comparison costs a few microseconds an app, while a change anywhere (a new fragment, a
mount, a hide, a log line) is seen without each of those places having to say so.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

from aotui.supervisor.desktop.app_record import AppRecord
from aotui.supervisor.desktop.snapshot import AppPart, SnapshotBudget, app_part, applications_text

__all__ = ["SnapshotCache"]


def _inputs(app: AppRecord, budget: SnapshotBudget) -> tuple[Any, ...]:
    """Everything an app's part is made from (see the module docstring)."""
    views = app.views
    return (
        app,
        app.app_id,
        app.manifest,
        app.status,
        budget,
        tuple(app.op_log),
        tuple(views.rendered.items()),
        tuple(views.ids.items()),
        frozenset(views.hidden),
    )


def _listing(apps: Sequence[AppRecord]) -> tuple[Any, ...]:
    """Everything the Applications view is made from."""
    return tuple((app, app.app_id, app.manifest, app.status, app.last_exit) for app in apps)


class SnapshotCache:
    """The last part built for each shown app, and the last Applications view, with inputs."""

    def __init__(self) -> None:
        self._parts: dict[str, tuple[tuple[Any, ...], AppPart]] = {}
        self._applications: tuple[tuple[Any, ...], str] | None = None
        #: Parts built (not reused) so far: what a test asks to see that a change was noticed.
        self.built = 0

    def part(
        self,
        app: AppRecord,
        budget: SnapshotBudget,
        on_failure: Callable[[AppRecord, Exception], None] | None = None,
    ) -> AppPart:
        """The app's part: the cached one while its inputs are equal, else built anew."""
        try:
            inputs: tuple[Any, ...] | None = _inputs(app, budget)
        except Exception:  # noqa: BLE001 - broken data: app_part shows a marker, reports it
            inputs = None
        cached = self._parts.get(app.app_id)
        if cached is not None and inputs is not None and cached[0] == inputs:
            return cached[1]
        failed: list[Exception] = []

        def failure(record: AppRecord, exc: Exception) -> None:
            failed.append(exc)
            if on_failure is not None:
                on_failure(record, exc)

        built = app_part(app, budget, failure)
        self.built += 1
        if failed or inputs is None:  # not kept: the next pull tries again
            self._parts.pop(app.app_id, None)
        else:
            self._parts[app.app_id] = (inputs, built)
        return built

    def applications(self, apps: Sequence[AppRecord]) -> str:
        """The Applications view's text, built again only when an app's entry changed."""
        listing = _listing(apps)
        if self._applications is None or self._applications[0] != listing:
            self._applications = (listing, applications_text(apps))
        return self._applications[1]

    def forget_others(self, shown: Collection[str]) -> None:
        """Drop the parts of apps not shown in this pull (closed, collapsed or gone)."""
        for app_id in [app_id for app_id in self._parts if app_id not in shown]:
            del self._parts[app_id]
