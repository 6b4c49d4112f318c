"""What a client sees of an app, digested; and the drift and lie faults that change it.

Drift and lies change the supervisor's copy of a view (the view record a snapshot shows and a ref
resolves against), never the app's data: the app's next render replaces them, as a real list
that moved or a real wrong value would be replaced by the next true one. The digest of an app's
state is taken from its true render (a perturbed view counts as the one it replaced), so a
lie never looks like a lost effect.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import random
import re
from dataclasses import dataclass
from typing import Any

from aotui.supervisor.desktop.app_record import AppRecord
from aotui.supervisor.desktop.view_tree import ViewRecord

__all__ = ["Perturbation", "drift", "lie", "state_digest"]

_INDEX = re.compile(r"^(.*)\[(\d+)\]$")
_NUMBERED = re.compile(r"^(\s*)\d+\. ")


@dataclass(frozen=True)
class Perturbation:
    """One changed view: what it replaced, and what the fault did (the history's detail)."""

    #: The view's key in the app.
    key: str
    #: The view shown while the perturbation lasts.
    shown: ViewRecord
    #: The Markdown it replaced (the digest uses it while ``shown`` is on screen).
    true_markdown: str
    #: The fault's detail for the history.
    detail: dict[str, Any]


def state_digest(app: AppRecord, masks: dict[tuple[str, str], Perturbation]) -> str:
    """sha256 of the app's shown views (id and Markdown, id order), perturbations undone."""
    digest = hashlib.sha256()
    # As a snapshot shows them: a mounted view the tree no longer lists (its parent is gone) is
    # not shown, and must not count.
    listed = {node.view_id for node in app.views.nodes()}
    for view_id, view in app.views.shown():
        if view_id not in listed:
            continue
        markdown = view.markdown
        mask = masks.get((app.app_id, view.key))
        if mask is not None and app.views.rendered.get(view.key) is mask.shown:
            markdown = mask.true_markdown
        digest.update(f"{view_id}\n{markdown}\n\0".encode())
    return digest.hexdigest()


def _lists(view: ViewRecord) -> dict[str, int]:
    """Each list of a view and its length."""
    lengths: dict[str, int] = {}
    for ref in view.ref_types:
        match = _INDEX.match(ref)
        if match:
            name, index = match.group(1), int(match.group(2))
            lengths[name] = max(lengths.get(name, 0), index + 1)
    return lengths


def _blocks(markdown: str, name: str, count: int) -> tuple[list[str], list[tuple[int, int]]]:
    """The Markdown's lines and, per item of list ``name``, its (first, end) line span."""
    lines = markdown.split("\n")
    spans: list[tuple[int, int]] = []
    for index in range(count):
        marker = f":{name}[{index}])"
        start = next((n for n, line in enumerate(lines) if marker in line), None)
        if start is None:
            return lines, []
        indent = len(lines[start]) - len(lines[start].lstrip())
        end = start + 1
        while (
            end < len(lines)
            and lines[end].strip()
            and (len(lines[end]) - len(lines[end].lstrip()) > indent)
        ):
            end += 1
        spans.append((start, end))
    return lines, spans


def _relabel(block: list[str], name: str, old: int, new: int, prefix_from: str) -> list[str]:
    """An item's lines moved from index ``old`` to ``new`` (its ref and its list number)."""
    first = block[0].replace(f":{name}[{old}])", f":{name}[{new}])")
    number = _NUMBERED.match(prefix_from)
    if number and _NUMBERED.match(first):
        first = _NUMBERED.sub(number.group(0), first, count=1)
    return [first, *block[1:]]


def _choose_list(view: ViewRecord, rng: random.Random, least: int) -> tuple[str, int] | None:
    candidates = sorted((name, n) for name, n in _lists(view).items() if n >= least)
    return rng.choice(candidates) if candidates else None


def drift(
    view: ViewRecord, change: str, rng: random.Random
) -> tuple[ViewRecord, dict[str, Any]] | None:
    """The view with one list reordered, an item inserted or one removed; None: no list."""
    chosen = _choose_list(view, rng, 2 if change == "reorder" else 1)
    if chosen is None:
        return None
    name, count = chosen
    lines, spans = _blocks(view.markdown, name, count)
    order: list[int | None]
    if change == "reorder":
        order = [*range(count)][::-1]
    elif change == "insert":
        order = [None, *range(count)]
    else:
        order = [*range(1, count)]
    refs, keys, types = dict(view.refs), dict(view.keys), dict(view.ref_types)
    for index in range(count):
        for table in (refs, keys, types):
            table.pop(f"{name}[{index}]", None)
    for new, old in enumerate(order):
        source = 0 if old is None else old
        ref = f"{name}[{new}]"
        value = copy.deepcopy(view.refs.get(f"{name}[{source}]"))
        key = view.keys.get(f"{name}[{source}]", ref)
        if old is None:  # an item the agent never saw, like the one it copies
            value = _altered(value, "new")
            key = f"chaos-inserted-{rng.randrange(10**6)}"
        refs[ref], keys[ref] = value, key
        types[ref] = view.ref_types.get(f"{name}[{source}]", "")
    if spans:
        blocks = [lines[a:b] for a, b in spans]
        moved: list[str] = []
        for new, old in enumerate(order):
            source = 0 if old is None else old
            block = _relabel(
                blocks[source], name, source, new, lines[spans[min(new, len(spans) - 1)][0]]
            )
            if old is None:
                block = [block[0].replace("[", "[New: ", 1), *block[1:]]
            moved.extend(block)
        lines = lines[: spans[0][0]] + moved + lines[spans[-1][1] :]
    shown = dataclasses.replace(
        view, refs=refs, keys=keys, ref_types=types, markdown="\n".join(lines)
    )
    return shown, {"list": name, "change": change}


def _altered(value: Any, how: str) -> Any:
    """A plausible wrong version of an item's value."""
    if isinstance(value, str):
        return f"{value} ({how})" if how == "new" else _plausible(value)
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, dict):
        for field_name in ("title", "text", "name", "content", "preview"):
            if isinstance(value.get(field_name), str):
                return {**value, field_name: _altered(value[field_name], how)}
        for field_name, item in value.items():
            if field_name != "id" and isinstance(item, str | int | float):
                return {**value, field_name: _altered(item, how)}
    return value


def _plausible(text: str) -> str:
    """``text`` with a digit changed, else its words' order changed, else a letter doubled."""
    digits = [i for i, c in enumerate(text) if c.isdigit()]
    if digits:
        i = digits[-1]
        return text[:i] + str((int(text[i]) + 1) % 10) + text[i + 1 :]
    words = text.split()
    if len(words) > 1:
        return " ".join(words[1:] + words[:1])
    return text + text[-1:] if text else "?"


def lie(view: ViewRecord, rng: random.Random) -> tuple[ViewRecord, dict[str, Any]] | None:
    """The view with one list item (or entity) showing a plausible wrong value."""
    markdown = view.markdown
    refs = sorted(ref for ref, value in view.refs.items() if value is not None)
    if not refs:
        return None
    ref = rng.choice(refs)
    true = view.refs[ref]
    shown = _altered(true, "lie")
    if shown == true:
        return None
    for old, new in _changed_strings(true, shown):
        lines = markdown.split("\n")
        for n, line in enumerate(lines):
            if f":{ref})" in line and old in line:
                lines[n] = line.replace(old, new, 1)
                markdown = "\n".join(lines)
                break
    changed = dataclasses.replace(view, refs={**view.refs, ref: shown}, markdown=markdown)
    return changed, {"item": ref, "true": true, "shown": shown}


def _changed_strings(true: Any, shown: Any) -> list[tuple[str, str]]:
    if isinstance(true, str) and isinstance(shown, str):
        return [(true, shown)]
    if isinstance(true, dict) and isinstance(shown, dict):
        return [
            (str(true[k]), str(shown[k]))
            for k in true
            if k in shown and true[k] != shown[k] and str(true[k])
        ]
    return [(str(true), str(shown))]
