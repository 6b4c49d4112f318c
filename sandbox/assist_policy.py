"""An agent-aware page's catalog policy (seed 004), applied only where the desktop trusts it.

A page declares its allow-list catalog as JSON in
``<script type="application/json" data-assist-catalog>``::

    {"modals": [{"modalId": "modal:deleteAccount",
                 "policy": {"requiresUserConfirm": true,
                            "allowedActions": ["modal.open", "modal.close"]}}],
     "routes": [{"routeId": "route:checkout", "allowedActions": ["navigate"]}]}

An entry (of ``routes``, ``views``, ``panels`` or ``modals``, its rules at its top level or under
``policy``) governs an action when the page shows it — the active route or modal, a shown view
or panel — or when the action names it (``modal_open --modal``, ``navigate --route``).
``allowedActions`` lists the only actions allowed there (others: ``E_PERMISSION`` naming the
entry); ``requiresUserConfirm`` makes each action there wait for the user's confirmation, but
the ways out (``modal.close``, a ``navigate`` elsewhere).

The page's text is its own: the policy comes from it only when the tab's origin is one of the
desktop config's ``trusted_origins`` (anyone's page could otherwise make the desktop speak to
the user in its words). Actions that only read the page (``find``, ``wait_for``,
``capabilities``) are never governed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.structure import sanitize

__all__ = ["CATALOG_SCRIPT", "Catalog", "Rule", "action_of", "origin_of", "parse_catalog"]

#: Evaluated in the page's isolated world: the catalog's text, or null (at most 64 KiB read).
CATALOG_SCRIPT = (
    "(() => { const s = document.querySelector('script[data-assist-catalog]');"
    " return s ? s.textContent.slice(0, 65536) : null; })()"
)
#: The catalog's kinds, with the key naming an entry's id and the page state that shows it.
_KINDS = {"routes": "routeId", "views": "viewId", "panels": "panelId", "modals": "modalId"}
#: Operations that change nothing: never governed by a catalog.
_READS = frozenset({"find", "wait_for", "capabilities", "new_tab", "close_tab", "set_viewport"})
_ENTRIES = 256


@dataclass(frozen=True)
class Rule:
    """One catalog entry's policy."""

    kind: str
    entry_id: str
    allowed: tuple[str, ...] | None
    confirm: bool

    def name(self) -> str:
        return f"{self.kind}[{self.entry_id}]"


@dataclass(frozen=True)
class Catalog:
    """A trusted page's catalog: its rules, and the origin that declared them."""

    origin: str
    rules: tuple[Rule, ...]

    def check(self, action: str, state: Mapping[str, Any], named: Mapping[str, str]) -> str | None:
        """Refuse ``action`` if an entry governing it does not allow it (``E_PERMISSION``);
        the reason to ask the user first if one requires confirmation, else ``None``.

        ``state``: the page's active ``route``, ``modal``, shown ``views`` and ``panels``;
        ``named``: the ids the action itself names (``{"modals": "modal:x"}``).
        """
        asks = []
        for rule in self._governing(state, named):
            if rule.allowed is not None and action not in rule.allowed:
                allowed = ", ".join(rule.allowed) or "nothing"
                raise AotuiError(
                    ErrorCode.E_PERMISSION,
                    f"{action} is not allowed by the page's catalog (trusted origin "
                    f"{self.origin}): {rule.name()} allows only {allowed}; it did not run",
                    {"rule": rule.name()},
                )
            if rule.confirm and not _leaves(action, rule, named):
                asks.append(rule.name())
        if not asks:
            return None
        return (
            f"the page's catalog (trusted origin {self.origin}) says {', '.join(asks)} "
            f"requires the user's confirmation for {action}"
        )

    def _governing(self, state: Mapping[str, Any], named: Mapping[str, str]) -> Iterable[Rule]:
        shown = {
            "routes": {state.get("route")},
            "modals": {state.get("modal")},
            "views": set(state.get("views") or ()),
            "panels": set(state.get("panels") or ()),
        }
        for rule in self.rules:
            if rule.entry_id in shown[rule.kind] or named.get(rule.kind) == rule.entry_id:
                yield rule


def _leaves(action: str, rule: Rule, named: Mapping[str, str]) -> bool:
    """Whether ``action`` leaves ``rule``'s entry (closing its modal, navigating elsewhere):
    the way out never waits for the user."""
    if action == "modal.close":
        return rule.kind == "modals"
    return action == "navigate" and named.get(rule.kind) != rule.entry_id


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` of ``url``, lower case (``""`` when it has none)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return ""
    return f"{parts.scheme}://{parts.netloc.rsplit('@', 1)[-1].lower()}"


def action_of(operation: str) -> str | None:
    """Seed 004's name of a Browser operation's action; ``None`` for one that only reads."""
    if operation in _READS:
        return None
    if operation in ("back", "forward", "reload"):
        return "navigate"
    return {"modal_open": "modal.open", "modal_close": "modal.close"}.get(operation, operation)


def parse_catalog(text: str, origin: str) -> Catalog:
    """The catalog a trusted page declares; ``E_APP_ERROR`` naming what is wrong with it (the
    page's own mistake: refusing to act is safer than acting without its policy)."""
    try:
        raw: Any = json.loads(text)
    except ValueError as exc:
        raise _bad(origin, f"it is not JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise _bad(origin, "it is not a JSON object")
    rules = []
    for kind, key in _KINDS.items():
        entries = raw.get(kind, [])
        if not isinstance(entries, list):
            raise _bad(origin, f"{kind} is not a list")
        for entry in entries[:_ENTRIES]:
            rules.append(_rule(origin, kind, key, entry))
    return Catalog(origin, tuple(rules))


def _rule(origin: str, kind: str, key: str, entry: Any) -> Rule:
    if not isinstance(entry, dict) or not isinstance(entry.get(key), str):
        raise _bad(origin, f"an entry of {kind} has no {key} string")
    policy = entry.get("policy", {})
    if not isinstance(policy, dict):
        raise _bad(origin, f"{kind}[{entry[key]}].policy is not an object")
    merged = {**entry, **policy}
    allowed = merged.get("allowedActions")
    if allowed is not None and (
        not isinstance(allowed, list) or not all(isinstance(a, str) for a in allowed)
    ):
        raise _bad(origin, f"{kind}[{entry[key]}].allowedActions is not a list of strings")
    confirm = merged.get("requiresUserConfirm", False)
    if not isinstance(confirm, bool):
        raise _bad(origin, f"{kind}[{entry[key]}].requiresUserConfirm is not true or false")
    return Rule(
        kind,
        sanitize(entry[key], limit=100),
        None if allowed is None else tuple(sanitize(a, limit=40) for a in allowed[:64]),
        confirm,
    )


def _bad(origin: str, problem: str) -> AotuiError:
    return AotuiError(
        ErrorCode.E_APP_ERROR,
        f"the page's catalog (trusted origin {origin}) cannot be read: {problem}; nothing ran. "
        f'Fix its <script type="application/json" data-assist-catalog>',
    )
