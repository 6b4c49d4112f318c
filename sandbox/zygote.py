"""The zygote: a clean, pre-loaded process that forks workers (the Android/Chromium pattern).

The supervisor starts it with ``python -m aotui.sandbox.zygote FD PARENT_PID`` where ``FD`` is its
end of a Unix socketpair. It imports everything a worker needs (pyzmq, msgpack, lxml, the renderer,
the SDK) but never creates a ZeroMQ context or a thread, so forking it is safe and a worker starts
in a few milliseconds instead of the ~100 ms of a fresh interpreter.

Frames on the socketpair are ``<u32 length><codec frame>``. The supervisor sends
:class:`~protocol.messages.Launch`; the zygote answers :class:`~protocol.messages.Launched` and,
when a worker ends, :class:`~protocol.messages.Exited` with its exit code or signal (the zygote is
the workers' parent, so it is the one that can reap them).

Lifetime: the zygote dies with the supervisor (``PR_SET_PDEATHSIG`` and EOF on the socket), and
every worker dies with the zygote (its own ``PR_SET_PDEATHSIG``), so nothing outlives a desktop.
"""

from __future__ import annotations

import ctypes
import gc
import signal

if __name__ == "__main__":
    # The imports below allocate some 30,000 objects and free few: the collections they would
    # trigger cost 20-40 ms of every desktop start. main() freezes them all.
    gc.disable()
    # The supervisor's death ends us from the first line, not once our imports are done: `aotui
    # up` starts us before its own checks, and one that refuses must not wait (nor keep its
    # caller's pipes open) for imports nobody will use. main() sets it again, and checks the
    # parent is still the one that started us.
    ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG

import contextlib
import dataclasses
import importlib
import os
import select
import socket
import sys
import traceback

import lxml.html  # noqa: F401  -- pre-loaded so workers do not pay for the import
import msgpack  # noqa: F401
import zmq  # noqa: F401

from aotui.protocol import codec
from aotui.protocol.errors import AotuiError
from aotui.protocol.messages import (
    Ack,
    AppState,
    Dismount,
    ErrorReply,
    Exited,
    FragmentUpdate,
    Hello,
    HttpCall,
    HttpResult,
    Launch,
    Launched,
    LogRecord,
    Message,
    Mount,
    Operation,
    Ping,
    Pong,
    RestoreChunk,
    Serialize,
    Shutdown,
    Start,
)
from aotui.protocol.stream import FrameReader, write_frame
from aotui.protocol.structure import escape_structural
from aotui.sandbox import cgroups, fsview, render, sdk, worker  # noqa: F401
from aotui.sandbox.policy import default_runtime_read
from aotui.sandbox.warm_up import warm_up

#: Standard-library modules apps commonly use, imported once here and shared copy-on-write by every
#: worker, for speed only: a worker imports any other module itself, even as a per-app uid that
#: cannot search the directories above the interpreter on the host (``sandbox/fsview.py``).
PRELOAD = [
    "base64",
    "bisect",
    "calendar",
    "collections",
    "copy",
    "csv",
    "dataclasses",
    "datetime",
    "decimal",
    "difflib",
    "enum",
    "fnmatch",
    "fractions",
    "functools",
    "glob",
    "hashlib",
    "heapq",
    "hmac",
    "html",
    "html.parser",
    "io",
    "itertools",
    "json",
    "math",
    "operator",
    "pathlib",
    "pprint",
    "random",
    "re",
    "secrets",
    "shutil",
    "statistics",
    "string",
    "struct",
    "textwrap",
    "threading",
    "time",
    "typing",
    "unicodedata",
    "urllib.parse",
    "uuid",
    "zlib",
    # View templates (sandbox/templates.py): Jinja2 itself comes in with the SDK above; its
    # traceback rewriting is imported only when a template fails, so load it here too.
    "jinja2",
    "jinja2.debug",
    "markupsafe",
]


#: What a worker reads and writes on its channel: their converters are built here, once, not in
#: every worker on its first frames (~1 ms of each start).
WORKER_TRAFFIC = (
    *(Start, RestoreChunk, Operation, Mount, Dismount, Serialize, Ping, Shutdown, HttpResult),
    *(Hello, FragmentUpdate, Ack, ErrorReply, AppState, LogRecord, Pong, HttpCall),
)


def _preload() -> None:
    for name in PRELOAD:
        importlib.import_module(name)
    codec.prepare(*WORKER_TRAFFIC)
    escape_structural("<")  # builds the ASCII tables every render uses
    escape_structural("\u2026")  # and the full-Unicode ones (shipped, compiled: ~4 ms once)
    warm_up()


__all__ = ["kill_workers", "main", "serve", "set_parent_death_signal"]

_PR_SET_PDEATHSIG = 1


def set_parent_death_signal(signum: int = signal.SIGKILL) -> None:
    """Ask the kernel to send ``signum`` to this process when its parent dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")


#: The descriptor number a worker finds its channel's listening socket on.
CHANNEL_FD = 3


def read_frames(sock: socket.socket, reader: FrameReader, fds: list[int]) -> list[Message] | None:
    """Read what is available, queueing passed descriptors on ``fds``; ``None`` at end of stream."""
    data, received, _flags, _addr = socket.recv_fds(sock, 65536, 8)
    fds.extend(received)
    if not data:
        return None
    return reader.feed(data)


def _child(launch: Launch, zygote_pid: int, channel_fd: int, log_fd: int) -> int:
    """Runs in the forked child: detach, keep only the channel and the log, become the worker."""
    os.setsid()
    set_parent_death_signal(signal.SIGKILL)
    if os.getppid() != zygote_pid:  # the zygote died between fork and prctl
        return 70
    signal.set_wakeup_fd(-1)
    for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGPIPE):
        signal.signal(signum, signal.SIG_DFL)
    # stdout and stderr go to the supervisor's per-app log pipe.
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.dup2(channel_fd, CHANNEL_FD)  # dup2'd descriptors are inheritable and not close-on-exec
    os.closerange(CHANNEL_FD + 1, os.sysconf("SC_OPEN_MAX"))
    return worker.run_worker(
        launch.app,
        launch.app_dir,
        launch.entry,
        launch.endpoint,
        dataclasses.asdict(launch.policy),  # checked again as the worker's Policy
        channel_fd=CHANNEL_FD,
    )


def _fork_worker(launch: Launch, zygote_pid: int, channel_fd: int, log_fd: int) -> int:
    """Fork one worker; returns its pid in the zygote, never returns in the child."""
    pid = os.fork()
    if pid == 0:
        code = 70
        try:
            code = _child(launch, zygote_pid, channel_fd, log_fd)
        except BaseException:  # noqa: BLE001 - a forked child prints whatever ended it, then exits
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    return pid


def _reap(sock: socket.socket, apps: dict[int, str]) -> None:
    """Collect every ended child, clean its cgroups, and report it."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        app = apps.pop(pid, "")
        if app:  # what the worker started dies with it
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        reason = "memory limit" if app and cgroups.oom_killed(app, pid) else ""
        if app:
            for failure in cgroups.remove_cgroups(app, pid):
                print(f"zygote: cannot remove cgroup {failure}", file=sys.stderr)
        if os.WIFSIGNALED(status):
            message = Exited(pid=pid, exit_code=None, signal=os.WTERMSIG(status), reason=reason)
        else:
            message = Exited(pid=pid, exit_code=os.WEXITSTATUS(status), signal=None, reason=reason)
        write_frame(sock, message)


#: The first byte the supervisor sends, with its log's descriptor when it names one
#: (``supervisor/workers/zygote_start.py``, ``hand_log``).
LOG_HANDOVER = b"L"


def _take_log(sock: socket.socket) -> int | None:
    """Wait for the supervisor to name the log, then write there; else the exit status.

    A zygote started before the supervisor knew its log writes where the supervisor does until
    then; it has done its imports meanwhile.
    """
    data, fds, _flags, _addr = socket.recv_fds(sock, len(LOG_HANDOVER), 1)
    if data != LOG_HANDOVER:
        for received in fds:
            os.close(received)
        if not data:
            return 0  # the supervisor went away before naming it
        print(f"zygote: expected the log handover, got {data!r}", file=sys.stderr)
        return 2
    sys.stdout.flush()
    sys.stderr.flush()
    for log_fd in fds:
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(log_fd)
    return None


def main(argv: list[str]) -> int:
    """Serve launch requests on the inherited socket until the supervisor goes away."""
    fd, parent_pid = int(argv[0]), int(argv[1])
    _prepare_shared_state()
    # SIGTERM, not SIGKILL: when the supervisor dies we still kill every worker's process group
    # (a worker's own children have no death signal of their own) before exiting.
    set_parent_death_signal(signal.SIGTERM)
    if os.getppid() != parent_pid:
        return 1
    sock = socket.socket(fileno=fd)
    sock.setblocking(True)
    refused = _take_log(sock)
    if refused is not None:
        return refused
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    apps: dict[int, str] = {}  # worker pid → app id, to find its cgroups when it ends

    def orphaned(signum: int, frame: object) -> None:
        kill_workers(apps)
        os._exit(0)

    signal.signal(signal.SIGTERM, orphaned)
    cgroups.sweep_cgroups()  # what a zygote killed with its desktop could not remove
    return serve(sock, wake_r, apps)


def serve(sock: socket.socket, wake_r: int, apps: dict[int, str]) -> int:
    """Serve until the supervisor's end closes, then kill what is left: nothing outlives it."""
    try:
        return _serve(sock, wake_r, apps)
    finally:
        # The end of the stream (the supervisor died, or stopped) is often seen before the
        # SIGTERM above is handled; returning then would leave each worker's own children alive.
        kill_workers(apps)


def kill_workers(apps: dict[int, str]) -> None:
    """SIGKILL every worker's process group: the worker and whatever it started."""
    for pid in list(apps):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


def _prepare_shared_state() -> None:
    """Load and freeze what every worker forked from here shares."""
    _preload()
    # Each worker binds the runtime trees in its filesystem view: resolve their paths once.
    fsview.prepare(default_runtime_read())
    # What the zygote holds now is shared by every worker: frozen, the collector never walks it,
    # so a worker's collections do not copy those pages (its USS) nor spend time on them. No
    # collection first: it would take ~25 ms for a few hundred objects, and free holes to copy.
    gc.freeze()
    gc.enable()


def _serve(sock: socket.socket, wake_r: int, apps: dict[int, str]) -> int:
    """Answer launch frames and reap ended workers; the exit status once the supervisor is gone."""
    zygote_pid = os.getpid()
    reader = FrameReader()
    passed_fds: list[int] = []
    while True:
        try:
            ready, _, _ = select.select([sock.fileno(), wake_r], [], [])
        except InterruptedError:
            continue
        if wake_r in ready:
            os.read(wake_r, 4096)
            _reap(sock, apps)
        if sock.fileno() in ready:
            try:
                messages = read_frames(sock, reader, passed_fds)
            except AotuiError as exc:
                print(f"zygote: bad control frame: {exc}", file=sys.stderr)
                return 2
            if messages is None:
                return 0
            for message in messages:
                if isinstance(message, Launch):
                    _launch(sock, message, passed_fds, zygote_pid, apps)


def _launch(
    sock: socket.socket,
    message: Launch,
    passed_fds: list[int],
    zygote_pid: int,
    apps: dict[int, str],
) -> None:
    """Fork the worker one launch asks for, with the two descriptors passed along with it."""
    if len(passed_fds) < 2:
        error = "launch arrived without its channel and log descriptors"
        write_frame(sock, Launched(token=message.token, pid=0, error=error))
        return
    channel_fd, log_fd = passed_fds.pop(0), passed_fds.pop(0)
    try:
        pid = _fork_worker(message, zygote_pid, channel_fd, log_fd)
    except OSError as exc:
        write_frame(sock, Launched(token=message.token, pid=0, error=str(exc)))
    else:
        apps[pid] = message.app
        write_frame(sock, Launched(token=message.token, pid=pid))
    finally:
        os.close(channel_fd)
        os.close(log_fd)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
