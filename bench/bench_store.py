"""Durability benchmarks (issue 5): ack latency by durability mode, supervisor crash recovery,
supervisor RSS and descriptors over a soak.

Run: ``.venv/bin/python bench/bench_store.py [soak seconds, default 60]``.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
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


def bench_ack_latency(n: int = 1000) -> dict[str, float]:
    """p50/p99 of an acknowledged state-changing execute, per durability mode."""
    figures = {}
    for mode in ("ack", "batch", "off"):
        desktop = Desktop([TEST_APPS / "echo"], durability=mode)
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
        label = {"ack": "durable (fsync per ack)", "batch": "batched (50 ms)", "off": "no store"}
        print(f"ack latency, {label[mode]:<24}: p50 {p50:.3f} ms, p99 {p99:.3f} ms")
        figures[f"ack_{mode}_p50_ms"], figures[f"ack_{mode}_p99_ms"] = p50, p99
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


def run() -> dict[str, float]:
    """Every durability figure."""
    figures: dict[str, float] = {}
    figures.update(bench_ack_latency())
    figures.update(bench_supervisor_crash())
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 and __name__ == "__main__" else 60.0
    figures.update(bench_soak(seconds))
    return figures


if __name__ == "__main__":
    run()
