"""``aotui chaos run|app|check|report``: the command group (argparse only at import).

``run`` and ``app`` are this package's (``run.py``, ``agent.py``); ``check`` and ``report`` are
``check.py``'s and ``report.py``'s, each imported when its subcommand runs.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path
from typing import Any, NoReturn

__all__ = ["add_arguments", "build_parser", "main"]

#: The subcommands and the module each one's arguments and main come from.
JUDGES = {"check": "aotui.supervisor.chaos.check", "report": "aotui.supervisor.chaos.report"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``chaos`` group's subcommands on ``parser``."""
    sub = parser.add_subparsers(dest="chaos_command", required=True, metavar="SUBCOMMAND")
    run = sub.add_parser(
        "run",
        help="run an agent program against a desktop under a plan",
        description="Start a desktop, run AGENT_COMMAND against it (its "
        "environment names the desktop), inject the plan, stop everything.",
    )
    run.add_argument("plan", nargs="?", help="the TOML plan (or give --seed and --fault)")
    run.add_argument("agent", nargs="*", help="the agent's command, after --")
    app = sub.add_parser(
        "app",
        help="explore an app with the built-in random agent, then check",
        description="Install APP_DIR on a chaos desktop, drive it with a seeded "
        "random agent under the plan (a default plan if none), check the history.",
    )
    app.add_argument("app_dir", help="directory holding aoapp.json")
    app.add_argument("--plan", help="the TOML plan (default: kills around effects, failures)")
    app.add_argument("--steps", type=int, default=60, help="moves the agent makes (default 60)")
    for each in (run, app):
        each.add_argument("--seed", type=int, help="the schedule's seed (overrides the plan's)")
        each.add_argument(
            "--fault",
            action="append",
            default=[],
            metavar="TYPE[:K=V,...]",
            help="a fault, e.g. kill_worker:probability=0.2,when=after_effect",
        )
        each.add_argument("--duration", type=float, help="seconds the run lasts at most")
        each.add_argument("--history", help="where the history goes (default: in the run's dir)")
        each.add_argument(
            "--workdir",
            help="the run's directory, kept (default: a new temporary one, removed after the "
            "run but for the history)",
        )
        each.add_argument(
            "--keep",
            action="store_true",
            help="keep the new temporary directory's desktop, store and logs too",
        )
        each.add_argument("--json", action="store_true", help="the summary as JSON")
    for name in JUDGES:
        judged = sub.add_parser(name, help=f"{name} a chaos history")
        try:
            importlib.import_module(JUDGES[name]).add_arguments(judged)
        except ImportError:  # not in this installation: main says so
            judged.add_argument("rest", nargs="*")


class _Parser(argparse.ArgumentParser):
    """Usage errors exit 64 (CONTRACT §7), as every aotui command's do."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(64, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``aotui chaos ...`` (built only when that command runs)."""
    parser = _Parser(prog="aotui chaos", description="Resilience testing (docs/chaos.md).")
    add_arguments(parser)
    return parser


def main(outer: argparse.Namespace) -> int:
    """Run ``aotui chaos``: ``outer.chaos_args`` are the words after ``chaos``."""
    from aotui.protocol.errors import AotuiError

    words, agent = list(outer.chaos_args), []
    if "--" in words:  # the agent's command is never mistaken for the plan or a flag
        cut = words.index("--")
        words, agent = words[:cut], words[cut + 1 :]
    args = build_parser().parse_args(words)
    if agent:
        args.agent = agent
    args.json = getattr(args, "json", False) or getattr(outer, "json", False)
    command = args.chaos_command
    try:
        if command in JUDGES:
            try:
                module = importlib.import_module(JUDGES[command])
            except ImportError:
                print(f"aotui chaos {command}: not available in this installation", file=sys.stderr)
                return 69
            result: int = module.main(args)
            return result
        if command == "run":
            return _run(args)
        return _app(args)
    except AotuiError as exc:
        if getattr(args, "json", False):
            print(json.dumps({"error": exc.to_dict()}, ensure_ascii=False))
        else:
            print(f"aotui chaos {command}: {exc.code.value}: {exc.message}", file=sys.stderr)
        return exc.code.exit_code


def _plan(args: argparse.Namespace, default: dict[str, Any] | None = None) -> Any:
    from aotui.supervisor.chaos.plan import load_plan, parse_plan, plan_from_flags

    path = args.plan
    if path is None and not args.fault and default is not None:
        plan = parse_plan({**default, "seed": args.seed if args.seed is not None else 1})
    elif path is None:
        plan = plan_from_flags(args.seed if args.seed is not None else 0, args.fault)
    else:
        plan = load_plan(path)
        if args.fault:
            extra = plan_from_flags(plan.seed, args.fault)
            plan = parse_plan(
                {
                    **plan.to_plain(),
                    "fault": [*plan.to_plain()["fault"], *(f.to_plain() for f in extra.faults)],
                }
            )
        if args.seed is not None:
            plan = parse_plan({**plan.to_plain(), "seed": args.seed})
    return plan


def _finish(args: argparse.Namespace, result: Any) -> None:
    if getattr(args, "json", False):
        print(
            json.dumps(
                {
                    "history": str(result.history),
                    "workdir": str(result.workdir),
                    "cleaned": result.cleaned,
                    "agent_exit": result.agent_exit,
                    "leftover_pids": list(result.leftover_pids),
                    "leftovers": [
                        {"pid": leftover.pid, "cmdline": leftover.cmdline}
                        for leftover in result.leftovers
                    ],
                    **result.counts,
                }
            )
        )
    else:
        print(result.summary())


def _run(args: argparse.Namespace) -> int:
    from aotui.protocol.errors import AotuiError, ErrorCode
    from aotui.supervisor.chaos.run import ChaosRun

    if not args.agent:
        raise AotuiError(
            ErrorCode.E_INVALID_CMD,
            "chaos run needs the agent's command after "
            "--: aotui chaos run plan.toml -- python my_agent.py",
        )
    plan = _plan(args)
    run = ChaosRun(
        plan,
        list(args.agent),
        args.duration,
        _path(args.history),
        _path(args.workdir),
        keep=args.keep,
    )
    result = run.run()
    _finish(args, result)
    return 0 if result.agent_exit in (0, None) and not result.leftover_pids else 1


def _app(args: argparse.Namespace) -> int:
    from aotui.supervisor.chaos import check
    from aotui.supervisor.chaos.agent import RandomAgent
    from aotui.supervisor.chaos.plan import DEFAULT_APP_PLAN
    from aotui.supervisor.chaos.run import ChaosRun
    from aotui.supervisor.manifest import load_manifest

    app_dir = Path(args.app_dir).resolve()
    manifest = load_manifest(app_dir)
    plan = _plan(
        args,
        {
            **DEFAULT_APP_PLAN,
            "fault": [{**fault, "app": manifest.id} for fault in DEFAULT_APP_PLAN["fault"]],
        },
    )
    duration = args.duration if args.duration is not None else plan.duration_s
    agent = RandomAgent(manifest.id, plan.seed, args.steps, deadline_s=duration)
    run = ChaosRun(
        plan,
        agent,
        duration + 30,
        _path(args.history),
        _path(args.workdir),
        apps=[str(app_dir)],
        keep=args.keep,
    )
    result = run.run()
    _finish(args, result)
    verdict = argparse.Namespace(
        history=str(result.history), json=getattr(args, "json", False), warm_up=check.WARM_UP_S
    )
    return check.main(verdict)


def _path(value: str | None) -> Path | None:
    return Path(value) if value else None
