"""Durability benchmarks (issue 5): ack latency by durability mode and by store (SQLite, and
PostgreSQL on a private server started for the run, issue 25), supervisor crash recovery,
supervisor RSS and descriptors over a soak.

Run: ``.venv/bin/python bench/bench_store.py [soak seconds, default 60]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aotui.supervisor.interface.launch import (  # noqa: E402
    DesktopLaunch,
    LaunchedDesktop,
    spawn_desktop,
)
from bench.bench_desktop import TEST_APPS, Desktop, _copies, _pct  # noqa: E402

BUMP = '<context app_id="{app}" view_id="view_0">execute bump</context>'


@contextlib.contextmanager
def _postgres() -> Iterator[str | None]:
    """A database on a private PostgreSQL server (tests/stores.py), or ``None`` without one."""
    from tests.stores import private_postgres

    try:
        with private_postgres() as server:
            yield server.create_database("bench")
    except BaseException as exc:  # pytest's Skipped: no server binaries here
        if type(exc).__name__ != "Skipped":
            raise
        print(f"PostgreSQL figures left out: {exc}")
        yield None


def bench_store_writes(url: str | None, n: int = 2000) -> dict[str, float]:
    """p50/p99 of one acknowledged store write (``save_apps`` of one app, durable), per store."""
    from aotui.supervisor.store.base import open_store
    from aotui.supervisor.store.state import AppEntry, DesktopState

    figures: dict[str, float] = {}
    entry = AppEntry("app_0", "com.bench", "/nowhere", "running", ["root"], [], {}, {"n": 0})
    header = DesktopState("bench-writes", 1.0, 1.0, 1, [])
    with tempfile.TemporaryDirectory(prefix="aotui-store-") as tmp:
        for kind, location in (("sqlite", ""), ("postgresql", url)):
            if location is None:
                continue
            store = open_store(location, "bench-writes", Path(tmp) / "bench.db")
            try:
                samples = []
                for i in range(n):
                    entry.data = {"n": i}
                    began = time.perf_counter()
                    store.save_apps(header, [entry], {"app_0": 0})
                    samples.append((time.perf_counter() - began) * 1000)
            finally:
                store.close()
            p50, p99 = _pct(samples, 0.5), _pct(samples, 0.99)
            print(f"store write, {kind:<10} (durable commit): p50 {p50:.3f} ms, p99 {p99:.3f} ms")
            figures[f"write_{kind}_p50_ms"], figures[f"write_{kind}_p99_ms"] = p50, p99
    if "write_postgresql_p50_ms" in figures:
        ratio = figures["write_postgresql_p50_ms"] / figures["write_sqlite_p50_ms"]
        print(f"store write p50, PostgreSQL / SQLite: {ratio:.1f}x (goal ≤ 3x)")
        figures["write_postgresql_vs_sqlite"] = ratio
    return figures


def bench_ack_latency(n: int = 1000, url: str | None = None) -> dict[str, float]:
    """p50/p99 of an acknowledged state-changing execute, per durability mode (and with the
    desktop in PostgreSQL at ``url``, when given)."""
    figures = {}
    modes = ["ack", "ack-postgresql", "batch", "off"] if url else ["ack", "batch", "off"]
    for mode in modes:
        settings = {"durability": mode.split("-")[0]}
        if mode == "ack-postgresql":
            settings["store"] = url or ""
        desktop = Desktop([TEST_APPS / "echo"], **settings)
        try:
            client = desktop.client
            client.execute("<context>open --application app_0</context>")
            for _ in range(100):
                client.execute(BUMP.format(app="app_0"))
            samples = []
            for _ in range(n):
                began = time.perf_counter()
                client.execute(BUMP.format(app="app_0"))
                samples.append((time.perf_counter() - began) * 1000)
        finally:
            desktop.close()
        p50, p99 = _pct(samples, 0.5), _pct(samples, 0.99)
        label = {
            "ack": "durable (fsync per ack)",
            "ack-postgresql": "durable, PostgreSQL",
            "batch": "batched (50 ms)",
            "off": "no store",
        }
        print(f"ack latency, {label[mode]:<24}: p50 {p50:.3f} ms, p99 {p99:.3f} ms")
        key = mode.replace("-", "_")
        figures[f"ack_{key}_p50_ms"], figures[f"ack_{key}_p99_ms"] = p50, p99
    return figures


def _start(config: Path, runtime: Path, home: Path) -> LaunchedDesktop:
    """Start the crash desktop and wait until it answers (probing every 5 ms while it starts)."""
    launch = DesktopLaunch(
        "crash",
        config,
        runtime,
        env={**os.environ, "AOTUI_HOME": str(home)},
        log=config.parent / "supervisor.out",  # quoted when it fails to start
        cwd=ROOT,
    )
    supervisor = spawn_desktop(launch)
    supervisor.wait_answering(retry_s=0.005)
    return supervisor


def bench_supervisor_crash(runs: int = 5, apps: int = 10) -> dict[str, float]:
    """kill -9 of the supervisor → `aotui up` → all 10 apps serving with their state."""
    samples = []
    with tempfile.TemporaryDirectory(prefix="aotui-crash-") as tmp_text:
        tmp = Path(tmp_text)
        dirs = _copies(TEST_APPS / "echo", apps, tmp)
        config = tmp / "desktop.toml"
        config.write_text("apps = " + json.dumps([str(d) for d in dirs]) + "\n")
        runtime, home = tmp / "run", tmp / "home"
        supervisor = _start(config, runtime, home)
        client = supervisor.client(timeout_s=30)
        try:
            client.execute(
                "<context>"
                + ";".join(f"open --application app_{i}" for i in range(apps))
                + "</context>"
            )
            counts = {
                f"app_{i}": client.execute(BUMP.format(app=f"app_{i}"))["results"][0]
                for i in range(apps)
            }
            for _ in range(runs):
                family = psutil.Process(supervisor.pid).children(recursive=True)
                supervisor.kill()
                psutil.wait_procs(family, timeout=10)
                began = time.perf_counter()
                supervisor = _start(config, runtime, home)
                for app, count in counts.items():
                    result = client.execute(BUMP.format(app=app))["results"][0]
                    if result != count + 1:
                        raise RuntimeError(f"{app} lost state: {result} after {count}")
                    counts[app] = result
                samples.append((time.perf_counter() - began) * 1000)
        finally:
            client.close()
            supervisor.stop(30)
    p50 = _pct(samples, 0.5)
    print(
        f"supervisor kill -9 → {apps}-app desktop serving with all state ({runs} crashes): "
        f"p50 {p50:.0f} ms, worst {max(samples):.0f} ms (target ≤ 1000) "
        f"{'PASS' if max(samples) <= 1000 else 'MISS'}"
    )
    return {"crash_recovery_p50_ms": p50, "crash_recovery_max_ms": max(samples)}


def bench_soak(seconds: float = 60.0) -> dict[str, float]:
    """Supervisor RSS and descriptors at start, after warm-up, at the end of a soak."""
    sys.path.insert(0, str(ROOT))
    from tests.soak import SOAK_APPS, SOAK_SETTINGS, run_soak

    apps = [TEST_APPS / a if (TEST_APPS / a).is_dir() else ROOT / "apps" / a for a in SOAK_APPS]
    desktop = Desktop(apps, **SOAK_SETTINGS)
    try:
        start = psutil.Process(desktop.process.pid)
        rss0, fds0 = start.memory_info().rss, start.num_fds()
        report = run_soak(desktop.client, desktop.process.pid, seconds)
    finally:
        desktop.close()
    mb = 2**20
    print(
        f"soak {seconds:.0f} s: {report.commands} commands, {report.kills} worker kills, "
        f"lost acks {len(report.lost)}, unanswered {len(report.unanswered)}, "
        f"errors {report.errors}"
    )
    print(
        f"supervisor RSS start {rss0 / mb:.1f} MB, warm {report.rss['warm'] / mb:.1f} MB, "
        f"end {report.rss['end'] / mb:.1f} MB ({report.growth():+.1f} % from warm-up; goal "
        f"≤ +10 %); fds start {fds0}, warm {report.fds['warm']}, end {report.fds['end']}; "
        f"load average {' '.join(f'{load:.1f}' for load in os.getloadavg())}"
    )
    for lost in report.lost[:10]:  # each one an acknowledged operation the app did not keep
        print(f"lost: {lost}")
    for code, messages in sorted(report.messages.items()):
        print(f"{code} (first {len(messages)}):")
        for message in messages:
            print(f"    {message}")
    print("supervisor RSS over the soak:\n" + report.rss_table())
    return {
        "soak_rss_warm_mb": report.rss["warm"] / mb,
        "soak_rss_end_mb": report.rss["end"] / mb,
        "soak_rss_growth_pct": report.growth(),
        "soak_fds_warm": report.fds["warm"],
        "soak_fds_end": report.fds["end"],
    }


def run(seconds: float = 60.0) -> dict[str, float]:
    """Every durability figure (the soak for ``seconds``)."""
    figures: dict[str, float] = {}
    with _postgres() as url:
        figures.update(bench_store_writes(url))
        figures.update(bench_ack_latency(url=url))
    figures.update(bench_supervisor_crash())
    figures.update(bench_soak(seconds))
    return figures


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="The durability figures (stores, acks, crashes).")
    parser.add_argument(
        "seconds", nargs="?", type=float, default=60.0, help="the soak's length (default 60)"
    )
    run(parser.parse_args().seconds)
