"""Assembling the desktop snapshot (CONTRACT §4) from cached fragments; never re-renders.

The text is built from pieces that are already escaped: fragments were escaped when they arrived
(:mod:`supervisor.view_tree`), and every name written into a structural tag goes through
:func:`~supervisor.view_tree.attribute_text`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from aotui.protocol.messages import ViewFragment
from aotui.protocol.structure import escape_structural
from aotui.supervisor.app_record import AppRecord, AppStatus
from aotui.supervisor.instructions import SYSTEM_INSTRUCTIONS
from aotui.supervisor.view_tree import attribute_text

__all__ = ["RefTable", "Snapshot", "build_snapshot", "format_time", "link_label"]

#: (app_id, view_id) → the fragment the agent saw, for resolving refs later.
RefTable = dict[tuple[str, str], ViewFragment]


@dataclass(frozen=True)
class Snapshot:
    """The Markdown text of the desktop and the ref table behind it."""

    markdown: str
    refs: RefTable


def format_time(timestamp: float) -> str:
    """``2026-11-22 10:00:01`` in local time."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp))


def link_label(text: str) -> str:
    """App text made safe as a Markdown link label: no structural tags, no stray brackets."""
    return escape_structural(text).replace("[", "\\[").replace("]", "\\]")


def _applications(apps: Sequence[AppRecord]) -> str:
    lines = ["# Installed Applications"]
    for app in apps:
        lines.append(f"- [{link_label(app.name)}](application:{app.app_id})")
        if app.manifest.description:
            lines.append(f"    - Description: {escape_structural(app.manifest.description)}")
        state = app.status.value
        if app.status is AppStatus.FAILED and app.last_exit:
            state += f" ({app.last_exit}; open it to retry)"
        lines.append(f"    - State: {state}")
        if app.manifest.system:
            lines.append("    - System app: cannot be closed")
    return "\n".join(lines)


def one_line(text: str, limit: int = 500) -> str:
    """App text as one log line: no line breaks (an app cannot fake other entries), bounded."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _logs(title: str, entries: Iterable[tuple[float, str]], heading: str) -> list[str]:
    lines = [f"{heading} {title}"]
    lines.extend(
        f"- [{format_time(ts)}] {escape_structural(one_line(text))}" for ts, text in entries
    )
    if len(lines) == 1:
        lines.append("- (nothing yet)")
    return lines


def _application(app: AppRecord, refs: RefTable) -> str:
    parts = [
        f'<application id="{app.app_id}" name="{attribute_text(app.name)}">',
        "<application_info>",
    ]
    parts.extend(_logs("Operation Log", app.op_log, "##"))
    parts.append("## Application View Tree")
    for node in app.views.nodes():
        flags = ", mounted" if node.mounted else ""
        if node.mounted and app.views.keys[node.view_id] in app.views.hidden:
            flags += ", hidden"
        indent = "    " * node.depth
        parts.append(f"{indent}- [{link_label(node.label)}](view:{node.view_id}{flags})")
    parts.append("</application_info>")
    for view_id, fragment, markdown in app.views.shown():
        refs[(app.app_id, view_id)] = fragment
        parts.append(f'<view id="{view_id}" name="{attribute_text(fragment.name)}">')
        parts.append(markdown.rstrip("\n"))
        parts.append("</view>")
    parts.append("</application>")
    return "\n".join(parts)


def build_snapshot(apps: Sequence[AppRecord], system_log: Iterable[tuple[float, str]]) -> Snapshot:
    """The whole desktop: system views, then a block per running, shown app."""
    refs: RefTable = {}
    parts = [
        "<desktop>",
        '<view id="view_0" name="System Instructions">',
        SYSTEM_INSTRUCTIONS.rstrip("\n"),
        "</view>",
        '<view id="view_1" name="Applications">',
        _applications(apps),
        "</view>",
        '<view id="view_2" name="System Logs">',
        "\n".join(_logs("System Logs", system_log, "#")),
        "</view>",
    ]
    for app in apps:
        if app.status is AppStatus.RUNNING:
            parts.append(_application(app, refs))
    parts.append("</desktop>")
    return Snapshot("\n".join(parts) + "\n", refs)
