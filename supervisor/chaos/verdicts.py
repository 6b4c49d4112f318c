"""What ``aotui chaos check`` says about a history: a verdict per named check, with evidence."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from aotui.supervisor.chaos.history import History

__all__ = ["EVIDENCE_LIMIT", "CheckName", "CheckReport", "Evidence", "Status", "Verdict"]

#: How many offending events a verdict quotes.
EVIDENCE_LIMIT = 5


class CheckName(enum.Enum):
    """The invariants a chaos history is judged by, in the order they are printed."""

    #: Every command has exactly one reply, and every reply a command.
    ONE_REPLY_PER_COMMAND = "one_reply_per_command"
    #: After a recovery an app shows what it showed at its last acknowledged command.
    NO_ACKNOWLEDGED_EFFECT_LOST = "no_acknowledged_effect_lost"
    #: A command in flight at a recovery, whose effect the recovered state shows, ran only once.
    APPLIED_AT_MOST_ONCE = "applied_at_most_once"
    #: A command answered with an error left its app's state unchanged.
    ERROR_MEANS_NO_EFFECT = "error_means_no_effect"
    #: Every ref resolved to the value the agent read for it.
    REFS_RESOLVED_AS_READ = "refs_resolved_as_read"
    #: No command used a value that only a lie showed.
    NOT_ACTED_ON_LIES = "not_acted_on_lies"
    #: Every injected fault was visible to the agent.
    FAULTS_VISIBLE = "faults_visible"
    #: The supervisor's memory stayed bounded.
    MEMORY_BOUNDED = "memory_bounded"
    #: Nothing of the run was left running after it.
    NOTHING_LEFT_RUNNING = "nothing_left_running"


class Status(enum.Enum):
    """A check's verdict."""

    #: The invariant holds.
    PASS = "pass"
    #: The invariant is broken; the run fails.
    FAIL = "fail"
    #: Findings worth reading that the plan does not count as a failure.
    NOTE = "note"
    #: Nothing in the history to judge (no samples, no states around an error, ...).
    SKIP = "skip"


@dataclass(frozen=True)
class Evidence:
    """One offending event: where it is in the history and what is wrong with it."""

    #: Its line in the history file.
    line: int
    #: Its time in seconds since the run's epoch.
    t: float
    #: What is wrong, in a sentence.
    text: str

    def to_json(self) -> dict[str, Any]:
        """As plain data for ``--json``."""
        return {"line": self.line, "t": self.t, "text": self.text}


@dataclass(frozen=True)
class Verdict:
    """The outcome of one check."""

    #: Which check.
    check: CheckName
    #: Its verdict.
    status: Status
    #: One line saying what was judged and found.
    summary: str
    #: The first offending events (at most :data:`EVIDENCE_LIMIT`).
    evidence: tuple[Evidence, ...] = ()
    #: How many offending events there were in all.
    count: int = 0

    def to_json(self) -> dict[str, Any]:
        """As plain data for ``--json``."""
        return {
            "check": self.check.value,
            "status": self.status.value,
            "summary": self.summary,
            "count": self.count,
            "evidence": [e.to_json() for e in self.evidence],
        }


@dataclass(frozen=True)
class CheckReport:
    """Every verdict on one history."""

    #: The history judged.
    history: History
    #: One verdict per :class:`CheckName`, in its order.
    verdicts: tuple[Verdict, ...]

    @property
    def ok(self) -> bool:
        """Whether no check failed."""
        return all(v.status is not Status.FAIL for v in self.verdicts)

    def to_json(self) -> dict[str, Any]:
        """As plain data for ``--json``."""
        return {
            "ok": self.ok,
            "history": str(self.history.path),
            "events": len(self.history.events),
            "truncated_line": self.history.truncated_line,
            "checks": [v.to_json() for v in self.verdicts],
        }
