"""What confinement costs at worker start, per layer.

Run ``.venv/bin/python bench/bench_confine.py``. Each run forks a child from a zygote-like process
(lxml, pyzmq and the SDK imported), closes its descriptors as the zygote does and times every
step of :func:`sandbox.confine.confine` with ``time.perf_counter``; a figure is the median over
:data:`RUNS` children. As root it measures the worker's path (cgroup, network namespace, per-app
uid) and then an unprivileged user's path (the child drops to ``nobody`` first: user namespace,
no cgroup); otherwise only the latter.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import lxml.html  # noqa: F401  -- as loaded in the zygote
import zmq  # noqa: F401

from aotui.sandbox import cgroups, worker  # noqa: F401
from aotui.sandbox.confine import confine
from aotui.sandbox.linux import prctl

__all__ = ["run"]

RUNS = 15
#: The per-app uid of the root path.
APP_UID = 61234
NOBODY = 65534
_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE = 1, 4


def _child(policy: dict[str, object], drop_to: int | None, report_fd: int) -> None:
    os.dup2(report_fd, 3)
    os.closerange(4, os.sysconf("SC_OPEN_MAX"))
    if drop_to is not None:  # an unprivileged user's process: dumpable, own uid
        os.setgroups([])
        os.setresgid(drop_to, drop_to, drop_to)
        os.setresuid(drop_to, drop_to, drop_to)
        prctl(_PR_SET_DUMPABLE, 1)
    prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    timings: dict[str, float] = {}
    start = time.perf_counter()
    layers = confine(policy, timings=timings)
    timings["total"] = time.perf_counter() - start
    os.write(3, json.dumps({"timings": timings, "layers": layers}).encode())


def _measure(policy: dict[str, object], drop_to: int | None) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {}
    for _ in range(RUNS):
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                _child(policy, drop_to, write_end)
            finally:
                os._exit(0)
        os.close(write_end)
        data = os.read(read_end, 65536)
        os.close(read_end)
        os.waitpid(pid, 0)
        cgroups.remove_cgroups("aotui-bench", pid)
        result = json.loads(data)
        for step, seconds in result["timings"].items():
            samples.setdefault(step, []).append(seconds * 1000)
        samples.setdefault("layers:" + ",".join(result["layers"]), []).append(0)
    return samples


def _report(label: str, samples: dict[str, list[float]]) -> dict[str, float]:
    figures: dict[str, float] = {}
    print(f"confine, {label} ({RUNS} workers, ms):  median      max")
    for step, values in samples.items():
        if step.startswith("layers:"):
            print(f"  layers in force: {step.removeprefix('layers:')}")
            continue
        figures[f"confine_{label}_{step}_ms"] = statistics.median(values)
        figures[f"confine_{label}_{step}_max_ms"] = max(values)
        print(f"  {step:<14} {statistics.median(values):20.3f} {max(values):8.3f}")
    return figures


def run() -> dict[str, float]:
    """Measure each path, print one line per step, and return the figures by name."""
    base = Path(tempfile.mkdtemp(prefix="aotui-bench-"))
    base.chmod(0o755)
    try:
        (base / "app").mkdir(mode=0o755)
        (base / "data").mkdir(mode=0o755)
        policy: dict[str, object] = {
            "app": "aotui-bench",
            "app_dir": str(base / "app"),
            "fs_read": ["/srv"],
            "fs_write": [str(base / "data")],
        }
        figures: dict[str, float] = {}
        if os.geteuid() == 0:
            figures |= _report("root", _measure({**policy, "uid": APP_UID}, None))
            figures |= _report("unprivileged", _measure(policy, NOBODY))
        else:
            figures |= _report("unprivileged", _measure(policy, None))
        return figures
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    run()
