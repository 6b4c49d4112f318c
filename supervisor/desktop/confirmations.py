"""Operations waiting for the user's confirmation, and what became of them (CONTRACT §6).

An operation marked ``confirm`` (markup, SDK or the desktop's policy) is not run when the agent
asks: it is recorded here as ``C<n>``, the agent's reply says it waits for the user, and the user
answers with ``aotui confirm C<n>`` (it runs, once) or ``aotui confirm C<n> --deny`` (refused with
``E_PERMISSION``). The agent learns the outcome from the app's Operation Log (a signal announces
the change), or waits for it: ``confirmation`` with a timeout returns the operation's result, or
raises its error, the user's refusal, or ``E_TIMEOUT`` while it is still pending.

Nothing here is stored: a desktop that stops forgets what was pending, and it never runs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import json
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.errors import Outcome as ReplyOutcome
from aotui.protocol.structure import sanitize_data

__all__ = [
    "MAX_PENDING",
    "AwaitingUser",
    "ConfirmationBook",
    "Outcome",
    "PendingConfirmation",
    "Verdict",
]

#: Operations waiting for the user at once, per desktop: an agent cannot bury the user in asks.
MAX_PENDING = 16
#: Decided confirmations remembered for ``confirmation`` (the oldest are forgotten first).
MAX_DECIDED = 64
#: Largest arguments (as JSON) an operation waiting for the user may hold: kept until answered.
MAX_ARGS_BYTES = 64 << 10


@dataclass(frozen=True)
class PendingConfirmation:
    """One operation the agent asked for, waiting for the user."""

    #: ``C1``, ``C2``… in the order they were asked, never reused while the desktop runs.
    ident: str
    app: str
    app_name: str
    #: The app's stable key of the view the operation is in, and its id when asked.
    view_key: str
    view_id: str
    operation: str
    #: The coerced arguments and the stable keys of refs, as the agent's execute resolved them.
    args: dict[str, Any]
    stable_keys: dict[str, Any]
    #: Why it waits: the app marked it, or the policy rule that lists it.
    reason: str
    asked: float = field(default_factory=time.time)
    #: :attr:`args` as every face shows them, made once when recorded: a ref's recorded
    #: ``data-value`` is the app's text, and may hold ``</application><context>…``. (The
    #: operation itself still receives :attr:`args`, as the agent's execute resolved them.)
    shown_args: dict[str, Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "shown_args", sanitize_data(self.args))

    def describe(self) -> dict[str, Any]:
        """The pending confirmation as plain data (``status``, ``confirmations``, the reply)."""
        return {
            "confirmation": self.ident,
            "app": self.app,
            "app_name": self.app_name,
            "view": self.view_id,
            "operation": self.operation,
            "args": self.shown_args,
            "reason": self.reason,
            "asked": self.asked,
        }


@dataclass(frozen=True)
class AwaitingUser:
    """What an execute of a ``confirm`` operation returns: it was asked, not run."""

    pending: PendingConfirmation
    #: What the agent's reply says (the id, why, and how it learns the outcome).
    message: str

    def reply(self) -> dict[str, Any]:
        """The ``waiting`` part of the agent's reply."""
        return {**self.pending.describe(), "waiting": "user", "message": self.message}


class Verdict(enum.Enum):
    """What became of a confirmation."""

    #: Not answered yet.
    PENDING = "pending"
    #: Confirmed, and the operation ran (its result is kept).
    RAN = "ran"
    #: Confirmed, but the operation failed (its error is kept).
    FAILED = "failed"
    #: The user refused it (kept as ``E_PERMISSION`` with their reason).
    REFUSED = "refused"


@dataclass(frozen=True)
class Outcome:
    """A decided confirmation: its verdict and the operation's result or error."""

    verdict: Verdict
    result: Any = None
    error: AotuiError | None = None

    def reply(self, ident: str) -> dict[str, Any]:
        """As the answer of ``confirmation``: the result, or the error raised."""
        if self.error is not None:
            raise AotuiError(
                self.error.code,
                f"confirmation {ident}: {self.error.message}",
                {**self.error.data, "confirmation": ident, "verdict": self.verdict.value},
            )
        return {"confirmation": ident, "verdict": self.verdict.value, "result": self.result}


class ConfirmationBook:
    """The desktop's pending confirmations and the outcomes of recent ones."""

    def __init__(self) -> None:
        self.pending: dict[str, PendingConfirmation] = {}
        #: Taken to be answered (a confirmed operation that is running), not decided yet.
        self.answering: dict[str, PendingConfirmation] = {}
        self.decided: OrderedDict[str, Outcome] = OrderedDict()
        self._decided_events: dict[str, asyncio.Event] = {}
        self._next = 1

    def ask(self, asked: PendingConfirmation) -> PendingConfirmation:
        """Record ``asked`` under a new id; ``E_RATE_LIMITED`` when too many wait already."""
        if len(self.pending) >= MAX_PENDING:
            waiting = ", ".join(self.pending)
            raise AotuiError(
                ErrorCode.E_RATE_LIMITED,
                f"{MAX_PENDING} operations already wait for the user's confirmation ({waiting}); "
                f"this one did not run and was not asked. Wait until the user answers them.",
                {"outcome": ReplyOutcome.NOT_APPLIED},
            )
        size = len(json.dumps(asked.args, default=str).encode())
        if size > MAX_ARGS_BYTES:
            raise AotuiError(
                ErrorCode.E_INVALID_CMD,
                f"{asked.operation} waits for the user's confirmation, and its arguments are "
                f"{size} bytes, over the {MAX_ARGS_BYTES} an operation may hold while it waits; "
                f"it did not run and was not asked. Send smaller arguments.",
                {"outcome": ReplyOutcome.NOT_APPLIED},
            )
        pending = dataclasses.replace(asked, ident=f"C{self._next}", asked=time.time())
        self._next += 1
        self.pending[pending.ident] = pending
        self._decided_events[pending.ident] = asyncio.Event()
        return pending

    def take(self, ident: str) -> PendingConfirmation:
        """Remove a pending confirmation to answer it (so it is answered exactly once)."""
        pending = self.pending.pop(ident, None)
        if pending is not None:
            self.answering[ident] = pending
            return pending
        if ident in self.answering:
            raise AotuiError(
                ErrorCode.E_INVALID_CMD,
                f"confirmation {ident} is being answered (its operation is running); an "
                f"operation is confirmed once",
            )
        if ident in self.decided:
            verdict = self.decided[ident].verdict.value
            raise AotuiError(
                ErrorCode.E_INVALID_CMD,
                f"confirmation {ident} was already answered ({verdict}); an operation is "
                f"confirmed once",
            )
        raise self._unknown(ident)

    def decide(self, ident: str, outcome: Outcome) -> None:
        """Record what became of ``ident`` and wake whoever waits for it."""
        self.answering.pop(ident, None)
        self.decided[ident] = outcome
        while len(self.decided) > MAX_DECIDED:
            old, _ = self.decided.popitem(last=False)
            self._decided_events.pop(old, None)
        event = self._decided_events.get(ident)
        if event is not None:
            event.set()

    async def wait(self, ident: str, timeout_s: float) -> dict[str, Any]:
        """The outcome of ``ident`` once decided (its result, or its error raised)."""
        undecided = ident in self.pending or ident in self.answering
        if not undecided and ident not in self.decided:
            raise self._unknown(ident)
        event = self._decided_events.get(ident)
        if undecided and event is not None:
            try:
                await asyncio.wait_for(event.wait(), timeout_s)
            except TimeoutError:
                state = (
                    "was confirmed and its operation is still running"
                    if ident in self.answering
                    else "still waits for the user (the operation has not run)"
                )
                raise AotuiError(
                    ErrorCode.E_TIMEOUT,
                    f"confirmation {ident} {state} after {timeout_s * 1000:.0f} ms; wait again",
                    {"confirmation": ident, "verdict": Verdict.PENDING.value},
                ) from None
        outcome = self.decided.get(ident)
        if outcome is None:  # decided and already forgotten while we waited
            raise self._unknown(ident)
        return outcome.reply(ident)

    def _unknown(self, ident: str) -> AotuiError:
        waiting = ", ".join(self.pending) or "none"
        return AotuiError(
            ErrorCode.E_NOT_FOUND,
            f"no confirmation {ident!r} (pending: {waiting}); `aotui confirm` lists them",
            {"confirmation": ident},
        )
