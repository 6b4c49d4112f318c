"""The headless browser a web app's worker runs inside its own confinement.

Debian's ``chromium-headless-shell`` (else ``chromium --headless=new``), started by the worker
with ``--remote-debugging-pipe`` and driven through :mod:`sandbox.cdp`: no TCP debugging port,
no Node. It runs as the worker's uid, in its cgroup, network namespace, filesystem view and
process group, under the browser seccomp profile (``sandbox/seccomp.py``) and a Landlock ruleset
that lets it execute only its own files and the ELF loader (:func:`executables`).

Chromium's own sandbox cannot nest in ours as root (it needs a setuid helper or new user
namespaces, which the view's ``nosuid`` and seccomp refuse), so it runs with ``--no-sandbox``
there; unprivileged it is tried first and :attr:`Browser.chromium_sandbox` says whether it held.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import resource
import signal
import subprocess
import time
from dataclasses import dataclass

from aotui.sandbox.cdp import CDPFailure, Pipe
from aotui.sandbox.webmcp import ENABLE_FLAG as WEBMCP_FLAG

__all__ = [
    "CANDIDATES",
    "INSTALL_HINT",
    "MIN_TASKS",
    "Browser",
    "BrowserError",
    "BrowserProcess",
    "executables",
    "find_browser",
    "launch",
    "read_paths",
    "version",
]

#: Where Debian installs the browser: (real binary, extra arguments), in order of preference.
#: ``/usr/bin/chromium-headless-shell`` is a shell script around the first; exec'ing the binary
#: itself keeps ``/bin/sh`` out of what the worker may execute.
CANDIDATES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("/usr/lib/chromium/chromium-headless-shell", ()),
    ("/usr/lib/chromium/chromium", ("--headless=new",)),
)
INSTALL_HINT = "apt-get install chromium-headless-shell"
#: The ELF loader every dynamically linked binary names: the kernel opens it for execve too.
ELF_LOADERS = ("/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1")
#: What the browser reads besides the runtime's libraries: fonts and their configuration,
#: certificates, the font cache.
_READS = (
    "/usr/share/fonts", "/etc/fonts", "/var/cache/fontconfig", "/etc/ssl/certs",
    "/usr/share/ca-certificates", "/usr/share/zoneinfo",
)  # fmt: skip
_FLAGS = (
    "--headless",
    "--remote-debugging-pipe",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-breakpad",
    "--disable-crash-reporter",
    # BackForwardCache: back and forward load their page again (with a load event to wait for)
    # instead of resuming a frozen one, which sends none.
    "--disable-features=WebRtcHideLocalIpsWithMdns,MediaRouter,OptimizationHints,BackForwardCache",
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--password-store=basic",
    "--use-mock-keychain",
    "--mute-audio",
    # A key that scrolls (arrows, Space, Page Down) scrolls at once: smoothly, it went on after
    # the key's answer, so the next read showed the page mid-way and a scroll given meanwhile was
    # undone by the animation's end (tests/test_browser_app.py, AWI-TTY's send_key).
    "--disable-smooth-scrolling",
    # window.open and target=_blank fail (return null), as under a popup blocker: a popup is a
    # target the runtime never attaches to, so the agent never reads it and its requests skip
    # the broker (they die in the empty network namespace, unlogged), and 400 of them took the
    # browser to its memory limit while the neighbours' p99 rose 3-5x (tests/test_web_hostile.py).
    "--block-new-web-contents",
    # document.modelContext and the CDP WebMCP domain (sandbox/webmcp.py); the only
    # --enable-features: Chromium keeps the last of several, so add features here.
    WEBMCP_FLAG,
)
_START_S = 20.0
#: The fewest tasks (processes and threads: ``RLIMIT_NPROC`` counts both) the browser runs one
#: page with: 8 processes, ~57 threads measured; at 32 the renderer crashes.
MIN_TASKS = 64


class BrowserError(RuntimeError):
    """The browser is missing or could not start (the message says why and what to do)."""


def find_browser() -> tuple[str, tuple[str, ...]] | None:
    """The browser's binary and the arguments its kind needs, or ``None``."""
    for path, extra in CANDIDATES:
        if os.access(path, os.X_OK):
            return path, extra
    return None


def version(path: str, timeout_s: float = 20.0) -> str:
    """``Chromium 150.0.7871.100`` as the binary says it (run outside any sandbox)."""
    out = subprocess.run(
        [path, "--version"], capture_output=True, text=True, timeout=timeout_s, check=False
    )
    match = re.search(r"[\w ]*?\d+(\.\d+)+", out.stdout)
    return match.group(0).strip() if match else out.stdout.strip()


def _loader_paths() -> list[str]:
    found = []
    for name in ELF_LOADERS:
        if os.path.exists(name):
            found += [name, os.path.realpath(name)]
    return list(dict.fromkeys(found))


def executables() -> list[str]:
    """What a browser worker may execute: the browser's install directory and the ELF loader."""
    found = find_browser()
    return [*([os.path.dirname(found[0])] if found else []), *_loader_paths()]


def read_paths() -> list[str]:
    """What a browser worker reads beyond a Python worker: its install directory, fonts,
    certificates (``/proc`` comes from the view, see ``sandbox/fsview.py``)."""
    return list(dict.fromkeys([*executables(), *(p for p in _READS if os.path.exists(p))]))


class BrowserProcess:
    """The browser's main process, a child of this one: polled, waited for and killed by pid."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        #: Its wait status once reaped.
        self.status: int | None = None

    def alive(self) -> bool:
        """Whether it still runs (reaps it when it ended)."""
        if self.status is None:
            with contextlib.suppress(ChildProcessError):
                pid, status = os.waitpid(self.pid, os.WNOHANG)
                if pid:
                    self.status = status
        return self.status is None

    def wait(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for it to end; whether it did."""
        deadline = time.monotonic() + timeout_s
        while self.alive():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True

    def kill(self) -> None:
        """SIGKILL it and reap it."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                self.status = os.waitpid(self.pid, 0)[1]


@dataclass
class Browser:
    """A running browser and the client's end of its debugging pipe."""

    process: BrowserProcess
    pipe: Pipe
    #: Chromium's own sandbox is on (else it runs with ``--no-sandbox`` inside ours).
    chromium_sandbox: bool
    #: Why Chromium's own sandbox is off (``""`` when on).
    sandbox_reason: str
    #: Seconds from the launch to the first CDP reply.
    start_s: float

    def close(self, timeout_s: float = 5.0) -> None:
        """Ask the browser to close, then kill it; waits for it."""
        with contextlib.suppress(CDPFailure):
            self.pipe.call("Browser.close", timeout_s=min(timeout_s, 2.0))
        self.pipe.close()
        if not self.process.wait(timeout_s):
            self.process.kill()


def _spawn(argv: list[str], profile: str) -> tuple[BrowserProcess, Pipe]:
    """Start ``argv`` with its fd 3 and fd 4 the two halves of the debugging pipe.

    ``posix_spawn`` (``clone(CLONE_VM | CLONE_VFORK)`` and exec), not ``fork``: safe in a
    worker whose ZeroMQ threads already run. Every other descriptor of ours is close-on-exec.
    """
    # Ours are created above 4, so the child's dup2 onto 3 and 4 never meets one of them.
    commands_r, commands_w = (fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in os.pipe())
    replies_r, replies_w = (fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in os.pipe())
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
    log = fcntl.fcntl(
        os.open(os.path.join(profile, "browser.log"), flags, 0o600), fcntl.F_DUPFD_CLOEXEC, 10
    )
    try:
        pid = os.posix_spawn(
            argv[0],
            argv,
            dict(os.environ),
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, log, 1),
                (os.POSIX_SPAWN_DUP2, log, 2),
                (os.POSIX_SPAWN_DUP2, commands_r, 3),
                (os.POSIX_SPAWN_DUP2, replies_w, 4),
            ],
            setsigdef=(signal.SIGPIPE, signal.SIGINT, signal.SIGTERM),
        )
    except OSError:
        os.close(commands_w)
        os.close(replies_r)
        raise
    finally:
        for fd in (commands_r, replies_w, log):
            os.close(fd)
    process = BrowserProcess(pid)
    return process, Pipe(commands_w, replies_r, alive=process.alive)


def launch(profile_parent: str | None = None, *, chromium_sandbox: bool | None = None) -> Browser:
    """Start the browser inside this (confined) process; raises :class:`BrowserError`.

    ``profile_parent`` holds the private profile (default ``TMPDIR``). ``chromium_sandbox``
    ``None`` tries Chromium's own sandbox when not root and falls back to ``--no-sandbox``.
    """
    found = find_browser()
    if found is None:
        raise BrowserError(f"no headless browser is installed; install one: {INSTALL_HINT}")
    tasks, _hard = resource.getrlimit(resource.RLIMIT_NPROC)
    if tasks != resource.RLIM_INFINITY and tasks < MIN_TASKS:
        # Otherwise it starts, and its renderer crashes at the first page (measured at 32).
        raise BrowserError(
            f"the app's pids limit ({tasks}) is below the {MIN_TASKS} tasks the browser needs"
            " (about 8 processes and 60 threads for one page); raise limits.pids"
        )
    path, extra = found
    parent = profile_parent or os.environ.get("TMPDIR") or "/tmp"
    reason = _why_no_chromium_sandbox()
    if chromium_sandbox is not None:
        attempts = [chromium_sandbox]
    else:
        attempts = [False] if reason else [True, False]
    for sandboxed in attempts:
        profile = os.path.join(parent, f"browser-profile-{'s' if sandboxed else 'n'}")
        os.makedirs(profile, 0o700, exist_ok=True)
        argv = [path, *extra, *_FLAGS, f"--user-data-dir={profile}"]
        if not sandboxed:
            argv.append("--no-sandbox")
        argv.append("about:blank")
        start = time.monotonic()
        process, pipe = _spawn(argv, profile)
        try:
            pipe.call("Browser.getVersion", timeout_s=_START_S)
        except CDPFailure as exc:
            pipe.close()
            process.kill()
            tail = _log_tail(profile)
            if sandboxed:
                reason = f"Chromium's sandbox could not start inside ours: {tail or exc}"
                continue
            raise BrowserError(f"the browser did not start: {exc}; its log: {tail}") from None
        return Browser(
            process, pipe, sandboxed, "" if sandboxed else reason, time.monotonic() - start
        )
    raise BrowserError("no launch attempted")  # pragma: no cover - attempts is never empty


def _why_no_chromium_sandbox() -> str:
    """Why Chromium's own sandbox cannot start here (``""``: it may; try it)."""
    if os.geteuid() == 0:
        return "root: Chromium's setuid sandbox cannot nest in the worker's confinement"
    try:
        with open("/proc/self/status") as status:
            filtered = any(line.split() == ["Seccomp:", "2"] for line in status)
    except OSError:
        filtered = False
    if filtered:
        # The browser profile, like the Python one, refuses clone/unshare with namespace flags
        # and exec of a set-uid helper (nosuid, no_new_privs): Chromium's layers need either.
        return "the worker's seccomp profile refuses the namespaces Chromium's sandbox needs"
    return ""


def _log_tail(profile: str, limit: int = 600) -> str:
    try:
        with open(os.path.join(profile, "browser.log"), "rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(0, log.tell() - limit))
            return log.read().decode(errors="replace").strip()
    except OSError:
        return ""
