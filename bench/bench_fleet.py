"""The fleet's figures (issue 25), on a Ray cluster on this machine (a head and two worker nodes,
tests/fleet_cluster.py) and a private PostgreSQL server (tests/stores.py):

- a desktop call through the fleet vs the same call on a local Client of the same supervisor,
  p50 (goal: at most +2 ms);
- a node lost without a goodbye → each of its desktops answering again with its state, p50/p99
  (goals 5 s / 15 s);
- a hibernated 10-app desktop resumed → its first snapshot, p50 (goal 1 s), with 10 and with
  1,000 hibernated desktops' rows (the fleet's table, and each one's store rows: apps, parts
  and meta, copies of the measured desktop's);
- one acknowledged store write, PostgreSQL vs SQLite, p50 (goal at most 3x).

Run: ``.venv/bin/python bench/bench_fleet.py [rounds of node loss, default 3]``.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import ray  # noqa: E402

from aotui.supervisor.fleet.actors import (  # noqa: E402
    DESKTOP_PREFIX,
    NAMESPACE,
    FleetSettings,
    desktop_actor,
    router_actor,
)
from aotui.supervisor.fleet.client import FleetClient, FleetDesktop  # noqa: E402
from aotui.supervisor.fleet.registry import Registry  # noqa: E402
from aotui.supervisor.interface.client import Client  # noqa: E402
from bench.bench_desktop import TEST_APPS, _copies, _pct  # noqa: E402
from bench.bench_store import _postgres, bench_store_writes  # noqa: E402
from tests.fleet_cluster import add_node, kill_node, ray_cluster  # noqa: E402

BUMP = '<context app_id="{app}" view_id="view_0">execute bump</context>'
OPEN = "<context>open --application {app}</context>"


def _config(apps: list[Path]) -> str:
    listed = ", ".join(f'"{app}"' for app in apps)
    return f'apps = [{listed}]\ndurability = "ack"\n'


def _info(name: str) -> dict[str, Any]:
    actor = ray.get_actor(DESKTOP_PREFIX + name, namespace=NAMESPACE)
    asked: Any = actor.info.remote()
    info: dict[str, Any] = ray.get(asked, timeout=60)
    return info


def bench_call(fleet: FleetClient, n: int = 300) -> dict[str, float]:
    """p50 of ``ping`` and of an acknowledged ``exec`` (a bump), through the fleet and direct.

    The fleet gives every ``exec`` a command id (stored with its effect); the direct ``exec`` is
    timed without one and with one, so the fleet's own cost (the Ray hop) and the id's are told
    apart."""
    desktop = fleet.desktop("bench-call")
    desktop.execute(OPEN.format(app="app_0"))
    info = _info("bench-call")
    direct = Client("bench-call", info["socket"])
    ids = itertools.count()
    figures: dict[str, float] = {}
    try:
        bump = BUMP.format(app="app_0")
        # The calls timed one after another, round after round, so a change of the machine's
        # load meanwhile weighs on each alike.
        figures["ping"], figures["ping_direct"] = _timed(n, desktop.ping, direct.ping)
        figures["exec"], figures["exec_direct"], figures["exec_direct_id"] = _timed(
            n,
            lambda: desktop.execute(bump),
            lambda: direct.execute(bump),
            lambda: direct.execute(bump, command_id=f"bench-{next(ids)}"),
        )
    finally:
        direct.close()
        desktop.close()
    for what in ("ping", "exec"):
        extra = figures[what] - figures[f"{what}_direct"]
        print(
            f"{what} p50: fleet {figures[what]:.2f} ms, direct {figures[f'{what}_direct']:.2f} ms, "
            f"+{extra:.2f} ms (goal ≤ +2 ms)"
        )
    with_id = figures["exec_direct_id"]
    print(
        f"  of which the command id (direct exec with one: {with_id:.2f} ms): "
        f"+{with_id - figures['exec_direct']:.2f} ms; the fleet's hop: "
        f"+{figures['exec'] - with_id:.2f} ms"
    )
    return {f"fleet_call_{key}_p50_ms": value for key, value in figures.items()}


def _timed(n: int, *calls: Any) -> tuple[float, ...]:
    """p50 (ms) of each call, timed in turn ``n`` times each after 10 warm-ups."""
    for _ in range(10):
        for call in calls:
            call()
    samples: list[list[float]] = [[] for _ in calls]
    for _ in range(n):
        for call, into in zip(calls, samples, strict=True):
            began = time.perf_counter()
            call()
            into.append((time.perf_counter() - began) * 1000)
    return tuple(_pct(taken, 0.5) for taken in samples)


def bench_node_loss(
    fleet: FleetClient, cluster: Any, workers: list[Any], rounds: int
) -> dict[str, float]:
    """Each round: 4 desktops, the worker holding most of them killed; how long each of its
    desktops takes to answer an acknowledged bump again (and that its count went on)."""
    samples: list[float] = []
    for round_ in range(rounds):
        names = [f"loss{round_}-{i}" for i in range(4)]
        desktops = {name: fleet.desktop(name, failover_s=60) for name in names}
        counts = {}
        for name, desktop in desktops.items():
            desktop.execute(OPEN.format(app="app_0"))
            counts[name] = desktop.execute(BUMP.format(app="app_0"))["results"][0]
        placed = {name: _info(name)["node"] for name in names}
        victim = max(workers, key=lambda node: list(placed.values()).count(node.node_id))
        lost = [name for name in names if placed[name] == victim.node_id]
        took: dict[str, float] = {}

        def again(name: str, desktop: FleetDesktop, began: float, before: int) -> None:
            count = desktop.execute(BUMP.format(app="app_0"))["results"][0]
            took[name] = time.monotonic() - began  # noqa: B023 -- joined in this iteration
            assert count == before + 1, (name, count, before)

        began, wall = time.monotonic(), time.time()
        kill_node(cluster, victim)
        workers.remove(victim)
        threads = [
            threading.Thread(target=again, args=(name, desktops[name], began, counts[name]))
            for name in lost
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        samples += [took[name] for name in lost if name in took]
        # Where the time went: Ray noticing the loss and starting the actor again elsewhere,
        # then its supervisor starting from PostgreSQL.
        phases = []
        for name in lost:
            info = _info(name)
            born, ready = info["born"] - wall, info["started"][1] - wall
            phases.append(f"{born:.1f}/{ready:.1f}/{took.get(name, float('nan')):.1f}")
        print(
            f"round {round_}: node lost with {len(lost)} desktops; actor again / supervisor "
            f"ready / answering, s after the loss: {', '.join(phases)}"
        )
        for desktop in desktops.values():
            desktop.close()
        workers.append(add_node(cluster))
    p50, p99 = _pct(samples, 0.5), _pct(samples, 0.99)
    print(
        f"node loss -> answering again with state: p50 {p50:.2f} s, p99 {p99:.2f} s "
        f"({len(samples)} desktops; goals 5 s / 15 s)"
    )
    return {"fleet_node_loss_p50_s": p50, "fleet_node_loss_p99_s": p99}


def bench_resume(
    fleet: FleetClient, settings: FleetSettings, runs: int = 8, released: bool = False
) -> float:
    """p50 of resume → first snapshot of a hibernated desktop of ``settings``' apps; with
    ``released``, its actor gone too (only rows left: the call makes a new actor)."""
    name = "bench-released" if released else "bench-resume"
    actor = desktop_actor(name, settings)
    desktop = fleet.desktop(name)
    opened = desktop.status()["apps"]
    for app in opened:  # every app open: they all start again on resume
        desktop.execute(OPEN.format(app=app["app"]))
    samples = []
    for _ in range(runs):
        assert ray.get(actor.hibernate.remote(), timeout=60)
        if released:
            ray.kill(actor, no_restart=True)
            while _exists(name):
                time.sleep(0.05)
        began = time.perf_counter()
        text = desktop.snapshot()
        samples.append((time.perf_counter() - began) * 1000)
        assert "app_0" in text
        if released:
            actor = ray.get_actor(DESKTOP_PREFIX + name, namespace=NAMESPACE)
    print(
        f"resume ({len(opened)} apps open) -> first snapshot: "
        + ", ".join(f"{x:.0f}" for x in samples)
        + " ms"
    )
    desktop.close()
    return _pct(samples, 0.5)


def _copy_desktop(url: str, name: str, copies: int) -> None:
    """Desktop ``name``'s store rows (its apps, their parts, its meta) ``copies`` times over,
    as ``held-0`` … : what hibernated desktops cost the store beside their registry rows."""
    import psycopg

    columns = {
        "meta": "key, value",
        "apps": "app, position, entry, data, checksum",
        "app_parts": "app, part, data, checksum",
    }
    with psycopg.connect(url, autocommit=True) as db:
        for table, kept in columns.items():
            db.execute(
                f"INSERT INTO aotui.{table} (desktop, {kept}) "
                f"SELECT 'held-' || g, {kept} FROM aotui.{table}, generate_series(0, %s) g "
                "WHERE desktop = %s",
                (copies - 1, name),
            )
        held = db.execute("SELECT count(*) FROM aotui.apps WHERE desktop LIKE 'held-%%'")
        (apps,) = held.fetchone() or (0,)
        print(f"store rows of {copies} hibernated desktops beside it: {apps} apps")


def _exists(name: str) -> bool:
    try:
        ray.get_actor(DESKTOP_PREFIX + name, namespace=NAMESPACE)
    except ValueError:
        return False
    return True


def run(rounds: int = 3) -> dict[str, float]:
    """Every figure (``rounds`` rounds of node loss), printed as it is measured."""
    figures: dict[str, float] = {}
    with _postgres() as url:
        if url is None:
            print("the fleet needs PostgreSQL: no fleet figures")
            return figures
        figures.update(bench_store_writes(url, n=1000))
        with (
            tempfile.TemporaryDirectory(prefix="fleet-", dir="/tmp") as runtime,
            ray_cluster() as (cluster, workers),
        ):
            shelf = Path(runtime) / "apps"
            shelf.mkdir()
            Path(runtime).chmod(0o755)  # as root, the workers' own uids read the apps
            apps = _copies(TEST_APPS / "echo", 10, shelf)
            ten = FleetSettings(url, _config(apps), runtime, num_cpus=0.05, memory=64 << 20)
            ray.get(router_actor(ten).get_settings.remote(), timeout=120)
            fleet = FleetClient(cluster.address)
            figures.update(bench_call(fleet))
            resume_10 = bench_resume(fleet, ten)
            resume_released = bench_resume(fleet, ten, runs=4, released=True)
            print(
                f"resume of a released desktop (only rows: a new actor first): "
                f"p50 {resume_released:.0f} ms"
            )
            figures["fleet_resume_released_p50_ms"] = resume_released
            registry = Registry(url)
            for i in range(1000):
                registry.record(f"held-{i}", "hibernated", "", time.time())
            registry.close()
            _copy_desktop(url, "bench-resume", 1000)
            resume_1000 = bench_resume(fleet, ten)
            print(
                f"resume of a hibernated 10-app desktop -> first snapshot: p50 {resume_10:.0f} ms "
                f"(goal ≤ 1000 ms); with 1,000 hibernated rows beside it: {resume_1000:.0f} ms"
            )
            figures["fleet_resume_p50_ms"] = resume_10
            figures["fleet_resume_1000_p50_ms"] = resume_1000
            figures.update(bench_node_loss(fleet, cluster, workers, rounds))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(
        description="The fleet's figures (issue 25) on a Ray cluster and a PostgreSQL server "
        "started on this machine; a few minutes.",
    )
    parser.add_argument(
        "rounds", nargs="?", type=int, default=3, help="rounds of node loss (default 3)"
    )
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"rounds must be at least 1, not {args.rounds}")
    run(args.rounds)


if __name__ == "__main__":
    main()
