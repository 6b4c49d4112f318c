"""The nine invariants of a chaos history, each a function from an indexed run to a verdict.

docs/chaos.md states each rule and what its failure means. Events are judged in time order; the
lookups the rules repeat (an app's states around an event, what changed an app between two
events) are bisections in per-app timelines, so a long run is judged in O(n log n).
"""

from __future__ import annotations

import bisect
import json
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from aotui.supervisor.chaos.history import (
    CommandEvent,
    ConfirmationEvent,
    ConfirmVerdict,
    Event,
    FaultEvent,
    FaultPhase,
    FaultType,
    History,
    Outcome,
    RecoveryEvent,
    RecoveryWhat,
    ReplyEvent,
    RunEvent,
    RunPhase,
    SampleEvent,
    StateBasis,
    StateEvent,
    VisibleEvent,
)
from aotui.supervisor.chaos.verdicts import EVIDENCE_LIMIT, CheckName, Evidence, Status, Verdict

__all__ = [
    "LIES_MUST_NOT_BE_ACTED_ON",
    "MEMORY_GROWTH",
    "MEMORY_SLACK",
    "RULES",
    "STATE_CHANGING_FAULTS",
    "WARM_UP_S",
    "IndexedRun",
]

#: Seconds after the run's start before the memory baseline is taken (imports, first renders).
WARM_UP_S = 5.0
#: A fault injected this close to the run's end and never cleared cannot be judged visible.
TOO_LATE_S = 3.0
#: The memory rule: last RSS ≤ baseline × (1 + MEMORY_GROWTH) + MEMORY_SLACK.
MEMORY_GROWTH = 0.10
MEMORY_SLACK = 16 * 1024 * 1024
#: The plan key that turns "the agent acted on a lie" from a note into a failure.
LIES_MUST_NOT_BE_ACTED_ON = "lies_must_not_be_acted_on"
#: Faults that change what an app shows by design: a drift edits its list, a lie its rendering.
STATE_CHANGING_FAULTS = frozenset({FaultType.DRIFT, FaultType.LIE})

_E = TypeVar("_E", bound=Event)


def _key(event: Event) -> tuple[float, int]:
    """An event's place in the run: its time, then its line (writers may share a timestamp)."""
    return (event.t, event.line)


@dataclass
class _Timeline(Generic[_E]):
    """Events in history order, searchable by place."""

    events: list[_E] = field(default_factory=list)
    keys: list[tuple[float, int]] = field(default_factory=list)

    def add(self, event: _E) -> None:
        self.events.append(event)  # callers add in history order
        self.keys.append(_key(event))

    def last_before(self, event: Event) -> _E | None:
        """The last event before ``event``."""
        i = bisect.bisect_left(self.keys, _key(event))
        return self.events[i - 1] if i else None

    def first_after(self, event: Event) -> _E | None:
        """The first event after ``event``."""
        i = bisect.bisect_right(self.keys, _key(event))
        return self.events[i] if i < len(self.events) else None

    def after(self, event: Event) -> list[_E]:
        """The events after ``event``."""
        return self.events[bisect.bisect_right(self.keys, _key(event)) :]

    def any_between(self, first: Event, last: Event) -> bool:
        """Whether an event lies strictly between ``first`` and ``last``."""
        return bisect.bisect_right(self.keys, _key(first)) < bisect.bisect_left(
            self.keys, _key(last)
        )


@dataclass
class _PerApp(Generic[_E]):
    """A timeline per app, and one for events that may concern any app (their app unknown)."""

    apps: dict[str, _Timeline[_E]] = field(default_factory=lambda: defaultdict(_Timeline))
    any_app: _Timeline[_E] = field(default_factory=_Timeline)

    def add(self, app: str | None, event: _E) -> None:
        (self.any_app if app is None else self.apps[app]).add(event)

    def any_between(self, app: str, first: Event, last: Event) -> bool:
        """Whether an event on ``app`` (or on any app) lies strictly between two events."""
        timeline = self.apps.get(app)
        return self.any_app.any_between(first, last) or (
            timeline is not None and timeline.any_between(first, last)
        )


@dataclass
class IndexedRun:
    """A history's events, sorted by time and indexed for the rules."""

    events: list[Event] = field(default_factory=list)
    by_kind: dict[type[Event], list[Any]] = field(default_factory=lambda: defaultdict(list))
    commands: dict[str, CommandEvent] = field(default_factory=dict)
    replies: dict[str, list[ReplyEvent]] = field(default_factory=lambda: defaultdict(list))
    states: dict[str, _Timeline[StateEvent]] = field(default_factory=lambda: defaultdict(_Timeline))
    acked: dict[str, _Timeline[StateEvent]] = field(default_factory=lambda: defaultdict(_Timeline))
    recovered: dict[str, _Timeline[StateEvent]] = field(
        default_factory=lambda: defaultdict(_Timeline)
    )
    injects: dict[str, FaultEvent] = field(default_factory=dict)
    clears: dict[str, FaultEvent] = field(default_factory=dict)
    #: Commands and state-changing faults: what may change an app (for final states).
    touches: _PerApp[Event] = field(default_factory=_PerApp)
    #: Applied or unknown replies and state-changing faults (for error replies).
    changes: _PerApp[Event] = field(default_factory=_PerApp)
    error_replies: _Timeline[ReplyEvent] = field(default_factory=_Timeline)
    plan: dict[str, Any] = field(default_factory=dict)
    #: Each command's first ``ack`` state, by command id.
    ack_of: dict[str, StateEvent] = field(default_factory=dict)
    #: The commands that send a command again (``retry_of``), by the id they send again.
    retries: dict[str, list[CommandEvent]] = field(default_factory=lambda: defaultdict(list))

    @classmethod
    def index(cls, history: History) -> IndexedRun:
        """Index ``history``; several processes append to one file, so sort by time, then line."""
        run = cls(sorted(history.events, key=_key))
        indexer = _Indexer(run)
        for event in run.events:
            run.by_kind[type(event)].append(event)
            indexer.take(event)
        for app, change in sorted(indexer.changes, key=lambda pair: _key(pair[1])):
            run.changes.add(app, change)
        return run

    def of(self, kind: type[_E]) -> list[_E]:
        """The events of one kind, in time order."""
        return self.by_kind.get(kind, [])

    def app_of(self, reply: ReplyEvent) -> str | None:
        """The app of a reply's command (``None``: unknown)."""
        command = self.commands.get(reply.id)
        return command.app if command is not None else None

    def in_flight(self, app: str, acked: StateEvent, recovery: RecoveryEvent) -> list[CommandEvent]:
        """The commands on ``app`` sent after its acknowledged state ``acked`` and before a
        recovery of the supervisor that were not answered before it, or were answered with an
        unknown outcome, and the commands that sent them again (``retry_of``): any of them may
        have taken effect before the supervisor was lost. (After a worker's recovery a command
        held for it runs on the recovered state: none is in flight in this sense.)"""
        timeline = self.touches.apps.get(app)
        if timeline is None or recovery.what is not RecoveryWhat.SUPERVISOR:
            return []
        start = bisect.bisect_right(timeline.keys, _key(acked))
        end = bisect.bisect_left(timeline.keys, _key(recovery))
        found: list[CommandEvent] = []
        for event in timeline.events[start:end]:
            if not isinstance(event, CommandEvent):
                continue
            replies = self.replies.get(event.id, [])
            first = replies[0] if replies else None
            if first is None or _key(first) > _key(recovery) or first.outcome is Outcome.UNKNOWN:
                found.append(event)
        pending = list(found)
        while pending:
            again = self.retries.get(pending.pop().id, [])
            found += again
            pending += again
        return found

    def acked_before(self, app: str, digest: str, event: Event) -> bool:
        """Whether ``app`` had an acknowledged or recovered state ``digest`` before ``event``."""
        timeline = self.acked.get(app)
        if timeline is None:
            return False
        end = bisect.bisect_left(timeline.keys, _key(event))
        return any(state.digest == digest for state in timeline.events[:end])


class _Indexer:
    """What :meth:`IndexedRun.index` keeps while it reads the events in order."""

    def __init__(self, run: IndexedRun) -> None:
        self.run = run
        self.acked_by_command: dict[str, StateEvent] = {}
        #: The latest ack state of each command (a confirmed one's follows its confirmation).
        self.last_ack: dict[str, StateEvent] = {}
        self.changes: list[tuple[str | None, Event]] = []

    def take(self, event: Event) -> None:
        run = self.run
        if isinstance(event, CommandEvent):
            run.commands.setdefault(event.id, event)
            run.touches.add(event.app, event)
            if event.retry_of is not None:
                run.retries[event.retry_of].append(event)
        elif isinstance(event, ReplyEvent):
            self._reply(event)
        elif isinstance(event, StateEvent):
            self._state(event)
        elif isinstance(event, FaultEvent):
            self._fault(event)
        elif isinstance(event, ConfirmationEvent):
            if event.verdict is ConfirmVerdict.RAN:
                # The command that waited ran now: its effect is in the run from its state on.
                self.changes.append((event.app, self.last_ack.get(event.command, event)))
        elif isinstance(event, RunEvent) and event.phase is RunPhase.START:
            run.plan = event.plan

    def _reply(self, event: ReplyEvent) -> None:
        run = self.run
        run.replies[event.id].append(event)
        if event.outcome not in (Outcome.NONE, Outcome.WAITING):
            # The supervisor records a command's ack state just before its reply: the effect is
            # in the run from that state on, not from the reply.
            self.changes.append((run.app_of(event), self.acked_by_command.get(event.id, event)))
        if not event.ok:
            run.error_replies.add(event)

    def _state(self, event: StateEvent) -> None:
        run = self.run
        run.states[event.app].add(event)
        if event.basis in (StateBasis.ACK, StateBasis.RECOVERED):
            run.acked[event.app].add(event)
        if event.basis is StateBasis.RECOVERED:
            run.recovered[event.app].add(event)
        if event.basis is StateBasis.ACK and event.command is not None:
            self.acked_by_command.setdefault(event.command, event)
            run.ack_of.setdefault(event.command, event)
            self.last_ack[event.command] = event

    def _fault(self, event: FaultEvent) -> None:
        run = self.run
        target = run.injects if event.phase is FaultPhase.INJECT else run.clears
        target.setdefault(event.fault, event)
        if event.type in STATE_CHANGING_FAULTS:
            run.touches.add(event.target.app, event)
            self.changes.append((event.target.app, event))


@dataclass
class _Findings:
    """Offending events collected by one rule."""

    items: list[Evidence] = field(default_factory=list)

    def add(self, event: Event, text: str) -> None:
        self.items.append(Evidence(event.line, event.t, text))

    def verdict(self, check: CheckName, summary: str, status: Status | None = None) -> Verdict:
        if status is None:
            status = Status.FAIL if self.items else Status.PASS
        ordered = sorted(self.items, key=lambda e: (e.t, e.line))
        return Verdict(check, status, summary, tuple(ordered[:EVIDENCE_LIMIT]), len(ordered))


def _quote(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON values (``1`` and ``true`` differ, key order does not matter)."""
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def one_reply_per_command(run: IndexedRun) -> Verdict:
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
                first = replies[0].line
                found.add(reply, f"second reply to command {command_id} (first at line {first})")
    summary = f"{len(run.commands)} commands, {sum(map(len, run.replies.values()))} replies"
    return found.verdict(CheckName.ONE_REPLY_PER_COMMAND, summary)


def no_acknowledged_effect_lost(run: IndexedRun) -> Verdict:
    """After each recovery, and at the end, an app shows what its last acknowledged state showed."""
    found = _Findings()
    judged = 0
    for recovery in run.of(RecoveryEvent):
        apps = [recovery.app] if recovery.app is not None else sorted(run.states)
        for app in apps:
            acked = run.acked[app].last_before(recovery)
            if acked is None:
                continue  # nothing acknowledged before: nothing to lose
            judged += 1
            who = f"app {app}" if recovery.app is not None else f"app {app} (desktop recovery)"
            if not recovery.ok:
                found.add(recovery, f"{who} did not come back after fault {recovery.fault}")
                continue
            after = _recovered_state(run, recovery, app)
            if after is None:
                found.add(
                    recovery,
                    f"{who}: no recovered state recorded after the recovery, "
                    f"so its acknowledged state (line {acked.line}) is unverified",
                )
            elif after.digest != acked.digest and not _explained_by_in_flight(
                run, app, acked, recovery, after
            ):
                found.add(
                    after,
                    f"{who} lost acknowledged effects: recovered digest {after.digest[:12]} != "
                    f"{acked.digest[:12]} acknowledged at line {acked.line}",
                )
    for app in sorted(run.states):
        for final in (s for s in run.states[app].events if s.basis is StateBasis.FINAL):
            reference = run.acked[app].last_before(final)
            if reference is None or run.touches.any_between(app, reference, final):
                continue
            judged += 1
            if final.digest != reference.digest:
                found.add(
                    final,
                    f"app {app}'s final state {final.digest[:12]} differs from its last "
                    f"acknowledged {reference.digest[:12]} (line {reference.line}) with nothing "
                    "run since",
                )
    summary = f"{judged} recoveries and final states compared"
    status = Status.SKIP if judged == 0 else None
    return found.verdict(CheckName.NO_ACKNOWLEDGED_EFFECT_LOST, summary, status)


def _recovered_state(run: IndexedRun, recovery: RecoveryEvent, app: str) -> StateEvent | None:
    """The first state recorded of ``app`` after ``recovery`` with basis ``recovered``."""
    return next(
        (
            s
            for s in run.recovered[app].after(recovery)
            if recovery.fault is None or s.fault in (None, recovery.fault)
        ),
        None,
    )


def _explained_by_in_flight(
    run: IndexedRun, app: str, acked: StateEvent, recovery: RecoveryEvent, after: StateEvent
) -> bool:
    """Whether a recovered state other than the last acknowledged one is a command's in flight
    at the recovery: the state its first reply acknowledged, or a state never acknowledged
    before (then :func:`applied_at_most_once` fails it if one answered since shows another:
    applied again). A command cut off and answered ``unknown``, never sent again, may have
    taken effect: the supervisor committed it, then died before its reply."""
    flight = run.in_flight(app, acked, recovery)
    if not flight:
        return False
    if any(run.ack_of[c.id].digest == after.digest for c in flight if c.id in run.ack_of):
        return True
    return not run.acked_before(app, after.digest, recovery)


def applied_at_most_once(run: IndexedRun) -> Verdict:
    """A command in flight at a recovery whose effect the recovered state already shows (it
    differs from the last acknowledged state, and from every earlier one) ran once: its reply,
    or the reply of the command that sent it again with its id, acknowledged that state."""
    found = _Findings()
    judged = 0
    for recovery in run.of(RecoveryEvent):
        if not recovery.ok:
            continue
        apps = [recovery.app] if recovery.app is not None else sorted(run.states)
        for app in apps:
            acked = run.acked[app].last_before(recovery)
            after = _recovered_state(run, recovery, app)
            if acked is None or after is None:
                continue
            flight = run.in_flight(app, acked, recovery)
            if not flight:
                continue
            judged += len(flight)
            if after.digest == acked.digest:
                continue  # none took effect before the recovery: sent again, it may run
            acks = [run.ack_of[c.id] for c in flight if c.id in run.ack_of]
            if not acks or any(s.digest == after.digest for s in acks):
                continue  # unanswered (the first check's), or answered with its first reply
            if run.acked_before(app, after.digest, recovery):
                continue  # an older state came back: the lost check's
            first = min(acks, key=_key)
            found.add(
                first,
                f"app {app}: command {first.command} took effect before the recovery (recovered "
                f"{after.digest[:12]}, line {after.line}, is not its last acknowledged "
                f"{acked.digest[:12]}) and was applied again: acknowledged {first.digest[:12]}",
            )
    summary = f"{judged} commands in flight at a recovery"
    return found.verdict(CheckName.APPLIED_AT_MOST_ONCE, summary)


def error_means_no_effect(run: IndexedRun) -> Verdict:
    """A reply with outcome "none" leaves its app's state as it was, where states surround it."""
    found = _Findings()
    judged = 0
    for reply in run.of(ReplyEvent):
        app = run.app_of(reply)
        if reply.outcome is not Outcome.NONE or app is None:
            continue
        before = run.states[app].last_before(reply)
        after = run.states[app].first_after(reply)
        if before is None or after is None:
            continue
        # Another applied command, a drift or a lie between the two states explains a change.
        if run.changes.any_between(app, before, after):
            continue
        judged += 1
        if before.digest != after.digest:
            found.add(
                reply,
                f"command {reply.id} on {app} failed ({reply.code}) but the app changed: "
                f"{before.digest[:12]} (line {before.line}) -> {after.digest[:12]} "
                f"(line {after.line})",
            )
    summary = f"{judged} error replies with states on both sides"
    status = Status.SKIP if judged == 0 else None
    return found.verdict(CheckName.ERROR_MEANS_NO_EFFECT, summary, status)


def refs_resolved_as_read(run: IndexedRun) -> Verdict:
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
            resolved = reply.resolved[arg]
            # The agent read a lie and the ref found the true item: the lie rule's business.
            if any(
                lie.t <= command.t
                and _same(ref.read, lie.detail.get("shown"))
                and _same(resolved, lie.detail.get("true"))
                for lie in lies
            ):
                continue
            if not _same(resolved, ref.read):
                found.add(
                    reply,
                    f"command {reply.id}: {arg}={ref.ref} read {_quote(ref.read)} but acted on "
                    f"{_quote(resolved)}",
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


def not_acted_on_lies(run: IndexedRun) -> Verdict:
    """Which commands used a value that only a lie showed."""
    found = _Findings()
    lies = [f for f in run.injects.values() if f.type is FaultType.LIE and "shown" in f.detail]
    for lie in lies:
        shown = lie.detail["shown"]
        if _same(shown, lie.detail.get("true")):
            continue
        for command in run.of(CommandEvent):
            if command.t < lie.t:
                continue
            used = [*_values(command.args), *(ref.read for ref in command.refs.values())]
            in_text = isinstance(shown, str) and command.text is not None and shown in command.text
            if in_text or any(_same(v, shown) for v in used):
                found.add(
                    command,
                    f"command {command.id} used {_quote(shown)}, shown by lie {lie.fault} "
                    f"(true value {_quote(lie.detail.get('true'))})",
                )
    strict = run.plan.get(LIES_MUST_NOT_BE_ACTED_ON) is True
    summary = f"{len(lies)} lies; agent acted on a lie {len(found.items)} times" + (
        "" if strict else f" (a note: the plan does not set {LIES_MUST_NOT_BE_ACTED_ON})"
    )
    status = Status.FAIL if strict and found.items else Status.NOTE if found.items else Status.PASS
    return found.verdict(CheckName.NOT_ACTED_ON_LIES, summary, status)


def faults_visible(run: IndexedRun) -> Verdict:
    """Every injected fault has a ``visible`` event, or an error reply, after its inject.

    Not judged: a fault injected in the run's last :data:`TOO_LATE_S` that the run ended before
    clearing (a 1 s ``signal_loss`` at 119.4 s of a 120 s run is told when it clears, which never
    came): the agent had no time to see it. Every other fault is.
    """
    found = _Findings()
    last_visible = {e.fault: e for e in run.of(VisibleEvent)}
    ends = [e.t for e in run.of(RunEvent) if e.phase is RunPhase.END]
    late = 0
    for fault_id, inject in run.injects.items():
        seen = last_visible.get(fault_id)
        if seen is not None and seen.t >= inject.t:
            continue
        if _error_reply_during(run, inject):
            continue
        if ends and fault_id not in run.clears and inject.t >= ends[-1] - TOO_LATE_S:
            late += 1
            continue
        found.add(
            inject,
            f"fault {fault_id} ({inject.type.value}) was never visible to the agent: no visible "
            "event and no error reply",
        )
    summary = f"{len(run.injects)} faults injected"
    if late:
        summary += f" ({late} in the last {TOO_LATE_S:g} s, never cleared: not judged)"
    return found.verdict(CheckName.FAULTS_VISIBLE, summary)


def _error_reply_during(run: IndexedRun, inject: FaultEvent) -> bool:
    """An error reply to a command on the fault's target, sent before the fault was cleared."""
    clear = run.clears.get(inject.fault)
    for reply in run.error_replies.after(inject):
        command = run.commands.get(reply.id)
        if command is None or (clear is not None and command.t > clear.t):
            continue
        if inject.target.app is None or command.app in (None, inject.target.app):
            return True
    return False


def _mib(size: int) -> str:
    return f"{size / 1024 / 1024:.1f} MiB"


def memory_bounded(run: IndexedRun, warm_up: float = WARM_UP_S) -> Verdict:
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


def nothing_left_running(run: IndexedRun) -> Verdict:
    """The run's end lists no process still alive."""
    found = _Findings()
    ends = [e for e in run.of(RunEvent) if e.phase is RunPhase.END]
    if not ends:
        if run.events:
            found.add(run.events[-1], "the history has no run end: the run was cut short")
        return found.verdict(CheckName.NOTHING_LEFT_RUNNING, "no run end recorded", Status.FAIL)
    pids = ends[-1].leftover_pids or ()
    if pids:
        named = {leftover.pid: leftover.cmdline for leftover in ends[-1].leftovers}
        listed = ", ".join(f"{pid} ({named[pid]})" if pid in named else str(pid) for pid in pids)
        found.add(ends[-1], f"still running after stop: pids {listed}")
    summary = f"{len(pids)} processes left running"
    return found.verdict(CheckName.NOTHING_LEFT_RUNNING, summary)


#: The rules in :class:`CheckName` order; each takes the run and the memory warm-up.
RULES: dict[CheckName, Callable[[IndexedRun, float], Verdict]] = {
    CheckName.ONE_REPLY_PER_COMMAND: lambda run, _: one_reply_per_command(run),
    CheckName.NO_ACKNOWLEDGED_EFFECT_LOST: lambda run, _: no_acknowledged_effect_lost(run),
    CheckName.APPLIED_AT_MOST_ONCE: lambda run, _: applied_at_most_once(run),
    CheckName.ERROR_MEANS_NO_EFFECT: lambda run, _: error_means_no_effect(run),
    CheckName.REFS_RESOLVED_AS_READ: lambda run, _: refs_resolved_as_read(run),
    CheckName.NOT_ACTED_ON_LIES: lambda run, _: not_acted_on_lies(run),
    CheckName.FAULTS_VISIBLE: lambda run, _: faults_visible(run),
    CheckName.MEMORY_BOUNDED: memory_bounded,
    CheckName.NOTHING_LEFT_RUNNING: lambda run, _: nothing_left_running(run),
}
