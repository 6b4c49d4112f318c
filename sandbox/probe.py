"""Which confinement layers this machine and user can apply, for ``aotui doctor``.

:func:`probe` forks a child that confines itself exactly as a worker would (with a throwaway
policy) and reports each layer as available or not, with the kernel's reason. As root it also
forks one that first drops to ``nobody``, to show what an unprivileged user of this machine gets.
The root child, once it runs as the stand-in per-app uid, checks what would still stop apps: a
granted tree it cannot list in its filesystem view (``sandbox/fsview.py`` gets around 0700
parents, not a tree's own mode) and standard-library modules it cannot import.
It also names the headless browser web apps run in (``sandbox/browser.py``) and its version, or
how to install it, and starts it once inside a browser worker's confinement.
``python -m aotui.sandbox.probe`` prints the result as JSON.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import platform
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

from aotui.protocol.messages import SandboxLayer
from aotui.sandbox import browser, cgroups, landlock
from aotui.sandbox.confine import apply_layers, required_layers
from aotui.sandbox.linux import prctl
from aotui.sandbox.policy import DEFAULT_LIMITS, Policy

__all__ = ["LAYERS", "browser_report", "probe"]

#: Every layer a worker can report, in the order they are applied.
LAYERS = tuple(layer.value for layer in SandboxLayer)

#: The uid a root probe drops to, standing in for a per-app uid.
PROBE_UID = 65534
_TIMEOUT_S = 5.0
#: A browser worker's start, confined, with its first CDP reply (~0.1 s here).
_BROWSER_TIMEOUT_S = 30.0
#: What the probe's browser worker may use: Chromium runs ~8 processes and ~60 threads.
BROWSER_PROBE_LIMITS = {"pids": 512, "open_files": 1024, "memory_mb": 1024}
#: Modules an app may import that nothing imports before: with C extensions, data files, packages.
SAMPLE_IMPORTS = ("zoneinfo", "sqlite3", "email.mime.text", "xml.etree.ElementTree", "unittest")
_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4


def _in_child(drop_to: int | None) -> dict[str, Any]:
    """Runs in the forked child: confine as a worker would and say what held."""
    if drop_to is not None:
        os.setgroups([])
        os.setresgid(drop_to, drop_to, drop_to)
        os.setresuid(drop_to, drop_to, drop_to)
        # A logged-in user's processes are dumpable; the uid change just made this one not.
        prctl(_PR_SET_DUMPABLE, 1)
    prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # as the zygote's child does
    root = os.geteuid() == 0
    policy = Policy(app="aotui-probe", uid=PROBE_UID if root else None, gid=PROBE_UID)
    trees = [path for path in policy.runtime_read if os.path.isdir(path)]
    report = apply_layers(policy)
    unreadable = []
    if root and "uid-drop" in report.active:  # now as the stand-in per-app uid
        unreadable = _what_stops_apps(trees)
    return {
        "root": root,
        "active": report.active,
        "failed": report.failed,
        "timings_ms": {name: round(s * 1000, 3) for name, s in report.timings.items()},
        "unreadable_runtime": unreadable,
    }


def _what_stops_apps(trees: list[str]) -> list[str]:
    """Granted trees the confined uid cannot list, and sample modules it cannot import."""
    found = []
    for path in trees:
        try:
            os.listdir(path)
        except OSError as exc:
            found.append(f"{path} ({exc.strerror})")
    for name in SAMPLE_IMPORTS:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - the probe reports whatever an import raises
            found.append(f"module {name} ({type(exc).__name__}: {exc})")
    return found


def _browser_in_child(tmp_dir: str) -> dict[str, Any]:
    """Runs in the forked child: confine as a browser worker would, start the browser, close it."""
    prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    root = os.geteuid() == 0
    policy = Policy(
        app="aotui-probe",
        uid=PROBE_UID if root else None,
        gid=PROBE_UID,
        tmp_dir=tmp_dir,
        browser=True,
        limits={**DEFAULT_LIMITS, **BROWSER_PROBE_LIMITS},
    )
    report = apply_layers(policy)
    if "TMPDIR" not in os.environ:
        os.environ["TMPDIR"] = tmp_dir
    started = browser.launch()
    started.close()
    return {
        "layers": report.active,
        "start_ms": round(started.start_s * 1000, 1),
        "chromium_sandbox": started.chromium_sandbox,
        "reason": started.sandbox_reason,
    }


def _child_main(drop_to: int | None, write_end: int, browser_tmp: str | None = None) -> None:
    """The forked child: answer on the pipe, whatever happens, and never return."""
    try:
        os.setsid()  # its own process group: the parent kills all it started
        # As the zygote's child does: only 0-3 open.
        os.dup2(write_end, 3)
        os.closerange(4, os.sysconf("SC_OPEN_MAX"))
        result = _browser_in_child(browser_tmp) if browser_tmp else _in_child(drop_to)
    except BaseException as exc:  # noqa: BLE001 - the probe child reports any failure to its parent
        result = {"error": f"{type(exc).__name__}: {exc}"}
    try:
        os.write(3, json.dumps(result).encode())
    finally:
        os._exit(0)


def _run(
    drop_to: int | None, browser_tmp: str | None = None, timeout_s: float = _TIMEOUT_S
) -> dict[str, Any]:
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        _child_main(drop_to, write_end, browser_tmp)
    os.close(write_end)
    data = b""
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([read_end], [], [], deadline - time.monotonic())
            chunk = os.read(read_end, 65536) if ready else b""
            if not chunk:
                break
            data += chunk
    finally:
        os.close(read_end)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        cgroups.remove_cgroups("aotui-probe", pid)
    if not data:
        return {"error": "the probe child did not answer"}
    answer: dict[str, Any] = json.loads(data)
    return answer


def _summary(result: dict[str, Any]) -> dict[str, Any]:
    if "error" in result:
        return result
    root = bool(result["root"])
    layers = {
        name: {"available": name in result["active"], "reason": result["failed"].get(name, "")}
        for name in LAYERS
        if name in result["active"] or name in result["failed"]
    }
    missing = sorted(required_layers(root) - set(result["active"]))
    summary = {
        "mode": "root" if root else "unprivileged",
        "layers": layers,
        "strict_ready": not missing,
        "missing_for_strict": missing,
        "cost_ms": result["timings_ms"],
    }
    if result["unreadable_runtime"]:
        summary["warning"] = (
            "a per-app uid cannot read "
            + ", ".join(result["unreadable_runtime"])
            + ": apps importing from there will fail; make those trees readable by other users"
            " (chmod -R o+rX; their parent directories need nothing)"
        )
    return summary


def browser_report() -> dict[str, Any]:
    """The headless browser web apps run in: its path and version, or how to install it."""
    found = browser.find_browser()
    if found is None:
        return {"installed": False, "install": browser.INSTALL_HINT}
    try:
        version = browser.version(found[0])
    except (OSError, subprocess.SubprocessError) as exc:
        version = f"unknown ({exc})"
    report: dict[str, Any] = {"installed": True, "path": found[0], "version": version}
    tmp = tempfile.mkdtemp(prefix="aotui-probe-browser-")
    try:
        if os.geteuid() == 0:
            os.chown(tmp, PROBE_UID, PROBE_UID)
        report["confined"] = _run(None, tmp, _BROWSER_TIMEOUT_S)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return report


def probe() -> dict[str, Any]:
    """Try every layer in a forked child; returns availability and reasons per layer."""
    start = time.perf_counter()
    report: dict[str, Any] = {
        "kernel": platform.release(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "euid": os.geteuid(),
        "landlock_abi": landlock.abi_version(),
        "this_user": _summary(_run(None)),
    }
    if os.geteuid() == 0:
        report["unprivileged_user"] = _summary(_run(PROBE_UID))
    report["browser"] = browser_report()
    report["probe_ms"] = round((time.perf_counter() - start) * 1000, 1)
    return report


if __name__ == "__main__":
    json.dump(probe(), sys.stdout, indent=2)
    sys.stdout.write("\n")
