"""``aotui chaos check HISTORY``: judge a chaos history against the invariants of docs/chaos.md.

Each rule is a named check returning a :class:`Verdict` with evidence: the first few offending
events, each with its line number and time. ``main`` prints them as a table (or JSON) and exits 0
only when none failed.
"""

from __future__ import annotations

import argparse
import enum
import json
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aotui.protocol.errors import AotuiError
from aotui.supervisor.chaos.history import (
    CommandEvent,
    Event,
    FaultEvent,
    FaultPhase,
    FaultType,
    History,
    Outcome,
    RecoveryEvent,
    ReplyEvent,
    RunEvent,
    RunPhase,
    SampleEvent,
    StateBasis,
    StateEvent,
    VisibleEvent,
    load_history,
)

__all__ = [
    "EXIT_CHECK_FAILED",
    "CheckName",
    "CheckReport",
    "Evidence",
    "Status",
    "Verdict",
    "add_arguments",
    "check_history",
    "main",
]

_E = TypeVar("_E", bound=Event)

#: Exit status when the history was read but a check failed.
EXIT_CHECK_FAILED = 1
#: How many offending events a verdict quotes.
EVIDENCE_LIMIT = 5
#: Seconds after the run's start before the memory baseline is taken (imports, first renders).
WARM_UP_S = 5.0
#: The memory rule: last RSS ≤ baseline × (1 + MEMORY_GROWTH) + MEMORY_SLACK.
MEMORY_GROWTH = 0.10
MEMORY_SLACK = 16 * 1024 * 1024
#: The plan key that turns "the agent acted on a lie" from a note into a failure.
LIES_MUST_NOT_BE_ACTED_ON = "lies_must_not_be_acted_on"


class CheckName(enum.Enum):
    """The invariants a chaos history is judged by, in the order they are printed."""

    #: Every command has exactly one reply, and every reply a command.
    ONE_REPLY_PER_COMMAND = "one_reply_per_command"
    #: After a recovery an app shows what it showed at its last acknowledged command.
    NO_ACKNOWLEDGED_EFFECT_LOST = "no_acknowledged_effect_lost"
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


@dataclass
class _Findings:
    """Offending events collected by one check."""

    items: list[Evidence] = field(default_factory=list)

    def add(self, event: Event, text: str) -> None:
        self.items.append(Evidence(event.line, event.t, text))

    def verdict(self, check: CheckName, summary: str, status: Status | None = None) -> Verdict:
        if status is None:
            status = Status.FAIL if self.items else Status.PASS
        ordered = sorted(self.items, key=lambda e: (e.t, e.line))
        return Verdict(check, status, summary, tuple(ordered[:EVIDENCE_LIMIT]), len(ordered))


@dataclass(frozen=True)
class _Run:
    """A history's events indexed for the checks."""

    events: tuple[Event, ...]
    commands: dict[str, CommandEvent]
    replies: dict[str, list[ReplyEvent]]
    states: dict[str, list[StateEvent]]
    injects: dict[str, FaultEvent]
    clears: dict[str, FaultEvent]
    plan: dict[str, Any]

    @classmethod
    def index(cls, history: History) -> _Run:
        # Several processes append to one file: order by time, then by line.
        events = tuple(sorted(history.events, key=lambda e: (e.t, e.line)))
        commands: dict[str, CommandEvent] = {}
        replies: dict[str, list[ReplyEvent]] = defaultdict(list)
        states: dict[str, list[StateEvent]] = defaultdict(list)
        injects: dict[str, FaultEvent] = {}
        clears: dict[str, FaultEvent] = {}
        plan: dict[str, Any] = {}
        for event in events:
            if isinstance(event, CommandEvent):
                commands.setdefault(event.id, event)
            elif isinstance(event, ReplyEvent):
                replies[event.id].append(event)
            elif isinstance(event, StateEvent):
                states[event.app].append(event)
            elif isinstance(event, FaultEvent):
                target = injects if event.phase is FaultPhase.INJECT else clears
                target.setdefault(event.fault, event)
            elif isinstance(event, RunEvent) and event.phase is RunPhase.START:
                plan = event.plan
        return cls(events, commands, dict(replies), dict(states), injects, clears, plan)

    def of(self, kind: type[_E]) -> list[_E]:
        return [e for e in self.events if isinstance(e, kind)]

    def app_of(self, reply: ReplyEvent) -> str | None:
        command = self.commands.get(reply.id)
        return command.app if command is not None else None


def _quote(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON values (``1`` and ``true`` differ, key order does not matter)."""
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def check_one_reply_per_command(run: _Run) -> Verdict:
    """Every command has exactly one reply; every reply answers a command."""
    found = _Findings()
    seen: set[str] = set()
    for command in run.of(CommandEvent):
        if command.id in seen:
            found.add(command, f"command id {command.id!r} used twice")
        seen.add(command.id)
        if not run.replies.get(command.id):
            found.add(command, f"command {command.id} has no reply")
    for command_id, replies in run.replies.items():
        if command_id not in run.commands:
            for reply in replies:
                found.add(reply, f"reply to {command_id!r}, which no command has")
        else:
            for reply in replies[1:]:
                found.add(
                    reply, f"second reply to command {command_id} (first at line {replies[0].line})"
                )
    summary = f"{len(run.commands)} commands, {sum(map(len, run.replies.values()))} replies"
    return found.verdict(CheckName.ONE_REPLY_PER_COMMAND, summary)


def _last_state(
    states: Sequence[StateEvent], before: float, bases: Iterable[StateBasis]
) -> StateEvent | None:
    wanted = set(bases)
    last = None
    for state in states:
        if state.t > before:
            break
        if state.basis in wanted:
            last = state
    return last


def check_no_acknowledged_effect_lost(run: _Run) -> Verdict:
    """After each recovery, and at the end, an app shows what its last acknowledged state showed."""
    found = _Findings()
    judged = 0
    for recovery in run.of(RecoveryEvent):
        apps = [recovery.app] if recovery.app is not None else sorted(run.states)
        for app in apps:
            states = run.states.get(app, [])
            acked = _last_state(states, recovery.t, (StateBasis.ACK, StateBasis.RECOVERED))
            if acked is None:
                continue  # nothing acknowledged before: nothing to lose
            judged += 1
            who = f"app {app}" if recovery.app is not None else f"app {app} (desktop recovery)"
            if not recovery.ok:
                found.add(recovery, f"{who} did not come back after fault {recovery.fault}")
                continue
            after = [
                s
                for s in states
                if s.t >= recovery.t
                and s.basis is StateBasis.RECOVERED
                and (recovery.fault is None or s.fault in (None, recovery.fault))
            ]
            if not after:
                found.add(
                    recovery,
                    f"{who}: no recovered state recorded after the recovery, "
                    f"so its acknowledged state (line {acked.line}) is unverified",
                )
            elif after[0].digest != acked.digest:
                found.add(
                    after[0],
                    f"{who} lost acknowledged effects: recovered digest "
                    f"{after[0].digest[:12]} != {acked.digest[:12]} acknowledged "
                    f"at line {acked.line}",
                )
    for app, states in sorted(run.states.items()):
        for final in (s for s in states if s.basis is StateBasis.FINAL):
            reference = _last_state(
                [s for s in states if s is not final],
                final.t,
                (StateBasis.ACK, StateBasis.RECOVERED),
            )
            if reference is None or _touched(run, app, reference.t, final.t):
                continue
            judged += 1
            if final.digest != reference.digest:
                found.add(
                    final,
                    f"app {app}'s final state {final.digest[:12]} differs from its "
                    f"last acknowledged {reference.digest[:12]} (line "
                    f"{reference.line}) with nothing run since",
                )
    summary = f"{judged} recoveries and final states compared"
    status = Status.SKIP if judged == 0 else None
    return found.verdict(CheckName.NO_ACKNOWLEDGED_EFFECT_LOST, summary, status)


#: Faults that change what an app shows by design: a drift edits its list, a lie its rendering.
STATE_CHANGING_FAULTS = frozenset({FaultType.DRIFT, FaultType.LIE})


def _changes_state(event: Event, app: str) -> bool:
    """Whether ``event`` is a drift or lie on ``app``: a legitimate change of its digest."""
    return (
        isinstance(event, FaultEvent)
        and event.type in STATE_CHANGING_FAULTS
        and event.target.app in (None, app)
    )


def _touched(run: _Run, app: str, start: float, end: float) -> bool:
    """Whether a command or a drift or lie may have changed ``app`` strictly between two times."""
    for event in run.events:
        if not start < event.t < end:
            continue
        if isinstance(event, CommandEvent) and event.app in (None, app):
            return True
        if _changes_state(event, app):
            return True
    return False


def check_error_means_no_effect(run: _Run) -> Verdict:
    """A reply with outcome "none" leaves its app's state as it was, where states surround it."""
    found = _Findings()
    judged = 0
    for reply in run.of(ReplyEvent):
        app = run.app_of(reply)
        if reply.outcome is not Outcome.NONE or app is None:
            continue
        states = run.states.get(app, [])
        before = _last_state(states, reply.t, StateBasis)
        after = next((s for s in states if s.t > reply.t), None)
        if before is None or after is None or _other_change(run, app, reply, before.t, after.t):
            continue
        judged += 1
        if before.digest != after.digest:
            found.add(
                reply,
                f"command {reply.id} on {app} failed ({reply.code}) but the app "
                f"changed: {before.digest[:12]} (line {before.line}) -> "
                f"{after.digest[:12]} (line {after.line})",
            )
    summary = f"{judged} error replies with states on both sides"
    return found.verdict(
        CheckName.ERROR_MEANS_NO_EFFECT, summary, Status.SKIP if judged == 0 else None
    )


def _other_change(run: _Run, app: str, reply: ReplyEvent, start: float, end: float) -> bool:
    """Whether something else may have changed ``app`` between two of its states."""
    for event in run.events:
        if not start <= event.t <= end or event is reply:
            continue
        if (
            isinstance(event, ReplyEvent)
            and event.outcome is not Outcome.NONE
            and run.app_of(event) in (None, app)
        ):
            return True
        if _changes_state(event, app):
            return True
    return False


def check_refs_resolved_as_read(run: _Run) -> Verdict:
    """For every ok reply, each ref resolved to the value the agent read for it (drift)."""
    found = _Findings()
    judged = 0
    lies = [f for f in run.injects.values() if f.type is FaultType.LIE]
    for reply in run.of(ReplyEvent):
        command = run.commands.get(reply.id)
        if not reply.ok or command is None:
            continue
        for arg, ref in sorted(command.refs.items()):
            if arg not in reply.resolved:
                continue
            judged += 1
            # The agent read a lie and the ref found the true item: the lie check's business.
            if any(
                lie.t <= command.t
                and _same(ref.read, lie.detail.get("shown"))
                and _same(reply.resolved[arg], lie.detail.get("true"))
                for lie in lies
            ):
                continue
            if not _same(reply.resolved[arg], ref.read):
                found.add(
                    reply,
                    f"command {reply.id}: {arg}={ref.ref} read "
                    f"{_quote(ref.read)} but acted on {_quote(reply.resolved[arg])}",
                )
    summary = f"{judged} refs of ok commands compared"
    return found.verdict(CheckName.REFS_RESOLVED_AS_READ, summary)


def _values(value: Any) -> Iterable[Any]:
    """``value`` and every value nested in it (iteratively: the history may be hostile)."""
    stack = [value]
    while stack:
        item = stack.pop()
        yield item
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)


def check_not_acted_on_lies(run: _Run) -> Verdict:
    """Which commands used a value that only a lie showed."""
    found = _Findings()
    lies = [f for f in run.injects.values() if f.type is FaultType.LIE and "shown" in f.detail]
    for command in run.of(CommandEvent):
        for lie in lies:
            shown = lie.detail["shown"]
            if command.t < lie.t or _same(shown, lie.detail.get("true")):
                continue
            used = [*_values(command.args), *(ref.read for ref in command.refs.values())]
            in_text = isinstance(shown, str) and command.text is not None and shown in command.text
            if in_text or any(_same(v, shown) for v in used):
                found.add(
                    command,
                    f"command {command.id} used {_quote(shown)}, shown by lie "
                    f"{lie.fault} (true value {_quote(lie.detail.get('true'))})",
                )
    strict = run.plan.get(LIES_MUST_NOT_BE_ACTED_ON) is True
    summary = f"{len(lies)} lies; agent acted on a lie {len(found.items)} times" + (
        "" if strict else f" (a note: the plan does not set {LIES_MUST_NOT_BE_ACTED_ON})"
    )
    status = Status.FAIL if strict and found.items else Status.NOTE if found.items else Status.PASS
    return found.verdict(CheckName.NOT_ACTED_ON_LIES, summary, status)


def check_faults_visible(run: _Run) -> Verdict:
    """Every injected fault has a ``visible`` event, or an error reply, after its inject."""
    found = _Findings()
    visible = {e.fault: e for e in reversed(run.of(VisibleEvent))}
    for fault_id, inject in run.injects.items():
        seen = visible.get(fault_id)
        if seen is not None and seen.t >= inject.t:
            continue
        if _error_reply_during(run, inject):
            continue
        found.add(
            inject,
            f"fault {fault_id} ({inject.type.value}) was never visible to the "
            "agent: no visible event and no error reply",
        )
    summary = f"{len(run.injects)} faults injected"
    return found.verdict(CheckName.FAULTS_VISIBLE, summary)


def _error_reply_during(run: _Run, inject: FaultEvent) -> bool:
    """An error reply to a command on the fault's target, sent before the fault was cleared."""
    clear = run.clears.get(inject.fault)
    for reply in run.of(ReplyEvent):
        command = run.commands.get(reply.id)
        if reply.ok or command is None or reply.t < inject.t:
            continue
        if clear is not None and command.t > clear.t:
            continue
        if inject.target.app is None or command.app in (None, inject.target.app):
            return True
    return False


def check_memory_bounded(run: _Run, warm_up: float = WARM_UP_S) -> Verdict:
    """The last RSS sample ≤ the first after warm-up × 1.10 + 16 MiB."""
    found = _Findings()
    start = next((e.t for e in run.of(RunEvent) if e.phase is RunPhase.START), 0.0)
    samples = [s for s in run.of(SampleEvent) if s.t >= start + warm_up]
    if len(samples) < 2:
        summary = f"{len(samples)} samples after a {warm_up:g} s warm-up: not enough to judge"
        return found.verdict(CheckName.MEMORY_BOUNDED, summary, Status.SKIP)
    first, last = samples[0], samples[-1]
    limit = int(first.rss * (1 + MEMORY_GROWTH) + MEMORY_SLACK)
    if last.rss > limit:
        found.add(first, f"baseline after warm-up {_mib(first.rss)}")
        found.add(last, f"last sample {_mib(last.rss)} > limit {_mib(limit)}")
    summary = f"RSS {_mib(first.rss)} -> {_mib(last.rss)} (limit {_mib(limit)})"
    return found.verdict(CheckName.MEMORY_BOUNDED, summary)


def _mib(size: int) -> str:
    return f"{size / 1024 / 1024:.1f} MiB"


def check_nothing_left_running(run: _Run) -> Verdict:
    """The run's end lists no process still alive."""
    found = _Findings()
    ends = [e for e in run.of(RunEvent) if e.phase is RunPhase.END]
    if not ends:
        last = run.events[-1] if run.events else None
        if last is not None:
            found.add(last, "the history has no run end: the run was cut short")
        summary = "no run end recorded"
        return found.verdict(CheckName.NOTHING_LEFT_RUNNING, summary, Status.FAIL)
    end = ends[-1]
    pids = end.leftover_pids or ()
    if pids:
        found.add(end, f"still running after stop: pids {', '.join(map(str, pids))}")
    summary = f"{len(pids)} processes left running"
    return found.verdict(CheckName.NOTHING_LEFT_RUNNING, summary)


#: The checks, in :class:`CheckName` order.
CHECKS: dict[CheckName, Callable[[_Run], Verdict]] = {
    CheckName.ONE_REPLY_PER_COMMAND: check_one_reply_per_command,
    CheckName.NO_ACKNOWLEDGED_EFFECT_LOST: check_no_acknowledged_effect_lost,
    CheckName.ERROR_MEANS_NO_EFFECT: check_error_means_no_effect,
    CheckName.REFS_RESOLVED_AS_READ: check_refs_resolved_as_read,
    CheckName.NOT_ACTED_ON_LIES: check_not_acted_on_lies,
    CheckName.FAULTS_VISIBLE: check_faults_visible,
    CheckName.MEMORY_BOUNDED: check_memory_bounded,
    CheckName.NOTHING_LEFT_RUNNING: check_nothing_left_running,
}


def check_history(history: History, warm_up: float = WARM_UP_S) -> CheckReport:
    """Every check's verdict on ``history``."""
    run = _Run.index(history)
    verdicts = []
    for name, check in CHECKS.items():
        if name is CheckName.MEMORY_BOUNDED:
            verdicts.append(check_memory_bounded(run, warm_up))
        else:
            verdicts.append(check(run))
    return CheckReport(history, tuple(verdicts))


def printable(text: str) -> str:
    """``text`` with control characters escaped, so a hostile history cannot drive the terminal."""
    return "".join(
        ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text
    )


def format_report(report: CheckReport) -> str:
    """The verdicts as a table, each failing or noted check followed by its evidence."""
    width = max(len(name.value) for name in CheckName)
    lines = [f"{'check':<{width}}  verdict  summary"]
    for verdict in report.verdicts:
        lines.append(
            f"{verdict.check.value:<{width}}  {verdict.status.value.upper():<7}  "
            f"{printable(verdict.summary)}"
        )
        for evidence in verdict.evidence:
            lines.append(
                f"{'':<{width}}    line {evidence.line} t={evidence.t:.2f}s: "
                f"{printable(evidence.text)}"
            )
        if verdict.count > len(verdict.evidence):
            lines.append(f"{'':<{width}}    ... and {verdict.count - len(verdict.evidence)} more")
    history = report.history
    if history.truncated_line is not None:
        lines.append(
            f"note: line {history.truncated_line} was cut short (a writer killed mid-line) and "
            "was ignored"
        )
    failed = [v.check.value for v in report.verdicts if v.status is Status.FAIL]
    lines.append(f"verdict: {'FAIL (' + ', '.join(failed) + ')' if failed else 'all checks hold'}")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``aotui chaos check``."""
    parser.add_argument("history", help="the JSONL history a chaos run wrote")
    parser.add_argument("--json", action="store_true", help="machine-readable verdicts")
    parser.add_argument(
        "--warm-up",
        type=float,
        default=WARM_UP_S,
        metavar="SECONDS",
        help=f"seconds before the memory baseline is taken (default {WARM_UP_S:g})",
    )


def report_error(args: argparse.Namespace, exc: AotuiError) -> int:
    """Print ``exc`` as the CLI does and return its exit code (CONTRACT §7)."""
    if getattr(args, "json", False):
        print(json.dumps({"error": exc.to_dict()}, ensure_ascii=False))
    else:
        print(f"aotui: {exc.code.value}: {printable(exc.message)}", file=sys.stderr)
    return exc.code.exit_code


def main(args: argparse.Namespace) -> int:
    """Run ``aotui chaos check``: 0 when every check holds, 1 when one fails."""
    try:
        history = load_history(args.history)
    except AotuiError as exc:
        return report_error(args, exc)
    report = check_history(history, args.warm_up)
    if args.json:
        print(json.dumps(report.to_json(), ensure_ascii=False, indent=2))
    else:
        print(format_report(report))
    return 0 if report.ok else EXIT_CHECK_FAILED
