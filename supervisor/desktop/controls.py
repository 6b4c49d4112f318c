"""Seed 004's controls on an operation, checked before it runs: dialogs first, then policy.

- **Dialogs** (``modal`` on a view root, or ``View.modal`` in the SDK): while one is mounted, the
  rest of its app is shown collapsed behind one line naming it, and an operation outside it is
  refused with ``E_INVALID_CMD`` naming the dialog (an agent's mistake it can fix: dismount the
  dialog or act in it). With several dialogs mounted, the one with the highest view id decides.
- **Policy** (the desktop config's ``[policy."<manifest id>"]`` tables, ``"*"`` for every app
  without its own): ``allow`` lists the only operations that run, ``deny`` those that never run
  (``E_PERMISSION`` naming the rule), ``confirm`` those that wait for the user as if the app had
  marked them ``confirm``. Entries are operation ids or shell patterns (``delete_*``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from aotui.protocol.errors import AotuiError, ErrorCode, Outcome
from aotui.supervisor.desktop.app_record import AppRecord
from aotui.supervisor.manifest import parse_permission

__all__ = ["AppPolicy", "check_dialog", "confirm_rule", "parse_policy"]

#: The keys a ``[policy."<app>"]`` table may hold.
POLICY_KEYS = ("allow", "deny", "confirm", "net")


@dataclass(frozen=True)
class AppPolicy:
    """What the desktop config allows of one app's operations (or every app's, for ``*``)."""

    #: The app's manifest id, or ``*`` for every app that has no table of its own.
    app: str
    #: The only operations that may run; ``None`` allows every operation not denied.
    allow: tuple[str, ...] | None = None
    #: Operations that never run.
    deny: tuple[str, ...] = ()
    #: Operations that wait for the user's confirmation.
    confirm: tuple[str, ...] = ()
    #: Host patterns narrowing the app's ``net:http`` grants on this desktop: a request must
    #: match a grant of its manifest and one of these (a config narrows, never widens).
    net: tuple[str, ...] | None = None

    def rule(self, key: str) -> str:
        """The rule's name as the config writes it: ``policy."com.example.notes".deny``."""
        return f'policy."{self.app}".{key}'


def parse_policy(raw: Any) -> tuple[AppPolicy, ...]:
    """The ``policy`` table of a desktop config; ``E_INVALID_CMD`` naming what is wrong."""
    if not isinstance(raw, Mapping):
        raise _bad('config key "policy" must be a table of [policy."<manifest id>"] tables')
    policies: list[AppPolicy] = []
    for app, table in raw.items():
        where = f'policy."{app}"'
        if not isinstance(table, Mapping):
            raise _bad(f"{where} must be a table with allow, deny or confirm lists")
        unknown = sorted(set(table) - set(POLICY_KEYS))
        if unknown:
            raise _bad(
                f"{where} has unknown key(s) {', '.join(unknown)}; known: allow, deny, confirm, net"
            )
        lists = {
            key: _names(f"{where}.{key}", table[key]) for key in POLICY_KEYS[:3] if key in table
        }
        net = _hosts(f"{where}.net", table["net"]) if "net" in table else None
        policies.append(
            AppPolicy(app, lists.get("allow"), lists.get("deny", ()), lists.get("confirm", ()), net)
        )
    return tuple(policies)


def _names(where: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not all(
        isinstance(item, str) and item for item in value
    ):
        raise _bad(f"{where} must be a list of operation ids (or patterns such as delete_*)")
    return tuple(value)


def _hosts(where: str, value: Any) -> tuple[str, ...]:
    """Host patterns as a ``net:http:`` grant writes them (``example.com``, ``*.example.com``,
    ``*``); an empty list lets the app reach nothing."""
    if not isinstance(value, list | tuple) or not all(isinstance(item, str) for item in value):
        raise _bad(f"{where} must be a list of host patterns (example.com, *.example.com)")
    for host in value:
        try:
            parse_permission(f"net:http:{host}")
        except ValueError as exc:
            raise _bad(f"{where} lists {host[:100]!r}, not a host pattern: {exc}") from None
    return tuple(value)


def net_narrowing(policies: tuple[AppPolicy, ...], app: AppRecord) -> AppPolicy | None:
    """The policy narrowing ``app``'s ``net:http`` grants on this desktop, if one does."""
    policy = _policy_of(policies, app)
    return policy if policy is not None and policy.net is not None else None


def _bad(message: str) -> AotuiError:
    return AotuiError(ErrorCode.E_INVALID_CMD, message)


def _policy_of(policies: tuple[AppPolicy, ...], app: AppRecord) -> AppPolicy | None:
    own = next((p for p in policies if p.app == app.manifest.id), None)
    return own or next((p for p in policies if p.app == "*"), None)


def _matches(patterns: tuple[str, ...], op_id: str) -> str | None:
    return next((pattern for pattern in patterns if fnmatchcase(op_id, pattern)), None)


def confirm_rule(policies: tuple[AppPolicy, ...], app: AppRecord, op_id: str) -> str | None:
    """Refuse an operation the policy denies (``E_PERMISSION``); the confirm rule naming it."""
    policy = _policy_of(policies, app)
    if policy is None:
        return None
    who = f"{op_id} of {app.app_id} ({app.name}, {app.manifest.id})"
    denied = _matches(policy.deny, op_id)
    if denied is not None:
        raise _refused(
            f"{who} is denied by the desktop policy: {policy.rule('deny')} has {denied!r}"
        )
    if policy.allow is not None and _matches(policy.allow, op_id) is None:
        allowed = ", ".join(policy.allow) or "nothing"
        raise _refused(
            f"{who} is not allowed by the desktop policy: {policy.rule('allow')} lists only "
            f"{allowed}"
        )
    confirmed = _matches(policy.confirm, op_id)
    return None if confirmed is None else f"{policy.rule('confirm')} has {confirmed!r}"


def _refused(message: str) -> AotuiError:
    return AotuiError(
        ErrorCode.E_PERMISSION,
        f"{message}; it did not run. Only the user can change the policy (the desktop config).",
        {"outcome": Outcome.NOT_APPLIED},
    )


def check_dialog(app: AppRecord, view_id: str, op_id: str) -> None:
    """Refuse an operation outside the open dialog with ``E_INVALID_CMD`` naming the dialog."""
    dialog = app.views.dialog()
    if dialog is None or dialog[0] == view_id:
        return
    dialog_id, fragment = dialog
    raise AotuiError(
        ErrorCode.E_INVALID_CMD,
        f'a dialog is open in {app.app_id} ({app.name}): "{fragment.name}" '
        f"({dialog_id}); until it is dismounted only its own operations run, so {op_id} in "
        f"{view_id} did not run. Act in {dialog_id}, or close the dialog: "
        f'<context app_id="{app.app_id}">dismount --view {dialog_id}</context>',
        {"dialog": dialog_id, "outcome": Outcome.NOT_APPLIED},
    )
