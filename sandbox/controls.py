"""How form controls read in a view: ``[input name="…" value="…"]``, ``[x]``, ``[select …]``.

An agent cannot type into a form, so controls are shown as state, not as widgets: what is filled
in, what is checked, what is selected. Acting on a form is what ``operation`` is for.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from lxml.etree import _Element as Element

from aotui.sandbox.flow import collapse

__all__ = ["control", "input_text", "select_text"]

_BUTTONS = frozenset({"submit", "button", "reset", "image"})
_SPACES = re.compile(r"\s+")


def control(name: str, fields: dict[str, str | None], *, disabled: bool = False) -> str:
    """A control as ``[name key="value" …]``; empty fields are left out, ``disabled`` last.

    Whitespace collapses as a browser shows an attribute's text, but for a field's ``value``,
    which keeps a space at its ends: text to copy must read as it is (``value="foo "``).
    """
    parts = [name]
    for key, raw in fields.items():
        value = _ends_kept(raw) if key == "value" else collapse(raw)
        if value:
            quoted = value.replace('"', '\\"')
            parts.append(f'{key}="{quoted}"')
    if disabled:
        parts.append("disabled")
    return "[" + " ".join(parts) + "]"


def _ends_kept(text: str | None) -> str:
    """``text`` with each whitespace run one space, those at its ends kept."""
    return _SPACES.sub(" ", text) if text else ""


def input_text(el: Element) -> str:
    """An ``<input>``: a box for checkboxes and radios, the caption of buttons, else its state."""
    kind = (el.get("type") or "text").lower()
    if kind == "hidden":
        return ""
    if kind in ("checkbox", "radio"):
        on = el.get("checked") is not None
        box = ("[x]", "[ ]") if kind == "checkbox" else ("(x)", "( )")
        return box[0] if on else box[1]
    if kind in _BUTTONS:
        return " " + collapse(el.get("value") or el.get("alt")) + " "
    value = "" if kind == "password" else el.get("value") or ""
    fields = {"type": kind if kind != "text" else "", "name": el.get("name"), "value": value}
    if not value.strip():
        fields["placeholder"] = el.get("placeholder")
    return control("input", fields, disabled=el.get("disabled") is not None)


def textarea_text(el: Element, content: str) -> str:
    """A ``<textarea>`` with its content as the value."""
    fields = {"name": el.get("name"), "value": content}
    if not content.strip():
        fields["placeholder"] = el.get("placeholder")
    return control("textarea", fields, disabled=el.get("disabled") is not None)


def select_text(el: Element, options: Sequence[Element], labels: Sequence[str]) -> str:
    """A ``<select>`` listing its options, the selected ones marked ``(selected)``."""
    chosen = [option.get("selected") is not None for option in options]
    if options and not any(chosen) and el.get("multiple") is None:
        chosen[0] = True  # a single select shows its first option when none is selected
    shown = " | ".join(
        f"{label} (selected)" if on else label for label, on in zip(labels, chosen, strict=True)
    )
    head = control("select", {"name": el.get("name")}, disabled=el.get("disabled") is not None)
    return head[:-1] + f": {shown}]" if shown else head
