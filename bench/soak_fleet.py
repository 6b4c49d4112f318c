"""The fleet's soak (issue 25): desktops under a command load for ``--minutes`` (default 30) while
worker nodes come and go — every ``--every`` seconds a node is added, then the node holding the
most desktops is lost without a goodbye (tests/fleet_cluster.py: a Ray cluster on this machine,
its state in a private PostgreSQL server, tests/stores.py).

The run keeps a chaos history (docs/chaos.md, tests/fleet_cluster.py's ``FleetHistory``) and
judges it at the end with the chaos checker: no acknowledged bump lost, none applied twice,
every command answered. It prints the checker's table, then one line::

    VERDICT PASS commands=… replies=… node_losses=… recoveries=… p50=…s p99=…s lost=0 twice=0
    unanswered=0 supervisors=10->10 actors=10->10

and exits 0 only when every check holds, every lost desktop answered again, and as many
supervisors and desktop actors run at the end as at the start (one per desktop).

Run: ``.venv/bin/python bench/soak_fleet.py [--minutes 30] [--desktops 10] [--every 150]``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import ray  # noqa: E402

from aotui.supervisor.chaos.check import format_report  # noqa: E402
from aotui.supervisor.fleet.actors import FleetSettings, router_actor  # noqa: E402
from aotui.supervisor.fleet.client import FleetClient  # noqa: E402
from bench.bench_store import _postgres  # noqa: E402
from tests.fleet_cluster import (  # noqa: E402
    OPEN,
    FleetHistory,
    add_node,
    counts,
    desktop_info,
    fleet_processes,
    percentile,
    ray_cluster,
)

ECHO = ROOT / "tests" / "apps" / "echo"


def _node_of(name: str) -> str:
    node: str = desktop_info(name)["node"]
    return node


def soak(minutes: float, desktops: int, every: float, history_path: Path) -> int:
    """Run the soak; print the checker's table and the VERDICT line; its exit status."""
    with _postgres() as url:
        if url is None:
            print("VERDICT FAIL the fleet needs PostgreSQL's server (apt-get install postgresql)")
            return 1
        config = f'apps = ["{ECHO}"]\ndurability = "ack"\n'
        with (
            tempfile.TemporaryDirectory(prefix="fleet-", dir="/tmp") as runtime,
            ray_cluster() as (cluster, workers),
        ):
            settings = FleetSettings(url, config, runtime, num_cpus=0.01, memory=64 << 20)
            ray.get(router_actor(settings).get_settings.remote(), timeout=120)
            client = FleetClient(cluster.address)
            return _run(client, cluster, workers, runtime, minutes, desktops, every, history_path)


def _run(
    client: FleetClient,
    cluster: Any,
    workers: list[Any],
    runtime: str,
    minutes: float,
    count: int,
    every: float,
    history_path: Path,
) -> int:
    names = [f"soak{i}" for i in range(count)]
    desktops = {name: client.desktop(name) for name in names}
    openers = [threading.Thread(target=d.execute, args=(OPEN,)) for d in desktops.values()]
    for opener in openers:
        opener.start()
    for opener in openers:
        opener.join(300)
    at_start = fleet_processes(runtime)
    plan = {"minutes": minutes, "desktops": count, "every_s": every}
    history = FleetHistory(history_path, plan)
    began = time.monotonic()
    deadline = began + minutes * 60
    stop = threading.Event()
    loads = [
        threading.Thread(target=history.load, args=(name, desktops[name], stop), daemon=True)
        for name in names
    ]
    for thread in loads:
        thread.start()
    losses = 0
    lost_pids: list[int] = []
    not_back: list[str] = []
    while time.monotonic() + every < deadline:
        time.sleep(every / 2)
        workers.append(add_node(cluster))  # nodes come...
        time.sleep(every / 2)
        placed = {name: _node_of(name) for name in names}
        victim = max(workers, key=lambda node: list(placed.values()).count(node.node_id))
        moved = {name: desktops[name] for name in names if placed[name] == victim.node_id}
        before = len(history.recoveries)
        lost_pids += history.lose_node(cluster, victim, moved, client)  # ...and go
        workers.remove(victim)
        losses += 1
        back = len(history.recoveries) - before
        if back < len(moved):
            not_back.append(f"loss {losses}: {len(moved) - back} of {len(moved)} not back")
        print(
            f"[{(time.monotonic() - began) / 60:5.1f} min] node loss {losses}: "
            f"{len(moved)} desktops moved, {back} answered again; "
            f"{history.commands} commands so far",
            flush=True,
        )
    with contextlib.suppress(Exception):
        time.sleep(max(0.0, deadline - time.monotonic()))
    stop.set()
    for thread in loads:
        thread.join(180)
    stuck = [thread for thread in loads if thread.is_alive()]
    report = history.finish(desktops, lost_pids, began)
    at_end = fleet_processes(runtime)
    print(format_report(report))
    found = counts(report)
    recoveries = history.recoveries
    failures = [
        *(["checks"] if not report.ok else []),
        *(f"{what}={n}" for what, n in found.items() if n),
        *not_back,
        *([f"{len(stuck)} loads never answered"] if stuck else []),
        *(
            f"{what} {at_start[what]}->{at_end[what]} (one per desktop: {count})"
            for what in ("supervisors", "actors")
            if not at_start[what] == at_end[what] == count
        ),
    ]
    verdict = "PASS" if not failures else "FAIL (" + "; ".join(failures) + ")"
    print(
        f"VERDICT {verdict} commands={history.commands} replies={history.replies} "
        f"errors={len(history.errors)} node_losses={losses} recoveries={len(recoveries)} "
        f"p50={percentile(recoveries, 50):.2f}s p99={percentile(recoveries, 99):.2f}s "
        f"lost={found['lost']} twice={found['twice']} unanswered={found['unanswered']} "
        f"supervisors={at_start['supervisors']}->{at_end['supervisors']} "
        f"actors={at_start['actors']}->{at_end['actors']} history={history.path}",
        flush=True,
    )
    for error in history.errors[:10]:
        print(f"  error: {error}")
    return 0 if not failures else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="how long (default 30)")
    parser.add_argument("--desktops", type=int, default=10, help="desktops under load (10)")
    parser.add_argument(
        "--every", type=float, default=150.0, help="seconds between node losses (150)"
    )
    parser.add_argument(
        "--history", type=Path, default=None, help="where the history goes (a new temp file)"
    )
    args = parser.parse_args(argv)
    path = args.history
    if path is None:
        fd, name = tempfile.mkstemp(prefix="soak-fleet-", suffix=".jsonl")
        os.close(fd)
        path = Path(name)
    return soak(args.minutes, args.desktops, args.every, path)


if __name__ == "__main__":
    sys.exit(main())
