"""A snapshot as structured data (JSON-RPC ``snapshot`` with ``format: "json"``).

Read from the Markdown's structural tags, which no app can forge (CONTRACT §4), plus the ref
table behind the snapshot id: each app's views with their text, operations and refs. An operation
that waits for the user's confirmation when run says ``"confirm": true``, whether its markup marks
it or the desktop config's policy lists it (:func:`policy_confirms`).
"""

from __future__ import annotations

import contextlib
import html
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aotui.protocol.errors import AotuiError
from aotui.supervisor.desktop.controls import confirm_rule
from aotui.supervisor.desktop.snapshot import RefTable
from aotui.supervisor.desktop.view_tree import ViewRecord

if TYPE_CHECKING:
    from aotui.supervisor.desktop.desktop import Desktop

__all__ = ["Confirms", "policy_confirms", "snapshot_json"]

#: Whether the desktop's policy asks the user to confirm operation ``op_id`` of app ``app_id``.
Confirms = Callable[[str, str], bool]


def policy_confirms(desktop: Desktop) -> Confirms:
    """What ``desktop``'s policy confirms (``[policy."<manifest id>"].confirm``), as it stands."""
    apps = {app.app_id: app for app in desktop.apps}

    def confirms(app_id: str, op_id: str) -> bool:
        app = apps.get(app_id)
        if app is None:
            return False
        with contextlib.suppress(AotuiError):  # denied: it never runs, so it asks no one
            return confirm_rule(desktop.config.policy, app, op_id) is not None
        return False

    return confirms


_DESKTOP = re.compile(r'^<desktop since="([^"]*)"(?: removed="([^"]*)")?>$')
_OPEN = re.compile(r'^<(view|application) id="([^"]*)" name="([^"]*)">$')
_CLOSE = re.compile(r"^</(view|application|application_info)>$")


def snapshot_json(
    snapshot_id: str, markdown: str, refs: RefTable | None, confirms: Confirms | None = None
) -> dict[str, Any]:
    """``{snapshot_id, system_views, apps}``: every block of the snapshot with its parts.

    A diff (a pull ``since`` an id) also has ``since`` and ``removed`` (the ids gone).
    ``confirms``: the policy's confirmations (:func:`policy_confirms`), besides the markup's.
    """
    system: list[dict[str, Any]] = []
    apps: list[dict[str, Any]] = []
    app: dict[str, Any] | None = None
    block: dict[str, Any] | None = None
    lines: list[str] = []
    diff: dict[str, Any] = {}
    for line in markdown.splitlines():
        since = _DESKTOP.match(line)
        if since is not None:  # a diff: what changed since that id, and the ids gone
            diff = {"since": since[1], "removed": (since[2] or "").split()}
            continue
        opened = _OPEN.match(line)
        if opened is not None:
            kind, block_id, name = opened[1], opened[2], html.unescape(opened[3])
            if kind == "application":
                app = {"app": block_id, "name": name, "info": "", "views": [], "notes": []}
                apps.append(app)
            else:
                block = {"view": block_id, "name": name}
                (app["views"] if app is not None else system).append(block)
            lines = []
            continue
        if line == "<application_info>":
            lines = []
            continue
        closed = _CLOSE.match(line)
        if closed is None:
            lines.append(line)
            continue
        text = "\n".join(lines)
        if closed[1] == "view" and block is not None:
            block["markdown"] = text
            if app is not None:
                fragment = (refs or {}).get((app["app"], block["view"]))
                _add_refs(block, fragment, app["app"], confirms)
            block = None
        elif closed[1] == "application_info" and app is not None:
            app["info"] = text
        elif closed[1] == "application" and app is not None:
            if text.strip():
                app["notes"].append(text.strip())  # a marker standing in for what is not shown
            app = None
        lines = []
    return {"snapshot_id": snapshot_id, **diff, "system_views": system, "apps": apps}


def _add_refs(
    block: dict[str, Any], fragment: ViewRecord | None, app_id: str, confirms: Confirms | None
) -> None:
    if fragment is None:
        block.update(operations=[], refs={})
        return
    block["operations"] = [
        {
            "id": op.op_id,
            "label": op.label,
            "description": op.description,
            "args": op.args,
            "confirm": op.confirm or (confirms is not None and confirms(app_id, op.op_id)),
        }
        for op in fragment.operations
    ]
    block["refs"] = {
        ref: {"type": fragment.ref_types.get(ref, ""), "value": fragment.refs.get(ref)}
        for ref in fragment.ref_types
    }
