"""Desktop benchmarks (issue 3): round trip, snapshot pull, open latency, start paths, memory.

Run: ``.venv/bin/python bench/bench_desktop.py`` (or ``make bench`` for every benchmark).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aotui.supervisor.interface.launch import DesktopLaunch, launch_desktop  # noqa: E402

TEST_APPS = ROOT / "tests" / "apps"


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Desktop:
    """A supervisor process in a temporary runtime directory."""

    def __init__(self, apps: list[Path], **settings: Any) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="aotui-bench-"))
        self.tmp.chmod(0o755)  # as root, workers run as per-app uids that must read the apps
        config = self.tmp / "desktop.toml"
        lines = ["apps = " + json.dumps([str(a) for a in apps])]
        lines += [f"{k} = {json.dumps(v)}" for k, v in settings.items()]
        config.write_text("\n".join(lines) + "\n")
        launch = DesktopLaunch(
            "bench",
            config,
            self.tmp / "run",
            env={**os.environ, "AOTUI_HOME": str(self.tmp / "home")},
            log=self.tmp / "supervisor.out",  # quoted when it fails to start
            cwd=ROOT,
        )
        self.supervisor = launch_desktop(launch)
        self.process = self.supervisor.process
        self.client = self.supervisor.client(timeout_s=60)

    def close(self) -> None:
        self.client.close()
        self.supervisor.stop(30)
        shutil.rmtree(self.tmp, ignore_errors=True)


def _copies(source: Path, count: int, into: Path) -> list[Path]:
    """``count`` copies of an app with distinct manifest ids."""
    dirs = []
    into.chmod(0o755)  # as root, workers run as per-app uids that must read the apps
    for i in range(count):
        target = into / f"{source.name}{i}"
        shutil.copytree(source, target)
        manifest = json.loads((target / "aoapp.json").read_text())
        manifest["id"] = f"{manifest['id']}{i}"
        manifest["name"] = f"{manifest['name']} {i}"
        (target / "aoapp.json").write_text(json.dumps(manifest))
        dirs.append(target)
    return dirs


def bench_round_trip(n: int = 2000) -> dict[str, float]:
    """Client → supervisor → worker → ack with a no-op handler."""
    desktop = Desktop([TEST_APPS / "echo"])
    try:
        client = desktop.client
        client.execute("<context>open --application app_0</context>")
        client.snapshot()
        command = '<context app_id="app_0" view_id="view_0">execute noop</context>'
        for _ in range(200):
            client.execute(command)
        samples = []
        for _ in range(n):
            began = time.perf_counter()
            client.execute(command)
            samples.append((time.perf_counter() - began) * 1000)
    finally:
        desktop.close()
    p50, p99 = _pct(samples, 0.5), _pct(samples, 0.99)
    print(
        f"round trip (no-op execute, {n} calls): p50 {p50:.3f} ms (target ≤ 1) "
        f"{'PASS' if p50 <= 1 else 'MISS'}, p99 {p99:.3f} ms (target ≤ 5) "
        f"{'PASS' if p99 <= 5 else 'MISS'}"
    )
    return {"round_trip_p50_ms": p50, "round_trip_p99_ms": p99}


def bench_snapshot(n: int = 300) -> dict[str, float]:
    """Snapshot pull with 10 apps each showing a 100-item list."""
    with tempfile.TemporaryDirectory() as tmp:
        apps = _copies(TEST_APPS / "lister", 10, Path(tmp))
        desktop = Desktop(apps)
        try:
            client = desktop.client
            client.execute(
                "<context>"
                + ";".join(f"open --application app_{i}" for i in range(10))
                + "</context>"
            )
            size = len(client.snapshot())
            samples = []
            for _ in range(n):
                began = time.perf_counter()
                client.snapshot()
                samples.append((time.perf_counter() - began) * 1000)
        finally:
            desktop.close()
    p50 = _pct(samples, 0.5)
    print(
        f"snapshot pull (10 apps × 100-item list, {size / 1024:.0f} KB): p50 {p50:.2f} ms "
        f"(target ≤ 5) {'PASS' if p50 <= 5 else 'MISS'}, p99 {_pct(samples, 0.99):.2f} ms"
    )
    return {"snapshot_p50_ms": p50}


def bench_open(n: int = 30) -> dict[str, float]:
    """``open`` → first fragment (the open command returns once the first views arrived)."""
    desktop = Desktop([TEST_APPS / "echo"])
    samples = []
    try:
        client = desktop.client
        for _ in range(n):
            began = time.perf_counter()
            client.execute("<context>open --application app_0</context>")
            samples.append((time.perf_counter() - began) * 1000)
            client.execute("<context>close --application app_0</context>")
    finally:
        desktop.close()
    p50 = _pct(samples, 0.5)
    print(
        f"open → first fragment (zygote fork, {n} opens): p50 {p50:.1f} ms (target ≤ 50) "
        f"{'PASS' if p50 <= 50 else 'MISS'}"
    )
    return {"open_p50_ms": p50}


def bench_start_paths(n: int = 10) -> dict[str, float]:
    """Process start to 'imports done' with spawn, forkserver (preloaded) and our zygote fork."""
    import multiprocess as mp

    sys.path.insert(0, str(ROOT / "bench"))
    from _start_target import ready  # type: ignore[import-not-found]

    results = {}
    for method in ("spawn", "forkserver"):
        ctx = mp.get_context(method)
        if method == "forkserver":
            ctx.set_forkserver_preload(["zmq", "msgpack", "lxml.html", "_start_target"])
        samples = []
        for _ in range(n + 1):
            parent, child = ctx.Pipe()
            began = time.perf_counter()
            process = ctx.Process(target=ready, args=(child,))
            process.start()
            parent.recv()
            samples.append((time.perf_counter() - began) * 1000)
            process.join()
        results[method] = statistics.median(samples[1:])  # the first also starts the server
    for method, ms in results.items():
        print(f"start path {method:<10}: {ms:6.1f} ms to a worker with zmq/msgpack/lxml loaded")
    return {f"start_{k}_ms": v for k, v in results.items()}


def bench_memory(apps: int = 50) -> dict[str, float]:
    """Supervisor RSS with 50 running apps, and a worker's USS."""
    with tempfile.TemporaryDirectory() as tmp:
        dirs = _copies(TEST_APPS / "echo", apps, Path(tmp))
        desktop = Desktop(dirs)
        try:
            client = desktop.client
            client.execute(
                "<context>"
                + ";".join(f"open --application app_{i}" for i in range(apps))
                + "</context>"
            )
            for _ in range(20):
                client.snapshot()
            status = client.status()
            running = sum(row["state"] == "running" for row in status["apps"])
            rss = psutil.Process(status["pid"]).memory_info().rss / 2**20
            uss = [
                psutil.Process(row["pid"]).memory_full_info().uss / 2**20
                for row in status["apps"][:5]
            ]
        finally:
            desktop.close()
    print(
        f"supervisor RSS with {running} running apps: {rss:.1f} MB (target ≤ 80) "
        f"{'PASS' if rss <= 80 else 'MISS'}; worker USS median {statistics.median(uss):.1f} MB"
    )
    return {"supervisor_rss_mb": rss, "worker_uss_mb": statistics.median(uss)}


def run() -> dict[str, float]:
    """Every desktop figure."""
    figures: dict[str, float] = {}
    for bench in (bench_round_trip, bench_snapshot, bench_open, bench_start_paths, bench_memory):
        figures.update(bench())
    return figures


if __name__ == "__main__":
    run()
