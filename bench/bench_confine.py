"""What confinement costs at worker start, per layer; before and after a change.

Run ``.venv/bin/python bench/bench_confine.py``. Each run forks a child from a zygote-like process
(lxml, pyzmq and the SDK imported, and what the zygote prepares for its workers), closes its
descriptors as the zygote does and times every step of :func:`sandbox.confine.confine` with
``time.perf_counter``; a figure is the median over :data:`RUNS` children. As root it measures
the worker's path (cgroup, namespaces, filesystem view, per-app uid) and then an unprivileged
user's path (the child drops to ``nobody`` first: user namespace, no cgroup); otherwise only the
latter.

``--against REV`` (default: the commit before the filesystem view, :data:`BEFORE_VIEW`) runs the
same measurement on that revision's ``sandbox/`` in the same run, interleaved round by round, and
prints both totals with the difference; the goal is at most :data:`GOAL_MS` more as root.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
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
from aotui.sandbox.policy import default_runtime_read

__all__ = ["run"]

RUNS = 15
#: The last commit whose workers reached their trees through descriptors (sandbox/handles.py).
BEFORE_VIEW = "7681a6c"
#: Issue 20's goal: the filesystem view costs at most this much more per worker start as root.
GOAL_MS = 1.0
#: Rounds of the interleaved comparison (each: RUNS workers of each side).
ROUNDS = 3
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


def _as_the_zygote() -> None:
    """What the zygote prepares once for every worker, in whichever version this is."""
    try:
        from aotui.sandbox import fsview  # type: ignore[attr-defined,unused-ignore]

        fsview.prepare(default_runtime_read())
    except ImportError:  # before the filesystem view: the zygote named its modules
        if os.geteuid() == 0:
            from aotui.sandbox import handles  # type: ignore[attr-defined,unused-ignore]

            handles.preroute(default_runtime_read())


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


def _policy(base: Path) -> dict[str, object]:
    (base / "app").mkdir(mode=0o755)
    (base / "data").mkdir(mode=0o755)
    return {
        "app": "aotui-bench",
        "app_dir": str(base / "app"),
        "fs_read": ["/srv"],
        "fs_write": [str(base / "data")],
    }


def run() -> dict[str, float]:
    """Measure each path, print one line per step, and return the figures by name."""
    _as_the_zygote()
    base = Path(tempfile.mkdtemp(prefix="aotui-bench-"))
    base.chmod(0o755)
    try:
        policy = _policy(base)
        figures: dict[str, float] = {}
        if os.geteuid() == 0:
            figures |= _report("root", _measure({**policy, "uid": APP_UID}, None))
            figures |= _report("unprivileged", _measure(policy, NOBODY))
        else:
            figures |= _report("unprivileged", _measure(policy, None))
        return figures
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _totals() -> dict[str, float]:
    """This version's total per path (for ``--json``), printed by nobody."""
    _as_the_zygote()
    base = Path(tempfile.mkdtemp(prefix="aotui-bench-"))
    base.chmod(0o755)
    try:
        policy = _policy(base)
        totals = {}
        if os.geteuid() == 0:
            totals["root"] = statistics.median(_measure({**policy, "uid": APP_UID}, None)["total"])
        totals["unprivileged"] = statistics.median(
            _measure(policy, NOBODY if os.geteuid() == 0 else None)["total"]
        )
        return totals
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _checkout(revision: str, into: Path) -> Path:
    """``revision``'s rooms, importable as ``aotui`` from the returned directory."""
    repo = Path(__file__).resolve().parents[1]
    tree = into / "tree"
    subprocess.run(
        ["git", "-C", str(repo), "worktree", "add", "--detach", "-f", str(tree), revision],
        check=True,
        capture_output=True,
    )
    package = into / "path" / "aotui"
    package.mkdir(parents=True)
    for room in ("protocol", "sandbox", "supervisor"):
        (package / room).symlink_to(tree / room)
    (package / "__init__.py").symlink_to(tree / "supervisor" / "_aotui" / "__init__.py")
    return into / "path"


def _side(path: Path | None) -> dict[str, float]:
    env = {**os.environ}
    if path is not None:
        env["PYTHONPATH"] = str(path)
    done = subprocess.run(
        [sys.executable, __file__, "--totals"], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.splitlines()[-1])  # type: ignore[no-any-return]


def compare(revision: str) -> dict[str, float]:
    """Totals of this version and of ``revision``, interleaved over :data:`ROUNDS` rounds."""
    repo = Path(__file__).resolve().parents[1]
    scratch = Path(tempfile.mkdtemp(prefix="aotui-bench-before-"))
    # Reachable by any uid, as an installed aotui is: the earlier version's workers would
    # otherwise reach its modules through descriptors too, and renaming them costs it more.
    scratch.chmod(0o755)
    try:
        path = _checkout(revision, scratch)
        before: dict[str, list[float]] = {}
        after: dict[str, list[float]] = {}
        for _ in range(ROUNDS):
            for key, value in _side(path).items():
                before.setdefault(key, []).append(value)
            for key, value in _side(None).items():
                after.setdefault(key, []).append(value)
    finally:
        subprocess.run(
            ["git", "-C", str(repo), "worktree", "remove", "--force", str(scratch / "tree")],
            check=False,
            capture_output=True,
        )
        shutil.rmtree(scratch, ignore_errors=True)
    figures = {}
    print(f"confine total per worker, ms (median of {ROUNDS} rounds of {RUNS} workers):")
    print(f"  {'path':<14} {'before (' + revision + ')':>18} {'now':>8} {'difference':>11}   goal")
    for key in after:
        was, now = statistics.median(before[key]), statistics.median(after[key])
        goal = f"<= +{GOAL_MS:.1f} ms" if key == "root" else ""
        print(f"  {key:<14} {was:18.2f} {now:8.2f} {now - was:+11.2f}   {goal}")
        figures[f"confine_{key}_before_ms"] = was
        figures[f"confine_{key}_total_ms"] = now
    return figures


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--against", metavar="REV", default=BEFORE_VIEW)
    parser.add_argument("--totals", action="store_true", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.totals:
        print(json.dumps(_totals()))
    else:
        run()
        compare(arguments.against)
