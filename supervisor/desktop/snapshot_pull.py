"""What one pull shows (CONTRACT §4 "Diffs and focus"): focus, diff ``since`` a snapshot, budget.

The snapshot is always assembled whole and its ref table recorded whole, so every pull's id
resolves the refs of every shown view — also of views this pull left out because they did not
change, were out of focus or gave way to the token budget. Only the text differs:

- ``app`` / ``view``: only that app's block, or one view of it;
- ``instructions=False``: without the System Instructions (an MCP server sends them once, as its
  instructions; other clients ask for them once per session);
- ``since``: only the blocks whose text changed since that snapshot, changed blocks with their
  unchanged runs folded (:mod:`~supervisor.desktop.snapshot_diff`), and the ids of what is gone in
  the opening tag: ``<desktop since="T12" removed="app_1 app_0/view_4">``;
- ``max_tokens``: shortened by :func:`~supervisor.desktop.snapshot_budget.fit_budget`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from aotui.protocol.api import SnapshotParams
from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.supervisor.desktop.snapshot import Block, Snapshot, compose
from aotui.supervisor.desktop.snapshot_budget import fit_budget
from aotui.supervisor.desktop.snapshot_diff import FoldBudget, fold_unchanged

__all__ = ["MIN_TOKENS", "PullOptions", "Pulled", "select"]

#: The smallest token budget accepted (below it even the tags would not fit).
MIN_TOKENS = 200


def _bad(message: str) -> AotuiError:
    return AotuiError(ErrorCode.E_INVALID_CMD, message)


@dataclass(frozen=True)
class PullOptions:
    """How much of the desktop one pull shows."""

    #: Only what changed since this snapshot id.
    since: str | None = None
    #: Only this app's block (``app_N`` or manifest id).
    app: str | None = None
    #: Only this view of :attr:`app`.
    view: str | None = None
    #: Keep the text under this many (estimated) tokens.
    max_tokens: int | None = None
    #: Include the System Instructions view.
    instructions: bool = True

    @classmethod
    def of(cls, call: SnapshotParams) -> PullOptions:
        """The options of a ``snapshot`` call (its values checked by its declaration)."""
        if call.view is not None and call.app is None:
            raise _bad("snapshot view needs app too: view ids are per app (app app_0, view view_3)")
        instructions = call.include_instructions is not False
        return cls(call.since, call.app, call.view, call.max_tokens, instructions)


@dataclass(frozen=True)
class Pulled:
    """One pull's text and what the agent has after reading it (for a later diff)."""

    markdown: str
    #: Block id → its text as the agent now has it (a diff's base merged with its changes).
    seen: dict[str, str]


def _in_scope(block_id: str, options: PullOptions) -> bool:
    """Whether a block of the base is one this pull speaks about (focus narrows it)."""
    if options.app is None:
        return options.instructions or block_id != "view_0"
    app, _, view = block_id.partition("/")
    if options.view is not None:
        return app == options.app and view == options.view
    return app == options.app


def _focus(blocks: tuple[Block, ...], options: PullOptions) -> list[Block]:
    if options.app is None:
        return [b for b in blocks if options.instructions or b.block_id != "view_0"]
    mine = [b for b in blocks if b.app_id == options.app]
    if not mine:
        raise AotuiError(
            ErrorCode.E_NOT_FOUND,
            f"{options.app} has no block in the snapshot (not running, collapsed, or no such "
            f"app); pull without app to see the Applications list",
            {"app": options.app},
        )
    if options.view is None:
        return mine
    view = [b for b in mine if b.view_id == options.view]
    if not view:
        shown = ", ".join(b.view_id for b in mine if b.view_id) or "none"
        raise AotuiError(
            ErrorCode.E_NOT_FOUND,
            f"{options.app} shows no view {options.view} (shown: {shown}); mount it first",
            {"app": options.app, "view": options.view},
        )
    return view


def _removed(base: Mapping[str, str], now: set[str], options: PullOptions) -> list[str]:
    """Ids of what the base showed that this pull's scope no longer has (a gone app whole)."""
    gone = [b for b in base if b not in now and _in_scope(b, options)]
    apps_now = {b.partition("/")[0] for b in now}
    apps_gone = sorted({b.partition("/")[0] for b in gone if b.startswith("app_")} - apps_now)
    views = [b for b in gone if "/" in b and b.partition("/")[0] not in apps_gone]
    return apps_gone + [b for b in views if not b.rpartition("/")[2].startswith("marker")]


def select(
    snap: Snapshot,
    options: PullOptions,
    base: Mapping[str, str] | None = None,
    touched: Mapping[str, float] | None = None,
) -> Pulled:
    """The text of ``snap`` this pull shows (``base``: what the agent had after ``since``)."""
    blocks = _focus(snap.blocks, options)
    full = {block.block_id: block.body for block in blocks}
    if options == PullOptions():  # the whole snapshot, as assembled: not joined a second time
        return Pulled(snap.markdown, full)
    desktop_tag = "<desktop>"
    seen = dict(full)
    if base is not None and options.since is not None:
        changed = []
        budget = FoldBudget()  # one per pull: the folding CPU an app's views can cost is bounded
        for block in blocks:
            before = base.get(block.block_id)
            if before == block.body:
                continue
            if before is not None and block.tag:
                folded = fold_unchanged(before, block.body, options.since, budget)
                if folded is not None:
                    block = dataclasses.replace(block, body=folded)
            changed.append(block)
        removed = _removed(base, set(full), options)
        seen = {k: v for k, v in base.items() if k in full or not _in_scope(k, options)}
        seen.update(full)
        blocks = changed
        desktop_tag = f'<desktop since="{options.since}"'
        desktop_tag += f' removed="{" ".join(removed)}">' if removed else ">"
    if options.max_tokens is not None:

        def text(chosen: list[Block]) -> str:
            return compose(chosen, snap.app_tags, desktop_tag)

        fitted, fits = fit_budget(blocks, options.max_tokens, touched or {}, text)
        for sent, shown in zip(blocks, fitted, strict=True):
            if shown.body != sent.body and sent.body == full.get(sent.block_id):
                seen[shown.block_id] = shown.body  # the agent saw it shortened
        if not fits:
            note = (
                f"[aotui: even shortened, this pull is over max_tokens {options.max_tokens}; "
                f"pull one app or view alone]"
            )
            fitted.insert(0, Block("budget", "", note, ""))
        blocks = fitted
    return Pulled(compose(blocks, snap.app_tags, desktop_tag), seen)
