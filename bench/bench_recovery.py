"""Recovery under load (issue 11 item 12): kills while three clients stream commands.

- worker kill -9 → that app ``running`` again (new pid), p50/p99, killed once a second;
- supervisor kill -9 → ``aotui up`` answering, and → every app ``running``, p50;
- the same supervisor kill on a quiet 10-app desktop → every app serving with its state.

The load is three clients, each in its own thread, executing ``bump`` on a random app of ten as
fast as the desktop answers; what they get during a restart (errors, timeouts) is counted, not
fatal. Run: ``.venv/bin/python -m bench.bench_recovery``.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aotui.protocol.errors import AotuiError  # noqa: E402
from aotui.supervisor.interface.client import Client, DesktopUnavailable  # noqa: E402
from aotui.supervisor.interface.launch import (  # noqa: E402
    DesktopLaunch,
    LaunchedDesktop,
    spawn_desktop,
)
from bench.bench_desktop import TEST_APPS, _copies, _pct  # noqa: E402

APPS = 10
LOAD_CLIENTS = 3
BUMP = '<context app_id="{app}" view_id="view_0">execute bump</context>'
#: Enough restarts in the window that a kill a second never makes the app ``failed``, and room
#: for the three clients' commands in flight at once (the default 2 refuses the third).
SETTINGS = {"max_restarts": 100, "restart_period_s": 60.0, "max_in_flight": 4}


class Load:
    """``LOAD_CLIENTS`` threads executing ``bump`` on random apps until stopped."""

    def __init__(self, name: str, runtime: Path) -> None:
        self.stop = threading.Event()
        self.answered = 0
        self.failed = 0
        #: Refusals by error code (what a client sees while an app or the desktop restarts).
        self.errors: Counter[str] = Counter()
        self._lock = threading.Lock()
        self.threads = [
            threading.Thread(target=self._stream, args=(name, runtime, seed), daemon=True)
            for seed in range(LOAD_CLIENTS)
        ]
        for thread in self.threads:
            thread.start()

    def _stream(self, name: str, runtime: Path, seed: int) -> None:
        rng = random.Random(seed)
        client = Client(name, str(runtime), timeout_s=2)
        try:
            while not self.stop.is_set():
                try:
                    client.execute(BUMP.format(app=f"app_{rng.randrange(APPS)}"))
                    ok = True
                except (AotuiError, DesktopUnavailable, OSError) as exc:
                    ok = False
                    self.errors[str(getattr(exc, "code", type(exc).__name__))] += 1
                    time.sleep(0.005)  # a desktop restarting is not hammered by a busy loop
                with self._lock:
                    self.answered += ok
                    self.failed += not ok
        finally:
            client.close()

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=10)


def installed_env(home: Path, cache: Path) -> dict[str, str]:
    """The environment of a desktop as installed: its modules' bytecode cached.

    A package installer compiles bytecode; a development shell may forbid writing it
    (``PYTHONDONTWRITEBYTECODE``), and then every start compiles ~70 modules again (+135 ms on
    this machine's supervisor alone). The cache is private to the run (``PYTHONPYCACHEPREFIX``),
    so the checkout gets no ``__pycache__``.
    """
    env = {**os.environ, "AOTUI_HOME": str(home), "PYTHONPYCACHEPREFIX": str(cache)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _start(config: Path, runtime: Path, home: Path) -> LaunchedDesktop:
    """Start the supervisor; its answer is waited for by the caller (timed)."""
    launch = DesktopLaunch(
        "recovery",
        config,
        runtime,
        env=installed_env(home, config.parent / "pycache"),
        log=config.parent / "supervisor.out",  # why a start failed
        cwd=ROOT,
    )
    return spawn_desktop(launch)


def _until(condition: Any, what: str, timeout_s: float = 30.0, pause_s: float = 0.002) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if condition():
                return
        except (AotuiError, DesktopUnavailable):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not happen in {timeout_s:.0f} s")
        time.sleep(pause_s)


def _all_running(client: Client, before: set[int] | None = None) -> bool:
    rows = client.call("status", timeout_s=1)["apps"]
    pids = {row["pid"] for row in rows}
    fresh = before is None or not pids & before
    return fresh and all(row["state"] == "running" and row["pid"] for row in rows)


class _Desktop:
    """A supervisor of ``APPS`` echo apps, restartable after kill -9 (same store, same socket)."""

    def __init__(self, tmp: Path) -> None:
        dirs = _copies(TEST_APPS / "echo", APPS, tmp)
        self.config = tmp / "desktop.toml"
        lines = ["apps = " + json.dumps([str(d) for d in dirs])]
        lines += [f"{key} = {json.dumps(value)}" for key, value in SETTINGS.items()]
        self.config.write_text("\n".join(lines) + "\n")
        self.runtime, self.home = tmp / "run", tmp / "home"
        self.supervisor = _start(self.config, self.runtime, self.home)
        self.supervisor.wait_answering()
        self.client = self.supervisor.client(timeout_s=30)
        opens = ";".join(f"open --application app_{i}" for i in range(APPS))
        self.client.execute(f"<context>{opens}</context>")

    def kill(self) -> set[int]:
        """kill -9 the supervisor; returns the pids of the workers it had (they die with it)."""
        family = psutil.Process(self.supervisor.pid).children(recursive=True)
        workers = {row["pid"] for row in self.client.status()["apps"]}
        self.supervisor.kill()
        psutil.wait_procs(family, timeout=10)
        return workers

    def up(self) -> None:
        """Start the supervisor again and wait until it answers (probing every millisecond)."""
        self.supervisor = _start(self.config, self.runtime, self.home)
        self.supervisor.wait_answering(retry_s=0.001)

    def close(self) -> None:
        self.client.close()
        self.supervisor.stop(30)


def bench_worker_kill(kills: int = 20, gap_s: float = 1.0) -> dict[str, float]:
    """Worker kill -9 under load → the app ``running`` again with a new worker."""
    samples = []
    with tempfile.TemporaryDirectory(prefix="aotui-recovery-") as tmp:
        desktop = _Desktop(Path(tmp))
        load = Load("recovery", desktop.runtime)
        try:
            client = desktop.client
            for kill in range(kills):
                app = f"app_{kill % 2}"  # two apps, each killed every 2 s: earlier kills count
                row = next(r for r in client.status()["apps"] if r["app"] == app)
                began = time.perf_counter()
                os.kill(row["pid"], signal.SIGKILL)

                def back(app: str = app, old: int = row["pid"]) -> bool:
                    now = next(r for r in client.status()["apps"] if r["app"] == app)
                    return bool(now["state"] == "running" and now["pid"] not in (None, old))

                _until(back, f"{app} running again", pause_s=0.005)
                samples.append((time.perf_counter() - began) * 1000)
                time.sleep(gap_s / 2)
            answered, failed = load.answered, load.failed
        finally:
            load.close()
            desktop.close()
    p50, p99 = _pct(samples, 0.5), _pct(samples, 0.99)
    print(
        f"worker kill -9 under load → running ({kills} kills, {answered} commands answered, "
        f"{failed} refused): p50 {p50:.0f} ms, p99 {p99:.0f} ms"
    )
    return {"load_worker_kill_p50_ms": p50, "load_worker_kill_p99_ms": p99}


def bench_supervisor_kill(runs: int = 5, loaded: bool = True) -> dict[str, float]:
    """Supervisor kill -9 (under load or quiet) → up → every app running, and serving its state.

    Quiet, "serving" means each app answered ``bump`` with its count plus one (the state came
    back); under load the counts move, so "running" is the status of every app with a new pid.
    """
    up_ms, running_ms, serving_ms = [], [], []
    with tempfile.TemporaryDirectory(prefix="aotui-recovery-") as tmp:
        desktop = _Desktop(Path(tmp))
        load = Load("recovery", desktop.runtime) if loaded else None
        client = desktop.client
        try:
            counts = {
                f"app_{i}": client.execute(BUMP.format(app=f"app_{i}"))["results"][0]
                for i in range(APPS)
            }
            for run in range(runs + 1):  # the first start after the desktop's compiles bytecode
                time.sleep(0.5)
                before = desktop.kill()
                began = time.perf_counter()
                desktop.up()
                up = (time.perf_counter() - began) * 1000
                if loaded:
                    _until(lambda b=before: _all_running(client, b), "all running", pause_s=0.005)
                    running = (time.perf_counter() - began) * 1000
                    if run:
                        up_ms.append(up)
                        running_ms.append(running)
                    continue
                for app, count in counts.items():
                    result = client.execute(BUMP.format(app=app))["results"][0]
                    if result != count + 1:
                        raise RuntimeError(f"{app} lost state: {result} after {count}")
                    counts[app] = result
                if run:
                    up_ms.append(up)
                    serving_ms.append((time.perf_counter() - began) * 1000)
        finally:
            if load is not None:
                load.close()
            desktop.close()
    if not loaded:
        p50 = _pct(serving_ms, 0.5)
        print(
            f"quiet supervisor kill -9 → {APPS} apps serving with state ({runs} kills): "
            f"p50 {p50:.0f} ms, worst {max(serving_ms):.0f} ms (up p50 {_pct(up_ms, 0.5):.0f} ms)"
        )
        return {"quiet_crash_serving_p50_ms": p50, "quiet_crash_up_p50_ms": _pct(up_ms, 0.5)}
    print(
        f"supervisor kill -9 under load → up p50 {_pct(up_ms, 0.5):.0f} ms, all {APPS} apps "
        f"running p50 {_pct(running_ms, 0.5):.0f} ms (worst {max(running_ms):.0f} ms)"
    )
    return {
        "load_crash_up_p50_ms": _pct(up_ms, 0.5),
        "load_crash_running_p50_ms": _pct(running_ms, 0.5),
    }


def run() -> dict[str, float]:
    """Every recovery figure: worker kill and supervisor kill under load, supervisor kill quiet."""
    figures = bench_worker_kill()
    figures.update(bench_supervisor_kill(loaded=True))
    figures.update(bench_supervisor_kill(loaded=False))
    return figures


if __name__ == "__main__":
    run()
