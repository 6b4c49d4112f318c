"""What Ray's worker niceness costs a fleet's desktops: a call through the fleet with the
desktops' processes at niceness 15 (Ray's default ``worker_niceness``) and at 0 (what ``aotui
fleet up --local`` sets), on an idle machine and beside two busy loops at niceness 0 (a node
doing other work).

Each case starts its own cluster (tests/fleet_cluster.py) and PostgreSQL server
(tests/stores.py) and times ``ping`` and an acknowledged ``exec`` (a bump, with its command id)
through the fleet and on a local Client of the same supervisor, p50 of each.

Run: ``.venv/bin/python bench/bench_fleet_priority.py [calls per figure, default 200]``.
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import ray  # noqa: E402

from aotui.supervisor.fleet.actors import FleetSettings, router_actor  # noqa: E402
from aotui.supervisor.fleet.client import FleetClient  # noqa: E402
from aotui.supervisor.interface.client import Client  # noqa: E402
from bench.bench_desktop import TEST_APPS, _copies  # noqa: E402
from bench.bench_fleet import BUMP, OPEN, _config, _info, _timed  # noqa: E402
from bench.bench_store import _postgres  # noqa: E402
from tests.fleet_cluster import ray_cluster  # noqa: E402

BUSY_LOOPS = 2


@contextlib.contextmanager
def _busy(loops: int) -> Iterator[None]:
    """``loops`` processes spinning at niceness 0 until the block ends."""
    spinning = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(loops)]
    try:
        yield
    finally:
        for process in spinning:
            process.kill()
            process.wait()


def measure(url: str, niceness: int, loops: int, n: int) -> dict[str, float]:
    """p50 (ms) of ping and exec through the fleet and direct, desktops at ``niceness``."""
    with (
        tempfile.TemporaryDirectory(prefix="fleet-", dir="/tmp") as runtime,
        ray_cluster(system_config={"worker_niceness": niceness}) as (cluster, _workers),
    ):
        shelf = Path(runtime) / "apps"
        shelf.mkdir()
        Path(runtime).chmod(0o755)  # as root, the workers' own uids read the apps
        apps = _copies(TEST_APPS / "echo", 1, shelf)
        settings = FleetSettings(url, _config(apps), runtime, num_cpus=0.05, memory=64 << 20)
        ray.get(router_actor(settings).get_settings.remote(), timeout=120)
        name = f"priority-{niceness}-{loops}"
        desktop = FleetClient(cluster.address).desktop(name)
        desktop.execute(OPEN.format(app="app_0"))
        direct = Client(name, _info(name)["socket"])
        bump = BUMP.format(app="app_0")
        try:
            with _busy(loops):
                ping, ping_direct = _timed(n, desktop.ping, direct.ping)
                ran, ran_direct = _timed(
                    n, lambda: desktop.execute(bump), lambda: direct.execute(bump)
                )
        finally:
            direct.close()
            desktop.close()
    return {"ping": ping, "ping_direct": ping_direct, "exec": ran, "exec_direct": ran_direct}


def run(n: int = 200) -> dict[str, float]:
    figures: dict[str, float] = {}
    with _postgres() as url:
        if url is None:
            print("the fleet needs PostgreSQL: no figures")
            return figures
        for loops in (0, BUSY_LOOPS):
            beside = f"beside {loops} busy loops" if loops else "idle"
            for niceness in (15, 0):
                got = measure(url, niceness, loops, n)
                print(
                    f"{beside}, desktops at niceness {niceness:2d}: "
                    f"ping fleet {got['ping']:.2f} ms (direct {got['ping_direct']:.2f}), "
                    f"exec fleet {got['exec']:.2f} ms (direct {got['exec_direct']:.2f})",
                    flush=True,
                )
                for key, value in got.items():
                    figures[f"{key}_nice{niceness}_busy{loops}_p50_ms"] = value
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(
        description="A fleet call's p50 with the desktops at niceness 15 (Ray's default) and 0 "
        "(aotui fleet up --local's), idle and beside busy loops; four clusters, a few minutes.",
    )
    parser.add_argument("calls", nargs="?", type=int, default=200, help="calls per figure")
    args = parser.parse_args()
    if args.calls < 1:
        parser.error(f"calls must be at least 1, not {args.calls}")
    run(args.calls)


if __name__ == "__main__":
    main()
