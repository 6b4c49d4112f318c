"""Sandbox benchmarks (issue 4): runaway memory, kill -9 recovery (beside circus), confinement.

Run: ``.venv/bin/python bench/bench_sandbox.py``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aotui.protocol.errors import AotuiError  # noqa: E402
from aotui.supervisor.workers.restart import STABLE_S  # noqa: E402
from bench.bench_desktop import TEST_APPS, Desktop, _pct  # noqa: E402


def bench_runaway_memory(runs: int = 5) -> dict[str, float]:
    """Time from crossing the memory limit to killed, and the peak private memory (USS, what the
    limit and the worker's memory cgroup count), sampled as fast as /proc allows (~0.3 ms)."""
    desktop = Desktop([TEST_APPS / "hog"])  # limit 128 MB
    limit = 128 * 2**20
    delays, peaks = [], []
    try:
        client = desktop.client
        for _ in range(runs):
            client.execute("<context>open --application app_0</context>")
            deadline = time.monotonic() + 10
            while client.status()["apps"][0]["state"] != "running":
                if time.monotonic() > deadline:
                    raise RuntimeError("the hog did not come back")
                time.sleep(0.01)
            pid = client.status()["apps"][0]["pid"]
            process = psutil.Process(pid)
            crossed = killed = None
            peak = 0

            def eat() -> None:
                try:
                    client_eat = desktop.client.__class__(
                        "bench", str(desktop.tmp / "run"), timeout_s=30
                    )
                    client_eat.execute(
                        '<context app_id="app_0" view_id="view_0">'
                        "execute eat --mb_per_step 4 --steps 400</context>"
                    )
                except AotuiError:
                    pass
                finally:
                    client_eat.close()

            eater = threading.Thread(target=eat)
            eater.start()
            while True:
                try:
                    rss = process.memory_full_info().uss
                    if process.status() == psutil.STATUS_ZOMBIE:
                        raise psutil.NoSuchProcess(pid)
                except psutil.NoSuchProcess:
                    killed = time.perf_counter()
                    break
                peak = max(peak, rss)
                if crossed is None and rss > limit:
                    crossed = time.perf_counter()
                time.sleep(0.0005)
            eater.join()
            if crossed is not None:
                delays.append((killed - crossed) * 1000)
            peaks.append(peak / limit)
    finally:
        desktop.close()
    delay = statistics.median(delays) if delays else 0.0
    print(
        f"runaway memory: limit→killed median {delay:.0f} ms over {len(delays)} runs "
        f"(target ≤ 200) {'PASS' if delays and delay <= 200 else 'MISS'}; "
        f"peak {max(peaks) * 100:.0f}% of limit (target ≤ 110%) "
        f"{'PASS' if max(peaks) <= 1.10 else 'MISS'}"
        + ("" if delays else " (the kernel limit stopped it before it crossed)")
    )
    return {"memory_kill_ms": delay, "memory_peak_ratio": max(peaks)}


def bench_kill_recovery(runs: int = 20) -> dict[str, float]:
    """kill -9 of a worker → serving again with its state restored."""
    # Each kill a first crash: the worker served STABLE_S before it (a crash sooner is a crash
    # loop, which backs off on purpose), and the kills never fill the restart window.
    desktop = Desktop([TEST_APPS / "echo"], restart_period_s=1.0, max_restarts=100)
    samples = []
    bump = '<context app_id="app_0" view_id="view_0">execute bump</context>'
    try:
        client = desktop.client
        client.execute("<context>open --application app_0</context>")
        count = client.execute(bump)["results"][0]
        for _ in range(runs):
            pid = client.status()["apps"][0]["pid"]
            began = time.perf_counter()
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while True:
                try:
                    result = client.execute(bump)["results"][0]
                    break
                except AotuiError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.001)
            samples.append((time.perf_counter() - began) * 1000)
            if result != count + 1:
                raise RuntimeError(f"state lost: count {result}, expected {count + 1}")
            count = result
            time.sleep(STABLE_S + 0.1)  # served long enough not to count as a crash loop
    finally:
        desktop.close()
    p50 = _pct(samples, 0.5)
    print(
        f"kill -9 → serving again with state ({runs} kills): p50 {p50:.1f} ms "
        f"(target ≤ 100) {'PASS' if p50 <= 100 else 'MISS'}, p99 {_pct(samples, 0.99):.1f} ms"
    )
    return {"kill_recovery_p50_ms": p50}


_CIRCUS_WORKER = textwrap.dedent(
    """
    import os, sys, time
    import zmq, msgpack, lxml.html  # the same imports as an aotui worker
    with open(sys.argv[1], "a") as ready:
        ready.write(f"{os.getpid()}\\n")
    while True:
        time.sleep(1)
    """
)


def bench_circus(runs: int = 10, check_delay: float = 1.0) -> dict[str, float]:
    """circus: kill -9 of an equivalent worker → respawned and ready.

    circus notices a dead process on its periodic check (``check_delay``, 1 s by default), so
    it is measured with its default and with a tight 0.05 s setting.
    """
    try:
        import circus  # noqa: F401
    except ImportError:
        print("circus not installed: pip install circus (in the bench extra)")
        return {}
    tmp = Path(tempfile.mkdtemp(prefix="aotui-circus-"))
    ready = tmp / "ready"
    ready.touch()
    (tmp / "worker.py").write_text(_CIRCUS_WORKER)
    (tmp / "circus.ini").write_text(
        textwrap.dedent(
            f"""
            [circus]
            check_delay = {check_delay}
            endpoint = ipc://{tmp}/endpoint
            pubsub_endpoint = ipc://{tmp}/pubsub
            statsd = False

            [watcher:worker]
            cmd = {sys.executable} {tmp}/worker.py {ready}
            numprocesses = 1
            respawn = True
            """
        )
    )
    circusd = subprocess.Popen(
        [sys.executable, "-m", "circus.circusd", str(tmp / "circus.ini")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    samples = []

    def pids() -> list[str]:
        return ready.read_text().split()

    try:
        deadline = time.monotonic() + 30
        while not pids():
            if time.monotonic() > deadline:
                raise RuntimeError("circus did not start its worker")
            time.sleep(0.01)
        for _ in range(runs):
            seen = len(pids())
            began = time.perf_counter()
            os.kill(int(pids()[-1]), signal.SIGKILL)
            deadline = time.monotonic() + 30
            while len(pids()) == seen and time.monotonic() < deadline:
                time.sleep(0.001)
            samples.append((time.perf_counter() - began) * 1000)
            time.sleep(0.2)
    finally:
        circusd.terminate()
        try:
            circusd.wait(timeout=10)
        except subprocess.TimeoutExpired:
            circusd.kill()
        for pid in pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        shutil.rmtree(tmp, ignore_errors=True)
    p50 = _pct(samples, 0.5)
    print(
        f"circus (check_delay {check_delay:g} s) kill -9 → respawned worker ready "
        f"({runs} kills): p50 {p50:.1f} ms"
    )
    return {f"circus_respawn_p50_ms_check_{check_delay:g}": p50}


def run() -> dict[str, float]:
    """Every sandbox figure."""
    figures: dict[str, float] = {}
    try:
        from bench.bench_confine import run as confine_run
    except ImportError:
        confine_run = None
    if confine_run is not None:
        figures.update(confine_run())
    for bench in (bench_runaway_memory, bench_kill_recovery, bench_circus):
        figures.update(bench())
    figures.update(bench_circus(check_delay=0.05))
    ours = figures["kill_recovery_p50_ms"]
    for key, value in list(figures.items()):
        if key.startswith("circus_respawn"):
            print(f"aotui recovery vs {key}: {value / ours:.1f}x faster")
    return figures


if __name__ == "__main__":
    run()
