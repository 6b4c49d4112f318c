"""``aotui fleet up|status|drain``, and ``aotui snapshot|exec --fleet ADDRESS --desktop NAME``.

Imported by those commands only (supervisor/interface/cli.py imports it in their functions), and
Ray only inside the functions that reach a cluster: ``aotui snapshot`` on one machine pays
nothing for the fleet.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.supervisor.fleet.auth import cluster_uses_token, make_token, ray_env, token_path

__all__ = ["FleetArgs", "format_fleet", "main", "on_fleet", "worker_niceness"]

#: ``aotui fleet up --local``: the local cluster's head, small (it shares the machine).
#: How a local head notices a lost node: 3 missed health checks 1 s apart (Ray's defaults, 5
#: missed 3 s apart, leave a lost node's desktops unanswered for ~15 s before Ray even begins
#: to restart them elsewhere).
HEALTH_CHECKS = {"health_check_period_ms": 1000, "health_check_failure_threshold": 3}
#: Ray starts its worker processes at niceness 15 (its ``worker_niceness``), and a desktop's
#: actor, supervisor and apps inherit it: they get the CPU only when no process at the default
#: 0 wants it (beside two busy loops a ``ping`` through the fleet took 29 ms at 15, 1.6 ms at 0:
#: bench/bench_fleet_priority.py, docs/fleet.md). A desktop is the service a fleet runs.
WORKER_PRIORITY = {"worker_niceness": 0}
LOCAL_SYSTEM_CONFIG = HEALTH_CHECKS | WORKER_PRIORITY
LOCAL_HEAD = (
    "--head",
    "--include-dashboard=false",
    "--disable-usage-stats",
    f"--system-config={json.dumps(LOCAL_SYSTEM_CONFIG)}",
)


class FleetArgs(argparse.ArgumentParser):
    """``aotui fleet``'s own parser (usage errors exit 64, as every aotui command's)."""

    def error(self, message: str) -> Any:
        self.print_usage(sys.stderr)
        self.exit(ErrorCode.E_INVALID_CMD.exit_code, f"{self.prog}: error: {message}\n")


def _parser() -> FleetArgs:
    parser = FleetArgs(prog="aotui fleet", description="desktops across machines, on Ray")
    sub = parser.add_subparsers(dest="fleet_command", required=True, parser_class=FleetArgs)
    up = sub.add_parser("up", help="start the fleet's router on a Ray cluster")
    where = up.add_mutually_exclusive_group(required=True)
    where.add_argument("--ray", metavar="ADDRESS", help="a running Ray cluster (ray.init's)")
    where.add_argument(
        "--local", action="store_true", help="start a Ray cluster on this machine (`ray stop`)"
    )
    up.add_argument(
        "--store", metavar="URL", required=True, help="postgresql://… for every desktop"
    )
    up.add_argument("--config", help="the desktops' TOML config (default: the bundled one)")
    up.add_argument(
        "--idle-s", type=float, default=0.0, help="hibernate a desktop idle this long (0: never)"
    )
    up.add_argument(
        "--release-s",
        type=float,
        default=0.0,
        help="a desktop hibernated this long more is only rows: its actor exits (0: never)",
    )
    up.add_argument("--cpus", type=float, default=0.1, help="CPUs Ray reserves per desktop")
    up.add_argument("--memory-mb", type=int, default=256, help="memory Ray reserves per desktop")
    up.add_argument("--local-cpus", type=int, default=2, help="with --local: the head's CPUs")
    up.add_argument(
        "--local-port", type=int, default=6379, help="with --local: the head's port (Ray's GCS)"
    )
    for name, text in (
        ("status", "desktops: node, state, memory, last use"),
        ("drain", "move the desktops off a node"),
    ):
        command = sub.add_parser(name, help=text)
        command.add_argument("--ray", metavar="ADDRESS", default="auto", help="the Ray cluster")
        if name == "drain":
            command.add_argument("node", help="the Ray node id (from `aotui fleet status`)")
    return parser


def main(args: argparse.Namespace) -> int:
    """Run ``aotui fleet …`` (``args.fleet_args``: the words after ``fleet``)."""
    inner = _parser().parse_args(list(args.fleet_args))
    if inner.fleet_command == "up":
        return _up(args, inner)
    from aotui.supervisor.fleet.client import FleetClient

    fleet = FleetClient(inner.ray)
    if inner.fleet_command == "status":
        rows = fleet.status()
        if args.json:
            print(json.dumps(rows, indent=2))
        else:
            print(format_fleet(rows))
            print(_token_line(cluster_uses_token(fleet.router)))
            print(_niceness_line(worker_niceness(fleet.router)))
        return 0
    moved = fleet.drain(inner.node)
    print(json.dumps({"moved": moved}) if args.json else f"moved {len(moved)}: {' '.join(moved)}")
    return 0


def _up(args: argparse.Namespace, inner: argparse.Namespace) -> int:
    from aotui.supervisor.fleet.actors import FleetSettings, router_actor
    from aotui.supervisor.fleet.client import connect

    address = inner.ray
    if inner.local:
        address = _start_local(inner.local_cpus, inner.local_port)
    config = Path(inner.config).read_text() if inner.config else ""
    wanted = FleetSettings(
        inner.store, config, idle_s=inner.idle_s, release_s=inner.release_s, num_cpus=inner.cpus,
        memory=inner.memory_mb << 20,
    )  # fmt: skip
    connect(address)
    import ray

    router = router_actor(wanted)
    running = ray.get(router.get_settings.remote(), timeout=120)
    if running["store"] != wanted.store:
        raise AotuiError(
            ErrorCode.E_INVALID_CMD,
            "a fleet already runs on this cluster with another store; its desktops stay there",
        )
    address = ray.get_runtime_context().gcs_address
    token = cluster_uses_token(router)
    niceness = worker_niceness(router)
    if args.json:
        print(
            json.dumps(
                {
                    "address": address,
                    "router": "aotui-fleet-router",
                    "token": token,
                    "worker_niceness": niceness,
                }
            )
        )
    else:
        print(f"fleet up on Ray at {address} (router aotui-fleet-router)")
        print(_token_line(token, token_path() if inner.local else None))
        print(_niceness_line(niceness))
    return 0


def worker_niceness(router: Any) -> int:
    """The niceness Ray gave the worker process of the fleet's ``router`` actor: every desktop
    actor's too, unless its node was started with another ``worker_niceness``."""
    import ray

    return int(ray.get(router.__ray_call__.remote(_own_niceness), timeout=60))


def _own_niceness(_actor: Any) -> int:
    return os.getpriority(os.PRIO_PROCESS, 0)


def _niceness_line(niceness: int) -> str:
    """What ``fleet up`` and ``fleet status`` say of the desktops' CPU priority."""
    if niceness <= 0:
        return f"desktops' niceness: {niceness}"
    return (
        f"desktops' niceness: {niceness} (Ray's worker_niceness): they wait for every other "
        "process of their node; start Ray with --system-config='{\"worker_niceness\": 0}' "
        "(docs/fleet.md)"
    )


def _token_line(on: bool, kept_in: Path | None = None) -> str:
    """What ``fleet up`` and ``fleet status`` say of Ray's token (``kept_in``: where ``up
    --local`` keeps it)."""
    if on:
        return "Ray token authentication: on" + (f" (the token: {kept_in})" if kept_in else "")
    return "Ray token authentication: OFF: anyone who reaches the cluster's ports can run code"


def _start_local(cpus: int, port: int) -> str:
    """Start a Ray head on this machine with Ray's token authentication on, the token in this
    user's private file (it outlives this command; `ray stop` stops it)."""
    ray_cli = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
    if ray_cli is None:
        raise AotuiError(ErrorCode.E_INVALID_CMD, "no `ray` command: pip install 'aotui[fleet]'")
    env = os.environ | ray_env(make_token())
    done = subprocess.run(
        [ray_cli, "start", *LOCAL_HEAD, f"--num-cpus={cpus}", f"--port={port}"],
        capture_output=True, text=True, timeout=120, check=False, env=env,
    )  # fmt: skip
    if done.returncode != 0 and "already running" not in done.stdout + done.stderr:
        raise AotuiError(
            ErrorCode.E_UNAVAILABLE, f"`ray start --head` failed: {done.stderr.strip()[-800:]}"
        )
    return "auto"


def format_fleet(rows: list[dict[str, Any]]) -> str:
    """``aotui fleet status``'s table."""
    header = ("DESKTOP", "NODE", "STATE", "MEMORY", "LAST USE")
    table = [header]
    now = time.time()
    for row in rows:
        memory = row.get("memory") or 0
        table.append(
            (
                row["desktop"],
                row["node"][:12] or "-",
                row["state"],
                f"{memory / 1048576:.0f}M" if memory else "-",
                f"{now - row['last_use']:.0f}s ago",
            )
        )
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in table
    )


def on_fleet(args: argparse.Namespace, method: str, *call: Any, **params: Any) -> Any:
    """``Client.method`` on desktop ``--desktop`` of the fleet at ``--fleet`` (a one-command
    session: ``--session`` goes to the desktop as a parameter, as on one machine)."""
    from aotui.supervisor.fleet.client import FleetClient

    with FleetClient(args.fleet).desktop(args.desktop) as desktop:
        return getattr(desktop, method)(*call, **params)
