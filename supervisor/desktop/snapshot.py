"""Assembling the desktop snapshot (CONTRACT §4) from cached fragments; never re-renders.

The text is built from pieces that are already safe: fragments were sanitized when they arrived
(:mod:`supervisor.desktop.view_tree`), every other app-originated string (names, descriptions,
labels, log lines) passes :func:`~protocol.structure.sanitize` here, and every name written into a
structural tag goes through :func:`~supervisor.desktop.view_tree.attribute_text`.

Each app's part is bounded by a :class:`SnapshotBudget` (bytes, views, depth; and the desktop's
total): what exceeds it is replaced by a visible marker naming the app and what to do, so one app
can never make the snapshot fail or crowd out the others.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aotui.protocol.structure import sanitize
from aotui.supervisor.desktop.app_record import AppRecord, AppStatus
from aotui.supervisor.desktop.instructions import SYSTEM_INSTRUCTIONS
from aotui.supervisor.desktop.view_tree import ViewRecord, attribute_text

if TYPE_CHECKING:
    from aotui.supervisor.desktop.snapshot_cache import SnapshotCache

__all__ = [
    "AppPart",
    "Block",
    "RefTable",
    "Snapshot",
    "SnapshotBudget",
    "app_part",
    "applications_text",
    "build_snapshot",
    "compose",
    "format_time",
    "link_label",
    "log_text",
]

#: (app_id, view_id) → the view the agent saw, for resolving refs later.
RefTable = dict[tuple[str, str], ViewRecord]


@dataclass(frozen=True)
class Block:
    """One part of a snapshot between its tags: a system view, an app's info, one app view."""

    #: ``view_2`` (system view), ``app_0`` (its application_info), ``app_0/view_3`` (its view);
    #: a marker standing for what an app may not show is ``app_0/marker`` (``…/marker2`` …).
    block_id: str
    #: The opening tag line (``""`` for a bare marker line).
    tag: str
    #: The text between the tags, without a trailing newline.
    body: str
    #: The closing tag line (``""`` for a bare marker line).
    end: str
    #: The app whose ``<application>`` block holds it; ``None`` for the system views.
    app_id: str | None = None
    #: The view id inside that app (``None`` for application_info and markers).
    view_id: str | None = None


@dataclass(frozen=True)
class Snapshot:
    """The Markdown text of the desktop, the blocks it is made of and the ref table behind it."""

    markdown: str
    refs: RefTable
    #: Apps shown only in part (or as a marker) because they are over a budget.
    over_budget: tuple[str, ...] = ()
    #: The blocks of :attr:`markdown` in order (what diffs, focus and budgets select from).
    blocks: tuple[Block, ...] = ()
    #: ``app_N`` → its ``<application …>`` tag line.
    app_tags: dict[str, str] = field(default_factory=dict)


def format_time(timestamp: float) -> str:
    """``2026-11-22 10:00:01`` in local time."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp))


@dataclass(frozen=True)
class SnapshotBudget:
    """How much of a snapshot one app may take (defaults: ``configs/desktop.toml``)."""

    #: Bytes of one app's views together.
    app_bytes: int = 256 << 10
    #: Bytes of one view.
    view_bytes: int = 64 << 10
    #: Lines of one app's Application View Tree, and views shown.
    app_views: int = 64
    #: Deepest level of an app's view tree that is listed.
    view_depth: int = 16
    #: Bytes of the whole snapshot (clients refuse frames over 4 MiB).
    total_bytes: int = 3 << 20


def _brackets(text: str) -> str:
    return text.replace("[", "\\[").replace("]", "\\]")


def link_label(text: str) -> str:
    """App text made safe as a Markdown link label: one line, no structural tags or brackets."""
    return _brackets(sanitize(text, limit=200))


def log_text(text: str, hints: bool = False) -> str:
    """App text as one log line: no line breaks (an app cannot fake other entries), no links,
    no structural tags, bounded. ``hints=True``: a line the desktop composed (its app-originated
    parts sanitized then), whose own ``<context>`` command hints stay as written."""
    return _no_links(sanitize(text, limit=500, hints=hints))


def _no_links(text: str) -> str:
    # "](" is what makes "[Bank](application:app_0)" a link; "[Errno 13]" stays as it reads.
    return text.replace("](", "]\\(")


def _size(size: int) -> str:
    return f"{size / 1024:.0f} KB" if size < 1 << 20 else f"{size / (1 << 20):.1f} MB"


def applications_text(apps: Sequence[AppRecord]) -> str:
    """The System Applications view's text: each app with its description and state."""
    lines = ["# Installed Applications"]
    for app in apps:
        lines.append(f"- [{link_label(app.name)}](application:{app.app_id})")
        if app.manifest.description:
            description = _no_links(sanitize(app.manifest.description, limit=300))
            lines.append(f"    - Description: {description}")
        state = app.status.value
        if app.status is AppStatus.FAILED and app.last_exit:
            state += f" ({log_text(app.last_exit)}; open it to retry)"
        lines.append(f"    - State: {state}")
        if app.manifest.system:
            lines.append("    - System app: cannot be closed")
    return "\n".join(lines)


def _system_logs_text(entries: Iterable[tuple[float, str]]) -> str:
    # SystemLog.add sanitized each entry (an app's whole, the desktop's but for its hints).
    return "\n".join(_logs("System Logs", entries, "#", hints=True))


def _logs(
    title: str, entries: Iterable[tuple[float, str]], heading: str, hints: bool = False
) -> list[str]:
    lines = [f"{heading} {title}"]
    lines.extend(f"- [{format_time(ts)}] {log_text(text, hints)}" for ts, text in entries)
    if len(lines) == 1:
        lines.append("- (nothing yet)")
    return lines


#: The part of a marker that names the app (an app that writes it into its own view only gets
#: itself reported as over budget).
_MARKER = "({app}) is over its snapshot budget"


def _over(app: AppRecord, what: str) -> str:
    """The marker that stands in for what an app may not show."""
    return (
        f"[aotui: {what}; it is not shown. {link_label(app.name)} "
        f"{_MARKER.format(app=app.app_id)}: dismount views you do not need, or close it: "
        f"close --application {app.app_id}]"
    )


def _application(app: AppRecord, refs: RefTable, budget: SnapshotBudget) -> list[Block]:
    """The app's blocks; markers (``_over``) stand in for what is over its budget."""
    info = _logs("Operation Log", app.op_log, "##")
    info.append("## Application View Tree")
    nodes = app.views.nodes(budget.app_views, budget.view_depth)
    for node in nodes:
        flags = ", mounted" if node.mounted else ""
        if node.mounted and app.views.keys[node.view_id] in app.views.hidden:
            flags += ", hidden"
        indent = "    " * node.depth
        info.append(f"{indent}- [{link_label(node.label)}](view:{node.view_id}{flags})")
    unlisted = app.views.count_nodes() - len(nodes)
    if unlisted > 0:
        info.append(
            "- "
            + _over(
                app,
                f"{unlisted} more views (past {budget.app_views} views or depth "
                f"{budget.view_depth})",
            )
        )
    app_id = app.app_id
    blocks = [Block(app_id, "<application_info>", "\n".join(info), "</application_info>", app_id)]
    listed = {node.view_id for node in nodes}
    used = unshown = 0
    for view_id, view in app.views.shown():
        if view_id not in listed:
            unshown += 1  # past the views or depth budget: the marker above names them
            continue
        size = view.size
        if size > budget.view_bytes:
            body = _over(app, f"{view_id} is {_size(size)}, over {_size(budget.view_bytes)} a view")
        elif used + size > budget.app_bytes:
            body = _over(app, f"{view_id} would take the app past {_size(budget.app_bytes)}")
        else:
            refs[(app_id, view_id)] = view
            body = view.markdown.rstrip("\n")
            used += size
        tag = f'<view id="{view_id}" name="{attribute_text(view.name)}">'
        blocks.append(Block(f"{app_id}/{view_id}", tag, body, "</view>", app_id, view_id))
    if unshown:
        why = f"{unshown} more mounted views, past the views or depth budget"
        blocks.append(Block(f"{app_id}/marker", "", _over(app, why), "", app_id))
    return blocks


def _app_tag(app: AppRecord) -> str:
    return f'<application id="{app.app_id}" name="{attribute_text(app.name)}">'


def _collapsed(app: AppRecord, why: str) -> list[Block]:
    return [Block(f"{app.app_id}/marker", "", _over(app, why), "", app.app_id)]


def _text(block: Block) -> str:
    return "\n".join(part for part in (block.tag, block.body, block.end) if part)


def compose(
    blocks: Iterable[Block], app_tags: dict[str, str], desktop_tag: str = "<desktop>"
) -> str:
    """The snapshot text of ``blocks``: each app's in its ``<application>`` block."""
    parts = [desktop_tag]
    app_id: str | None = None
    for block in blocks:
        if block.app_id != app_id:
            if app_id is not None:
                parts.append("</application>")
            app_id = block.app_id
            if app_id is not None:
                parts.append(app_tags[app_id])
        parts.append(_text(block))
    if app_id is not None:
        parts.append("</application>")
    parts.append("</desktop>")
    return "\n".join(parts) + "\n"


@dataclass(frozen=True)
class AppPart:
    """One app's part of a snapshot, ready to assemble (and to cache while its inputs hold)."""

    blocks: tuple[Block, ...]
    refs: RefTable
    #: Its ``<application …>`` tag line.
    tag: str
    #: The whole ``<application>`` block as text (tag, blocks, closing tag; no final newline).
    text: str
    #: Bytes of :attr:`text` with its line break.
    size: int
    #: Whether a marker stands for something over its budget.
    over: bool


def app_part(
    app: AppRecord,
    budget: SnapshotBudget,
    on_failure: Callable[[AppRecord, Exception], None] | None = None,
) -> AppPart:
    """The app's part; a marker when its block cannot be built (``on_failure`` hears why)."""
    refs: RefTable = {}
    try:
        blocks = _application(app, refs, budget)
    except Exception as exc:  # noqa: BLE001 - one app's data must never cost the agent the desktop
        if on_failure is not None:
            on_failure(app, exc)
        blocks = _collapsed(app, f"its views could not be assembled ({type(exc).__name__})")
        refs = {}
    return _part(app, blocks, refs)


def _part(app: AppRecord, blocks: list[Block], refs: RefTable) -> AppPart:
    tag = _app_tag(app)
    text = "\n".join([tag, *(_text(block) for block in blocks), "</application>"])
    over = any(_MARKER.format(app=app.app_id) in block.body for block in blocks)
    return AppPart(tuple(blocks), refs, tag, text, len(text.encode()) + 1, over)


def build_snapshot(
    apps: Sequence[AppRecord],
    system_log: Iterable[tuple[float, str]],
    budget: SnapshotBudget | None = None,
    on_failure: Callable[[AppRecord, Exception], None] | None = None,
    cache: SnapshotCache | None = None,
) -> Snapshot:
    """The whole desktop: system views, then a block per running, shown app.

    An app whose block cannot be built (``on_failure`` hears why) or would take the snapshot past
    ``budget.total_bytes`` is shown as a marker instead: the snapshot itself always answers.
    With ``cache``, an app whose inputs did not change since the last pull costs a comparison.
    """
    from aotui.supervisor.desktop.snapshot_cache import SnapshotCache
    from aotui.supervisor.desktop.system_log import SystemLog

    budget = budget or SnapshotBudget()
    cache = cache or SnapshotCache()
    refs: RefTable = {}
    blocks = [
        Block(
            "view_0",
            '<view id="view_0" name="System Instructions">',
            SYSTEM_INSTRUCTIONS.rstrip("\n"),
            "</view>",
        ),
        Block(
            "view_1", '<view id="view_1" name="Applications">', cache.applications(apps), "</view>"
        ),
        Block(
            "view_2",
            '<view id="view_2" name="System Logs">',
            # Rendered once per change (a full log took 0.2 ms of every pull).
            system_log.rendered(_system_logs_text)
            if isinstance(system_log, SystemLog)
            else _system_logs_text(system_log),
            "</view>",
        ),
    ]
    texts = ["<desktop>", *(_text(block) for block in blocks)]
    used = sum(len(text.encode()) + 1 for text in texts[1:]) + len("<desktop>")
    over: list[str] = []
    app_tags: dict[str, str] = {}
    for app in apps:
        if app.status is not AppStatus.RUNNING:
            continue
        part = cache.part(app, budget, on_failure)
        if used + part.size > budget.total_bytes:
            why = f"its block would take the snapshot past {_size(budget.total_bytes)}"
            part = _part(app, _collapsed(app, why), {})
        refs.update(part.refs)
        used += part.size
        blocks.extend(part.blocks)
        texts.append(part.text)
        app_tags[app.app_id] = part.tag
        if part.over:
            over.append(app.app_id)
    cache.forget_others(app_tags)
    markdown = "\n".join([*texts, "</desktop>"]) + "\n"
    return Snapshot(markdown, refs, tuple(over), tuple(blocks), app_tags)
