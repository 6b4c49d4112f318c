"""A headless browser inside a worker's confinement, driven over its debugging pipe.

Each test forks a really confined child (``tests/confined.py``) with the browser policy, which
launches Chromium itself (``sandbox/browser.py``) and talks CDP to it (``sandbox/cdp.py``): as
the per-app uid (``root``) and as ``nobody`` taking an unprivileged user's path.
"""

from __future__ import annotations

import contextlib
import os
import resource
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from aotui.sandbox import browser, probe, seccomp
from aotui.sandbox.cdp import CDPClosed, CDPCrashed, CDPError, CDPTimeout, Pipe
from aotui.sandbox.linux import MACHINE
from aotui.supervisor.interface.reports import format_doctor
from tests.confined import (
    MODES,
    Tree,
    close_inherited_descriptors,
    make_tree,
    mode_uid,
    run_confined,
)

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(
        browser.find_browser() is None,
        reason=f"no headless browser installed ({browser.INSTALL_HINT})",
    ),
]

#: A task's flag while it exits (``/proc/PID/stat`` field 9).
PF_EXITING = 0x4
#: The least a doctor report holds.
EMPTY_DOCTOR = {"kernel": "k", "machine": "m", "python": "p", "landlock_abi": 7, "euid": 0}
#: Chromium's processes and threads: far over a Python worker's 32 (RLIMIT_NPROC counts threads).
LIMITS = {"pids": 512, "open_files": 1024, "memory_mb": 1024}


@contextlib.contextmanager
def browser_tree(mode: str) -> Iterator[tuple[Tree, dict[str, Any]]]:
    """A tree and a browser policy over it, with a private TMPDIR the worker's uid owns."""
    with make_tree(mode) as tree:
        tmp = tree.base / "tmp"
        tmp.mkdir(mode=0o700)
        owner = mode_uid(mode)
        os.chown(tmp, owner, owner)
        yield tree, tree.policy(mode, browser=True, tmp_dir=str(tmp), limits=LIMITS, strict=True)


def page(b: browser.Browser, url: str) -> str:
    """A new page's flat session, navigated to ``url`` and loaded."""
    target = b.pipe.call("Target.createTarget", {"url": "about:blank"})["targetId"]
    session: str = b.pipe.call("Target.attachToTarget", {"targetId": target, "flatten": True})[
        "sessionId"
    ]
    b.pipe.call("Page.enable", session=session)
    b.pipe.call("Page.navigate", {"url": url}, session=session)
    b.pipe.wait_event("Page.loadEventFired", session=session, timeout_s=10)
    return session


def evaluate(b: browser.Browser, session: str, expression: str) -> Any:
    """``expression``'s value in the page (promises awaited)."""
    reply = b.pipe.call(
        "Runtime.evaluate",
        {"expression": expression, "awaitPromise": True, "returnByValue": True},
        session=session,
        timeout_s=15,
    )
    return reply["result"].get("value")


@pytest.mark.parametrize("mode", MODES)
def test_a_confined_browser_reads_a_data_url_title(mode: str) -> None:
    def attempt() -> dict[str, Any]:
        b = browser.launch()
        try:
            session = page(b, "data:text/html,<title>confined page</title><p>hi</p>")
            return {
                "title": evaluate(b, session, "document.title"),
                "start_s": b.start_s,
                "chromium_sandbox": b.chromium_sandbox,
                "reason": b.sandbox_reason,
                "address_space": resource.getrlimit(resource.RLIMIT_AS)[0],
                "proc": sorted(os.listdir("/proc/self"))[:3],
            }
        finally:
            b.close()

    with browser_tree(mode) as (_tree, policy):
        out = run_confined(mode, policy, attempt, before=close_inherited_descriptors, timeout_s=60)
    assert out.error is None, out
    assert {"landlock", "seccomp", "mntns", "netns"} <= set(out.layers)
    assert out.value["title"] == "confined page"
    # Chromium's own sandbox cannot nest in ours: the reason is recorded, never silent.
    assert out.value["chromium_sandbox"] is False
    assert "seccomp" in out.value["reason"]
    assert out.value["start_s"] < 10
    # No RLIMIT_AS (Chromium reserves terabytes), and /proc/self is there to read.
    assert out.value["address_space"] == resource.RLIM_INFINITY
    assert out.value["proc"]


@pytest.mark.parametrize("mode", MODES)
def test_the_page_reads_no_host_or_other_apps_file(mode: str) -> None:
    def attempt(tree: Tree) -> dict[str, str]:
        b = browser.launch()
        try:
            seen = {}
            for name, path in (
                ("own", tree.app / "app.py"),
                ("passwd", Path("/etc/passwd")),
                ("other app", tree.outside / "secret.txt"),
                ("secret", tree.secret),
            ):
                session = page(b, f"file://{path}")
                seen[name] = str(evaluate(b, session, "document.body.innerText"))
            return seen
        finally:
            b.close()

    with browser_tree(mode) as (tree, policy):
        out = run_confined(
            mode, policy, lambda: attempt(tree), before=close_inherited_descriptors, timeout_s=60
        )
    assert out.error is None, out
    # The control: what the app may read, the page shows.
    assert "class Hello(App)" in out.value["own"]
    assert "root:" not in out.value["passwd"]
    assert "another secret" not in out.value["other app"]
    assert "secret" not in out.value["secret"]


@pytest.mark.parametrize("mode", MODES)
def test_the_page_reaches_no_network(mode: str) -> None:
    # A real listener on the host's loopback: the page's fetch must not reach it.
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    reached: list[bytes] = []

    def serve() -> None:
        server.settimeout(30)
        with contextlib.suppress(OSError):
            conn, _ = server.accept()
            reached.append(conn.recv(100))
            conn.sendall(b"HTTP/1.0 200 OK\r\n\r\nreached")
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    fetch = "fetch({url!r}).then(r => r.text()).then(t => 'ok ' + t, e => 'failed ' + e.message)"

    def attempt() -> dict[str, str]:
        b = browser.launch()
        try:
            session = page(b, "data:text/html,<title>net</title>")
            return {
                name: str(evaluate(b, session, fetch.format(url=url)))
                for name, url in (
                    ("loopback", f"http://127.0.0.1:{port}/"),
                    ("dns", "http://example.com/"),
                )
            }
        finally:
            b.close()

    try:
        with browser_tree(mode) as (_tree, policy):
            out = run_confined(
                mode, policy, attempt, before=close_inherited_descriptors, timeout_s=60
            )
    finally:
        server.close()
        thread.join(5)
    assert out.error is None, out
    assert out.value["loopback"].startswith("failed"), out.value
    assert out.value["dns"].startswith("failed"), out.value
    assert reached == []


@pytest.mark.parametrize("mode", MODES)
def test_the_browser_dies_with_the_worker_s_process_group(mode: str) -> None:
    found: list[psutil.Process] = []
    seen: dict[int, tuple[str, int, str]] = {}

    def attempt() -> int:
        b = browser.launch()
        page(b, "data:text/html,<title>kept</title>")
        # Left running for the harness to kill with the group. The child exits once it has
        # answered, and the browser quits when its debugging pipe closes: a process of the group
        # keeps the pipe open, or on a loaded machine the browser is gone before it is looked at.
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
        return b.process.pid

    def inspect(pid: int) -> None:
        for proc in psutil.process_iter():
            with contextlib.suppress(psutil.Error, OSError):
                if os.getpgid(proc.pid) == pid and proc.pid != pid:
                    found.append(proc)
                    cgroup = Path(f"/proc/{proc.pid}/cgroup").read_text()
                    # An exiting process is shown in the root cgroup (v1): only the living,
                    # by PF_EXITING (set before it leaves its cgroups), read after the cgroups.
                    stat = Path(f"/proc/{proc.pid}/stat").read_text()
                    flags = int(stat.rsplit(")", 1)[1].split()[6])
                    if not flags & PF_EXITING:
                        seen[proc.pid] = (proc.name(), proc.uids().real, cgroup)

    with browser_tree(mode) as (_tree, policy):
        out = run_confined(
            mode, policy, attempt, before=close_inherited_descriptors, inspect=inspect, timeout_s=60
        )
    assert out.error is None, out
    # The browser, its zygotes and renderer are all in the worker's group, as the worker's uid,
    # and as root in the worker's cgroups (memory and pids cover the whole browser tree).
    assert out.value in seen
    assert len(seen) >= 3, seen
    assert {uid for _name, uid, _cgroup in seen.values()} == {mode_uid(mode)}, seen
    if mode == "root":
        bad = {p: v for p, v in seen.items() if "aotui-test-" not in v[2]}
        assert not bad, bad
    deadline = time.monotonic() + 10
    while any(proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE for proc in found):
        assert time.monotonic() < deadline, [p for p in found if p.is_running()]
        time.sleep(0.05)


@pytest.mark.parametrize("mode", MODES)
def test_exec_stays_the_browser_s_alone(mode: str) -> None:
    binary = browser.find_browser()
    assert binary is not None

    def try_exec(path: str) -> None:
        os.execv(path, [path, "--version"])

    with make_tree(mode) as tree:
        # A Python worker's profile still refuses execve, the browser itself included.
        python = run_confined(mode, tree.policy(mode), lambda: try_exec(binary[0]))
    assert python.error == "PermissionError", python

    def drop_and_exec() -> None:
        # An executable the worker writes itself (a copy of the ELF loader it may run).
        loader = os.path.realpath(browser.ELF_LOADERS[0 if MACHINE == "x86_64" else 1])
        dropped = os.path.join(os.environ["TMPDIR"], "dropped")
        fd = os.open(dropped, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o755)
        with open(loader, "rb") as source:
            os.write(fd, source.read())
        os.close(fd)
        try_exec(dropped)

    with browser_tree(mode) as (_tree, policy):
        shell = run_confined(mode, policy, lambda: try_exec("/bin/sh"))
        python3 = run_confined(mode, policy, lambda: try_exec("/usr/bin/python3"))
        dropped = run_confined(mode, policy, drop_and_exec)
    # A browser worker may execute only the browser's files and the ELF loader: /bin/sh and
    # python3 are not in its view, and a file it wrote is refused by Landlock (EACCES).
    assert shell.denied, shell
    assert python3.denied, python3
    assert dropped.error == "PermissionError", dropped


@pytest.mark.parametrize("mode", MODES)
def test_a_crashed_page_fails_its_call_and_never_hangs(mode: str) -> None:
    def attempt() -> dict[str, str]:
        b = browser.launch()
        try:
            session = page(b, "data:text/html,<title>doomed</title>")
            seen = {}
            try:
                b.pipe.call("Runtime.evaluate", {"expression": "nosuch("}, session=session)
                b.pipe.call("Page.nosuchMethod", session=session)
            except CDPError as exc:
                seen["error"] = type(exc).__name__
            with contextlib.suppress(CDPCrashed, CDPTimeout):
                b.pipe.call("Page.crash", session=session, timeout_s=5)
            start = time.monotonic()
            try:
                b.pipe.call("Runtime.evaluate", {"expression": "1"}, session=session, timeout_s=5)
            except (CDPCrashed, CDPError) as exc:
                seen["after"] = type(exc).__name__
            seen["after_s"] = f"{time.monotonic() - start:.2f}"
            return seen
        finally:
            b.close()

    with browser_tree(mode) as (_tree, policy):
        out = run_confined(mode, policy, attempt, before=close_inherited_descriptors, timeout_s=60)
    assert out.error is None, out
    assert out.value["error"] == "CDPError"
    assert out.value["after"] == "CDPCrashed", out.value
    assert float(out.value["after_s"]) < 5


def test_a_closed_pipe_or_a_silent_peer_raises_and_never_hangs() -> None:
    commands_r, commands_w = os.pipe()
    replies_r, replies_w = os.pipe()
    pipe = Pipe(commands_w, replies_r)
    with pytest.raises(CDPTimeout):
        pipe.call("Browser.getVersion", timeout_s=0.2)
    # The timed-out call's late reply and one to no call are dropped; malformed replies are
    # typed errors.
    os.write(replies_w, b'{"id": 1, "result": {}}\0{"id": 2, "error": {"code": -32601, ')
    os.write(replies_w, b'"message": "nope"}}\0{"id": 9, "result": {}}\0')
    with pytest.raises(CDPError, match="nope"):
        pipe.call("Nope.nope", timeout_s=1)
    os.write(replies_w, b'{"id": 3, "error": "x"}\0')
    with pytest.raises(CDPError):
        pipe.call("Bad.error", timeout_s=1)
    os.write(replies_w, b'{"id": 4, "result": 5}\0')
    with pytest.raises(CDPError, match="not an object"):
        pipe.call("Bad.result", timeout_s=1)
    assert not pipe._replies
    os.write(replies_w, b'{"method": "Inspector.targetCrashed", "sessionId": "S"}\0')
    with pytest.raises(CDPCrashed):
        pipe.call("Runtime.evaluate", session="S", timeout_s=1)
    os.close(replies_w)
    start = time.monotonic()
    with pytest.raises(CDPClosed):
        pipe.call("Browser.getVersion", timeout_s=5)
    assert time.monotonic() - start < 1
    pipe.close()
    os.close(commands_r)


def test_the_browser_profile_is_the_python_profile_plus_its_listed_additions() -> None:
    numbers = seccomp.SYSCALLS[MACHINE]
    added = {numbers[name] for names in seccomp.BROWSER_ALLOWED.values() for name in names}
    for number in range(max(numbers.values()) + 2):
        python, web = (
            seccomp.verdict(MACHINE, number),
            seccomp.verdict(MACHINE, number, browser=True),
        )
        assert web == (seccomp.ALLOW if number in added else python), number
    assert numbers["execve"] in added
    assert seccomp.verdict(MACHINE, numbers["execve"]) == seccomp.EPERM
    assert len(seccomp.build_filter(MACHINE, browser=True)) > 0


def test_doctor_names_the_browser_or_how_to_install_it() -> None:
    report = probe.browser_report()
    assert report["installed"] is True
    assert report["version"].startswith("Chromium ")
    # Started once inside a browser worker's confinement, as this user (root: the probe uid).
    assert report["confined"]["start_ms"] > 0, report
    assert "seccomp" in report["confined"]["layers"]
    text = format_doctor({**EMPTY_DOCTOR, "browser": report})
    assert report["version"] in text
    assert "starts inside a worker's sandbox in" in text
    failed = {**report, "confined": {"error": "BrowserError: boom"}}
    assert "does NOT start" in format_doctor({**EMPTY_DOCTOR, "browser": failed})
    missing = format_doctor({**EMPTY_DOCTOR, "browser": {"installed": False, "install": "x"}})
    assert "none installed (install it: x)" in missing
    assert browser.INSTALL_HINT == "apt-get install chromium-headless-shell"


@pytest.mark.skipif("root" not in MODES, reason="a fresh procfs is mounted as root only")
def test_the_root_view_s_proc_shows_only_the_worker_s_own_processes() -> None:
    def attempt() -> dict[str, Any]:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
        uids = {os.stat(f"/proc/{pid}").st_uid for pid in pids}
        return {"pids": pids, "uids": sorted(uids), "me": os.getpid()}

    with browser_tree("root") as (_tree, policy):
        out = run_confined("root", policy, attempt, timeout_s=30)
    assert out.error is None, out
    # hidepid=invisible: not the host's init, not the test's own (root) processes.
    assert out.value["me"] in out.value["pids"]
    assert 1 not in out.value["pids"]
    assert out.value["uids"] == [mode_uid("root")]


@pytest.mark.parametrize("mode", MODES)
def test_a_pids_limit_the_browser_cannot_run_in_is_refused_with_the_reason(mode: str) -> None:
    with browser_tree(mode) as (_tree, policy):
        policy["limits"] = {**policy["limits"], "pids": 32}
        out = run_confined(mode, policy, browser.launch, timeout_s=30)
    assert out.error == "BrowserError", out
    assert "pids limit (32)" in out.message
