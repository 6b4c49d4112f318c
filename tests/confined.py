"""Run one attempt in a really confined child process and bring back what happened.

:func:`run_confined` forks, (optionally) drops to ``nobody`` so the child takes an unprivileged
user's path, calls :func:`sandbox.confine.confine`, runs the attempt and writes the outcome as
one JSON line on a pipe. The parent kills the child's whole process group and removes its
cgroups whatever happens, so no test leaves a process or a cgroup behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import json
import os
import select
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from aotui.sandbox.cgroups import remove_cgroups
from aotui.sandbox.confine import confine
from aotui.sandbox.policy import DEFAULT_LIMITS

ROOT = os.geteuid() == 0
#: The per-app uid root workers drop to in these tests.
APP_UID = 61234
NOBODY = 65534
#: "root": the worker's path as root (per-app uid, cgroup, netns); "nobody": root drops to
#: nobody first, so confine takes an unprivileged user's path; "user": the suite runs unprivileged.
MODES = ["root", "nobody"] if ROOT else ["user"]
#: The cgroup name every test worker uses (``aotui-test-<pid>``).
APP = "aotui-test"

#: Address space a zygote has mapped when it forks a worker (rlimits.ADDRESS_SPACE_BASE_MB
#: counts it with margin); a child forked from this test process inherits the process's own.
ZYGOTE_MAPPED_MB = 180

#: The confined child writes its outcome on this descriptor (or the next free one above).
RESULT_FD = 200

_libc = ctypes.CDLL(None, use_errno=True)
_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE = 1, 4


def mode_uid(mode: str) -> int:
    """The uid a confined child of ``mode`` ends up with."""
    return {"root": APP_UID, "nobody": NOBODY}.get(mode, os.getuid())


def become(uid: int) -> None:
    """Drop to ``uid`` as a logged-in user would be: no groups, dumpable, dies with its parent."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    # A login session's processes are dumpable (their /proc files are theirs); a uid change
    # made this one not, and clears the parent-death signal.
    _libc.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


@dataclass(frozen=True)
class Tree:
    """A temporary tree: the app, a read grant, a write grant, and what is granted to no one."""

    base: Path
    app: Path
    shared: Path
    data: Path
    outside: Path
    secret: Path

    def policy(self, mode: str, **overrides: Any) -> dict[str, Any]:
        """A worker policy over this tree for ``mode``.

        Unless the test sets ``memory_mb``, the default is raised by what this process has
        mapped beyond a zygote: the child is forked from here, and the ``RLIMIT_AS`` backstop
        counts the address space it inherits. A pytest worker that has run half the suite maps
        far more than a zygote (malloc arenas of finished threads), and a backstop it already
        exceeds fails every new mapping: SQLite's WAL index, for one ("disk I/O error").
        """
        limits = {"memory_mb": DEFAULT_LIMITS["memory_mb"] + inherited_excess_mb()}
        policy: dict[str, Any] = {
            "app": APP,
            "app_dir": str(self.app),
            "fs_read": [str(self.shared)],
            "fs_write": [str(self.data)],
            "uid": APP_UID if mode == "root" else None,
        }
        policy.update(overrides)
        policy["limits"] = {**limits, **policy.get("limits", {})}
        return policy


def inherited_excess_mb() -> int:
    """Address space this process maps beyond a zygote's, which a forked child inherits."""
    mapped_mb = psutil.Process().memory_info().vms >> 20
    return max(0, mapped_mb - ZYGOTE_MAPPED_MB)


APP_SOURCE = """
from aotui.sandbox.sdk import App, View


class Main(View):
    def render(self) -> str:
        return '<section view="Main"><h2>Hello</h2><p>from a confined worker</p></section>'


class Hello(App):
    def roots(self) -> list[View]:
        return [Main("main")]


app = Hello()
"""


@contextlib.contextmanager
def make_tree(mode: str) -> Iterator[Tree]:
    """Create a world-traversable tree (``/tmp/pytest-of-root`` is 0700) and remove it after.

    As an unprivileged user really runs, everything in it is the user's own, so plain file
    permissions stop nothing; a root worker's per-app uid owns only the write grant.
    """
    base = Path(tempfile.mkdtemp(prefix="aotui-confine-", dir="/tmp"))
    try:
        base.chmod(0o755)
        tree = Tree(base, base / "app", base / "shared", base / "data", base / "out", base / "s")
        for directory in (tree.app, tree.shared, tree.data, tree.outside):
            directory.mkdir(mode=0o755)
        (tree.app / "app.py").write_text(APP_SOURCE)
        (tree.shared / "readme.txt").write_text("shared\n")
        tree.secret.write_text("the supervisor's secret\n")
        (tree.outside / "secret.txt").write_text("another secret\n")
        owner = mode_uid(mode)
        for path in [tree.data] if mode == "root" else [base, *base.rglob("*")]:
            os.chown(path, owner, owner)
        yield tree
    finally:
        shutil.rmtree(base, ignore_errors=True)


@dataclass
class Outcome:
    """What a confined attempt did: its value, or the exception it raised, or how it died."""

    value: Any = None
    error: str | None = None
    errno: int | None = None
    message: str = ""
    layers: list[str] = field(default_factory=list)
    #: The child died (killed by this signal) before it could answer.
    signal: int | None = None

    @property
    def denied(self) -> bool:
        """Blocked the way an app sees a denied access: ``PermissionError`` (Landlock, modes),
        a path its filesystem view does not hold (``ENOENT``), or a read-only tree (``EROFS``)."""
        if self.error in ("PermissionError", "FileNotFoundError"):
            return True
        return self.error == "OSError" and self.errno in (errno.EROFS, errno.EXDEV)


def _child(
    mode: str,
    policy: Mapping[str, Any],
    attempt: Callable[[], Any],
    before: Callable[[], object] | None,
    write_end: int,
) -> None:
    os.setsid()  # its own process group, so the parent can kill everything it forks
    if mode == "nobody":
        become(NOBODY)
    else:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if before is not None:
        before()
    result: dict[str, Any] = {"layers": list(confine(policy))}
    try:
        result["value"] = attempt()
    except BaseException as exc:
        result.update(error=type(exc).__name__, errno=getattr(exc, "errno", None))
        result["message"] = str(exc)
    os.write(write_end, json.dumps(result, default=repr).encode() + b"\n")


def close_inherited_descriptors() -> None:
    """In the child (a ``before``): close what it inherited from pytest, as the zygote's child
    keeps only its channel.

    A confined child that inherits pytest's and xdist's descriptors is not what a real worker
    is: its ``fd-close`` layer fails, and descriptors it holds may reach what the view hides.
    """
    os.closerange(3, RESULT_FD)


def run_confined(
    mode: str,
    policy: Mapping[str, Any],
    attempt: Callable[[], Any],
    *,
    before: Callable[[], object] | None = None,
    inspect: Callable[[int], None] | None = None,
    timeout_s: float = 5.0,
) -> Outcome:
    """Fork, confine with ``policy`` as ``mode``, run ``attempt``.

    ``before()`` runs in the child just before :func:`confine`; ``inspect(pid)`` runs in the
    parent once the child has answered (or died), before its cgroups are removed.
    """
    # Any policy, not only a Tree's: the RLIMIT_AS backstop counts what the child inherits.
    limits = {"memory_mb": DEFAULT_LIMITS["memory_mb"] + inherited_excess_mb()}
    policy = {**policy, "limits": {**limits, **(policy.get("limits") or {})}}
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child never returns into pytest
        result_fd = write_end
        try:
            os.close(read_end)
            # Out of the way of the low descriptors (see close_inherited_descriptors).
            result_fd = fcntl.fcntl(write_end, fcntl.F_DUPFD_CLOEXEC, RESULT_FD)
            os.close(write_end)
            _child(mode, policy, attempt, before, result_fd)
        except BaseException as exc:
            with contextlib.suppress(BaseException):
                os.write(result_fd, json.dumps({"harness": repr(exc)}).encode() + b"\n")
        finally:
            os._exit(0)
    os.close(write_end)
    status = None
    try:
        line = _read_line(read_end, timeout_s)
        if not line:  # died without answering: collect how, unless it hangs
            status = _wait(pid, 1.0)
        if inspect is not None:
            inspect(pid)
    finally:
        os.close(read_end)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        if status is None:
            status = _wait(pid, None)
        remove_cgroups(APP, pid)
    if not line:
        killed = os.WTERMSIG(status) if status is not None and os.WIFSIGNALED(status) else None
        return Outcome(error="NoAnswer", signal=killed, message=f"wait status {status}")
    raw = json.loads(line)
    if "harness" in raw:
        raise AssertionError(f"the confined child failed outside its attempt: {raw['harness']}")
    return Outcome(**raw)


def _read_line(fd: int, timeout_s: float) -> bytes:
    data = b""
    deadline = time.monotonic() + timeout_s
    while not data.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        data += chunk
    return data if data.endswith(b"\n") else b""


def _wait(pid: int, timeout_s: float | None) -> int | None:
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        try:
            done, status = os.waitpid(pid, 0 if deadline is None else os.WNOHANG)
        except ChildProcessError:
            return None
        if done:
            return status
        if deadline is not None and time.monotonic() > deadline:
            return None
        time.sleep(0.005)
