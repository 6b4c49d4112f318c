"""``aotui chaos report HISTORY``: a summary table of a chaos run, and its timeline as SVG.

The table counts faults by type, commands, replies by code and recoveries (p50/p99 by kind), and
ends with the checker's verdict; ``--out`` writes the picture drawn by
:mod:`~supervisor.chaos.timeline`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.supervisor.chaos.check import (
    WARM_UP_S,
    CheckReport,
    Status,
    check_history,
    printable,
    report_error,
)
from aotui.supervisor.chaos.history import (
    CommandEvent,
    FaultEvent,
    FaultPhase,
    History,
    RecoveryEvent,
    ReplyEvent,
    load_history,
)
from aotui.supervisor.chaos.timeline import timeline_svg

__all__ = ["RecoveryStats", "RunSummary", "add_arguments", "main", "percentile", "summarize"]


def percentile(values: Sequence[float], p: float) -> float:
    """The nearest-rank ``p``-th percentile of ``values`` (the smallest value ≥ p % of them)."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


@dataclass(frozen=True)
class RecoveryStats:
    """Recoveries of one kind (worker or supervisor)."""

    #: How many.
    count: int
    #: How many never came back.
    failed: int
    #: Median seconds from fault to serving again.
    p50: float
    #: 99th percentile of those seconds.
    p99: float


@dataclass(frozen=True)
class RunSummary:
    """What a chaos run did, counted."""

    #: Seconds from the first to the last event.
    duration: float
    #: Injected faults per type.
    faults: dict[str, int]
    #: Commands sent.
    commands: int
    #: Replies per code (``ok`` for successes), and ``missing`` for commands without one.
    replies: dict[str, int]
    #: Recoveries per kind.
    recoveries: dict[str, RecoveryStats]
    #: The checker's verdicts.
    check: CheckReport

    def to_json(self) -> dict[str, Any]:
        """As plain data for ``--json``."""
        return {
            "history": str(self.check.history.path),
            "duration": self.duration,
            "faults": self.faults,
            "commands": self.commands,
            "replies": self.replies,
            "recoveries": {k: vars(v) for k, v in self.recoveries.items()},
            "verdict": {
                "ok": self.check.ok,
                "failed": [v.check.value for v in self.check.verdicts if v.status is Status.FAIL],
            },
        }


def summarize(history: History, warm_up: float = WARM_UP_S) -> RunSummary:
    """Count what ``history`` records and judge it."""
    events = history.events
    faults = Counter(
        e.type.value for e in events if isinstance(e, FaultEvent) and e.phase is FaultPhase.INJECT
    )
    command_ids = {e.id for e in events if isinstance(e, CommandEvent)}
    replies: Counter[str] = Counter()
    answered = set()
    for event in events:
        if isinstance(event, ReplyEvent):
            replies["ok" if event.ok else (event.code.value if event.code else "error")] += 1
            answered.add(event.id)
    replies["missing"] = len(command_ids - answered)
    seconds: dict[str, list[float]] = defaultdict(list)
    failed: Counter[str] = Counter()
    for event in events:
        if isinstance(event, RecoveryEvent):
            if event.ok:
                seconds[event.what.value].append(event.seconds)
            else:
                failed[event.what.value] += 1
    recoveries = {
        what: RecoveryStats(
            count=len(seconds[what]) + failed[what],
            failed=failed[what],
            p50=percentile(seconds[what], 50) if seconds[what] else math.nan,
            p99=percentile(seconds[what], 99) if seconds[what] else math.nan,
        )
        for what in sorted(set(seconds) | set(failed))
    }
    times = [e.t for e in events]
    return RunSummary(
        duration=max(times) - min(times) if times else 0.0,
        faults=dict(sorted(faults.items())),
        commands=len(command_ids),
        replies=dict(sorted(replies.items(), key=lambda kv: (kv[0] != "ok", kv[0]))),
        recoveries=recoveries,
        check=check_history(history, warm_up),
    )


def format_summary(summary: RunSummary) -> str:
    """The summary as a plain-text table."""
    history = summary.check.history
    rows = [
        f"history           {printable(str(history.path))}",
        f"events            {len(history.events)} over {summary.duration:.1f} s",
        f"faults injected   {sum(summary.faults.values())}",
        *(f"  {kind:<16}{count:>6}" for kind, count in summary.faults.items()),
        f"commands          {summary.commands:>6}",
        "replies",
        *(f"  {code:<16}{count:>6}" for code, count in summary.replies.items()),
        f"recoveries        {'count':>6} {'failed':>6} {'p50 s':>7} {'p99 s':>7}",
        *(
            f"  {what:<16}{s.count:>6} {s.failed:>6} {s.p50:>7.2f} {s.p99:>7.2f}"
            for what, s in summary.recoveries.items()
        ),
    ]
    failed = [v.check.value for v in summary.check.verdicts if v.status is Status.FAIL]
    rows.append(
        f"verdict           {'FAIL: ' + ', '.join(failed) if failed else 'all checks hold'}"
    )
    if history.truncated_line is not None:
        rows.append(f"note: line {history.truncated_line} was cut short and was ignored")
    return "\n".join(rows)


def write_timeline(history: History, out: Path) -> None:
    """Write the timeline SVG of ``history`` to ``out`` (replacing it whole, never half-written)."""
    svg = timeline_svg(history.events, f"chaos run: {history.path.name}")
    partial = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        partial.write_text(svg, encoding="utf-8")
        partial.replace(out)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise AotuiError(
            ErrorCode.E_IO,
            f"cannot write the timeline to {out}: {exc.strerror}; choose another --out",
            {"path": str(out)},
        ) from exc


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``aotui chaos report``."""
    parser.add_argument("history", help="the JSONL history a chaos run wrote")
    parser.add_argument("--out", type=Path, default=None, help="write the timeline SVG here")
    parser.add_argument("--json", action="store_true", help="machine-readable summary")
    parser.add_argument(
        "--warm-up",
        type=float,
        default=WARM_UP_S,
        metavar="SECONDS",
        help=f"seconds before the memory baseline is taken (default {WARM_UP_S:g})",
    )


def main(args: argparse.Namespace) -> int:
    """Run ``aotui chaos report``: print the summary, write the picture; 0 unless it cannot."""
    try:
        history = load_history(args.history)
        summary = summarize(history, args.warm_up)
        if args.out is not None:
            write_timeline(history, args.out)
    except AotuiError as exc:
        return report_error(args, exc)
    if args.json:
        data = summary.to_json()
        data["timeline"] = str(args.out) if args.out is not None else None
        # NaN is not JSON: a kind with only failed recoveries has no percentile.
        for stats in data["recoveries"].values():
            for key in ("p50", "p99"):
                stats[key] = None if math.isnan(stats[key]) else stats[key]
        print(json.dumps(data, ensure_ascii=False, indent=2))
    else:
        print(format_summary(summary))
        if args.out is not None:
            print(f"timeline          {printable(str(args.out))}")
    return 0
