"""``aotui chaos check HISTORY``: judge a chaos history against the invariants of docs/chaos.md.

Each rule (:mod:`~supervisor.chaos.rules`) gives a :class:`Verdict` with evidence: the first few
offending events, each with its line number and time. ``main`` prints them as a table (or JSON)
and exits 0 only when none failed.
"""

from __future__ import annotations

import argparse
import json
import sys

from aotui.protocol.errors import AotuiError
from aotui.supervisor.chaos.history import History, load_history
from aotui.supervisor.chaos.rules import RULES, WARM_UP_S, IndexedRun
from aotui.supervisor.chaos.verdicts import (
    EVIDENCE_LIMIT,
    CheckName,
    CheckReport,
    Evidence,
    Status,
    Verdict,
)

__all__ = [
    "EVIDENCE_LIMIT",
    "EXIT_CHECK_FAILED",
    "WARM_UP_S",
    "CheckName",
    "CheckReport",
    "Evidence",
    "Status",
    "Verdict",
    "add_arguments",
    "check_history",
    "format_report",
    "main",
    "printable",
    "report_error",
]

#: Exit status when the history was read but a check failed.
EXIT_CHECK_FAILED = 1


def check_history(history: History, warm_up: float = WARM_UP_S) -> CheckReport:
    """Every rule's verdict on ``history``; ``warm_up``: seconds before the memory baseline."""
    run = IndexedRun.index(history)
    return CheckReport(history, tuple(rule(run, warm_up) for rule in RULES.values()))


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
