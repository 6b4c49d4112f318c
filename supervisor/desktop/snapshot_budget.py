"""Token budgets: a snapshot kept under ``max_tokens`` by shortening what was touched longest ago.

Tokens are :func:`~supervisor.desktop.tokens.estimate_tokens` (an upper estimate). Over the budget,
blocks give way in order of the agent's last touch (a mount, an execute; never touched first, then
the oldest): first their long lists become the first and last items with a line naming the items
left out and how to see them all, then (still over) a whole block body becomes one such line.
Tags and whole lines stay: a shortened snapshot has the structure of the full one, and every
shortening says so where it happened.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping

from aotui.supervisor.desktop.snapshot import Block
from aotui.supervisor.desktop.tokens import estimate_tokens

__all__ = ["fit_budget", "shorten_lists"]

#: ``1. [label](type:list_id[4])`` or ``- [label](type:list_id[4])``: one list item's first line.
_ITEM = re.compile(r"^( *)(?:\d+\.|-) \[.*\]\(([\w-]+):([\w-]+)\[(\d+)\]\)")
#: A run of more items than this is shortened to its first and last.
KEEP_ITEMS = 3
#: System Logs keep their newest entries when shortened.
KEEP_LOG_LINES = 3
#: What every shortening says (a visible marker wherever something gave way).
_GAVE_WAY = "not shown to keep within the token budget"


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def shorten_lists(body: str, where: str) -> str:
    """``body`` with each run of over :data:`KEEP_ITEMS` list items cut to its first and last."""
    lines = body.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        match = _ITEM.match(lines[i])
        if match is None:
            out.append(lines[i])
            i += 1
            continue
        indent, kind, list_id = len(match[1]), match[2], match[3]
        items: list[list[str]] = []
        while i < len(lines):
            start = _ITEM.match(lines[i])
            if start is None or len(start[1]) != indent or start[3] != list_id:
                break
            item = [lines[i]]
            i += 1
            while i < len(lines) and lines[i].strip() and _indent(lines[i]) > indent:
                item.append(lines[i])
                i += 1
            items.append(item)
        if len(items) <= KEEP_ITEMS:
            out.extend(line for item in items for line in item)
            continue
        first, last = _ITEM.match(items[1][0]), _ITEM.match(items[-2][0])
        assert first is not None
        assert last is not None
        out.extend(items[0])
        out.append(
            f"{' ' * indent}- … {len(items) - 2} more {kind} items ({list_id}[{first[4]}]–"
            f"[{last[4]}]) {_GAVE_WAY}; to see all, {where}"
        )
        out.extend(items[-1])
    return "\n".join(out)


def _shorten_log(body: str) -> str:
    lines = body.split("\n")
    entries = [i for i, line in enumerate(lines) if line.startswith("- [")]
    if len(entries) <= KEEP_LOG_LINES:
        return body
    cut = entries[-KEEP_LOG_LINES]
    gone = len(entries) - KEEP_LOG_LINES
    marker = f"- … {gone} earlier entries {_GAVE_WAY}"
    return "\n".join([*lines[: entries[0]], marker, *lines[cut:]])


def _where(block: Block) -> str:
    if block.app_id is None:
        return f"pull view {block.block_id} alone"
    if block.view_id is None:
        return f"pull app {block.app_id} alone"
    return f"pull view {block.view_id} of app {block.app_id} alone"


def _text_cost(block: Block) -> int:
    return estimate_tokens(block.tag) + estimate_tokens(block.body) + estimate_tokens(block.end)


def fit_budget(
    blocks: list[Block],
    max_tokens: int,
    touched: Mapping[str, float],
    compose: Callable[[list[Block]], str],
) -> tuple[list[Block], bool]:
    """``blocks`` shortened until ``compose(blocks)`` is estimated under ``max_tokens``.

    ``touched``: block id → when the agent last touched it. Returns the blocks and whether they
    fit (structure alone may not).
    """
    total = estimate_tokens(compose(blocks))
    if total <= max_tokens:
        return blocks, True
    order = sorted(
        (i for i, b in enumerate(blocks) if b.block_id != "view_0" and b.tag),
        key=lambda i: (touched.get(blocks[i].block_id, float("-inf")), -len(blocks[i].body)),
    )
    shortened = list(blocks)
    for step in ("lists", "whole"):
        for i in order:
            block = shortened[i]
            if step == "lists":
                log = block.block_id == "view_2"
                body = _shorten_log(block.body) if log else shorten_lists(block.body, _where(block))
            elif block.view_id is not None:  # an app view gives way whole, never the app's tree
                body = f"[aotui: {_GAVE_WAY}; to see it, {_where(block)}]"
            else:
                continue
            if body == block.body or len(body) >= len(block.body):
                continue
            before = _text_cost(block)
            shortened[i] = dataclasses.replace(block, body=body)
            total += _text_cost(shortened[i]) - before
            if total <= max_tokens:
                return shortened, estimate_tokens(compose(shortened)) <= max_tokens
    return shortened, False
