"""Escape attempts against really confined processes (CONTRACT §2, issue 4).

Each test forks a child that confines itself over a temporary tree (``tests/confined.py``),
attempts one escape and reports back; the test asserts it was blocked and that the app saw
``PermissionError``. As root every test runs in two modes: ``root`` (the worker's path: per-app
uid, cgroup, network namespace) and ``nobody`` (the child first drops to nobody, so it takes an
unprivileged user's path: user namespace, Landlock, seccomp, rlimits). Run unprivileged, the
suite runs the ``user`` mode. The victim of signal/ptrace/``/proc`` attempts runs as the same
uid as the confined child, so only the sandbox — not plain uid checks — stands in the way.
"""

from __future__ import annotations

import ctypes
import encodings.idna  # noqa: F401 -- getaddrinfo needs it; a dropped uid may not read the stdlib
import errno
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from aotui.sandbox import namespaces, seccomp
from aotui.sandbox.confine import KEPT_ENV
from aotui.sandbox.linux import MACHINE, syscall
from tests.confined import (
    MODES,
    ROOT,
    Outcome,
    Tree,
    become,
    make_tree,
    mode_uid,
    run_confined,
)

NR = seccomp.SYSCALLS[MACHINE]
root_only = pytest.mark.skipif(not ROOT, reason="needs root (cgroups, per-app uid)")


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def tree(mode: str) -> Iterator[Tree]:
    with make_tree(mode) as made:
        yield made


@pytest.fixture
def victim(mode: str) -> Iterator[int]:
    """A process with the confined child's uid, standing in for the supervisor."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            if mode != "user":
                become(mode_uid(mode))
            os.write(write_end, b"1")
            while True:
                signal.pause()
        finally:
            os._exit(0)
    os.close(write_end)
    try:
        assert os.read(read_end, 1) == b"1"
        yield pid
    finally:
        os.close(read_end)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def assert_denied(outcome: Outcome) -> None:
    assert outcome.denied, f"not blocked as PermissionError: {outcome}"


def alive(pid: int) -> bool:
    return os.waitpid(pid, os.WNOHANG) == (0, 0)


# --- filesystem -----------------------------------------------------------------------------


def test_granted_trees_work(mode: str, tree: Tree) -> None:
    def attempt() -> list[str]:
        work = tree.data / "work"
        work.mkdir()
        (work / "a.txt").write_text("hello")
        (work / "a.txt").rename(work / "b.txt")
        os.symlink("b.txt", work / "link")
        with open(work / "b.txt", "r+") as handle:
            handle.truncate(2)
        text = (work / "link").read_text()
        (work / "b.txt").unlink()
        return [
            text,
            (tree.app / "app.py").read_text()[:5],
            (tree.shared / "readme.txt").read_text(),
        ]

    outcome = run_confined(mode, tree.policy(mode), attempt)
    assert outcome.value == ["he", "\nfrom", "shared\n"], outcome


@pytest.mark.parametrize("target", ["secret", "outside", "/etc/passwd", "/root"])
def test_reading_outside_grants_is_denied(mode: str, tree: Tree, target: str) -> None:
    path = {"secret": tree.secret, "outside": tree.outside / "secret.txt"}.get(target, target)

    def attempt() -> object:
        return os.listdir(path) if os.path.isdir(path) else Path(path).read_text()

    assert_denied(run_confined(mode, tree.policy(mode), attempt))


def test_symlink_out_of_a_grant_is_no_way_out(mode: str, tree: Tree) -> None:
    def attempt() -> str:
        os.symlink(tree.secret, tree.data / "link")  # creating it is allowed…
        return (tree.data / "link").read_text()  # …following it out is not

    assert_denied(run_confined(mode, tree.policy(mode), attempt))


def test_hard_link_out_of_a_grant_is_refused(mode: str, tree: Tree) -> None:
    outcome = run_confined(mode, tree.policy(mode), lambda: os.link(tree.secret, tree.data / "l"))
    # The secret is not in the worker's filesystem view (ENOENT); were it there, a link across
    # mounts is EXDEV, and protected_hardlinks and Landlock would refuse it as well.
    assert outcome.errno in (errno.ENOENT, errno.EXDEV, errno.EPERM), outcome
    assert not (tree.data / "l").exists()


def test_proc_self_root_is_no_way_out(mode: str, tree: Tree) -> None:
    attempt = lambda: Path(f"/proc/self/root{tree.secret}").read_text()  # noqa: E731
    assert_denied(run_confined(mode, tree.policy(mode), attempt))


def test_raw_open_syscall_is_confined_too(mode: str, tree: Tree) -> None:
    libc = ctypes.CDLL(None, use_errno=True)

    def attempt() -> int:
        fd = int(libc.open(str(tree.secret).encode(), os.O_RDONLY))
        if fd < 0:
            raise OSError(ctypes.get_errno(), "open")
        return fd

    assert_denied(run_confined(mode, tree.policy(mode), attempt))


@pytest.mark.parametrize("target", ["out/new.txt", "shared/new.txt", "app/new.txt", "app/app.py"])
def test_writing_outside_the_write_grant_is_denied(mode: str, tree: Tree, target: str) -> None:
    attempt = lambda: (tree.base / target).write_text("x")  # noqa: E731
    assert_denied(run_confined(mode, tree.policy(mode), attempt))
    assert (tree.app / "app.py").read_text().startswith("\nfrom")


def test_moving_files_across_the_grant_boundary_is_denied(mode: str, tree: Tree) -> None:
    def attempt() -> list[str]:
        (tree.data / "x").write_text("x")
        results = []
        for source, target in [
            (tree.data / "x", tree.outside / "x"),
            (tree.shared / "readme.txt", tree.data / "readme.txt"),
        ]:
            try:
                os.rename(source, target)
                results.append("moved")
            except OSError as exc:  # Landlock (EACCES), not in the view, or another mount
                results.append(errno.errorcode[exc.errno or 0])
        return results

    outcome = run_confined(mode, tree.policy(mode), attempt)
    # out/ is not in the view at all; shared/ and data/ are different mounts of it.
    assert outcome.value == ["ENOENT", "EXDEV"], outcome


def fchmodat2(path: Path) -> int:
    """The newest chmod (Linux 6.6), which Python does not wrap."""
    name = ctypes.create_string_buffer(str(path).encode())
    return syscall(NR["fchmodat2"], -100, ctypes.c_void_p(ctypes.addressof(name)), 0o777, 0)


METADATA = {
    "chmod": lambda path: os.chmod(path, 0o777),
    "chown": lambda path: os.chown(path, os.getuid(), os.getgid()),
    "utime": lambda path: os.utime(path, (0, 0)),
    "setxattr": lambda path: os.setxattr(path, "user.aotui", b"x"),
    "fchmod": lambda path: os.fchmod(os.open(path, os.O_RDONLY), 0o777),
    "fchmodat2": fchmodat2,
}


@pytest.mark.parametrize("how", list(METADATA))
def test_changing_file_metadata_is_denied(mode: str, tree: Tree, how: str) -> None:
    # Landlock does not cover metadata; for an unprivileged user every file is the worker's own.
    before = tree.secret.stat()
    target = tree.shared / "readme.txt" if how == "fchmod" else tree.secret
    assert_denied(run_confined(mode, tree.policy(mode), lambda: METADATA[how](target)))
    after = tree.secret.stat()
    assert (after.st_mode, after.st_mtime) == (before.st_mode, before.st_mtime)


@pytest.mark.parametrize("how", ["execv", "subprocess", "python", "memfd"])
def test_exec_is_denied(mode: str, tree: Tree, how: str) -> None:
    true_binary = Path("/bin/true").read_bytes()

    def attempt() -> object:
        if how == "execv":
            os.execv("/bin/sh", ["sh", "-c", "true"])
        if how == "subprocess":
            return subprocess.run(["/bin/sh", "-c", "true"], check=False).returncode
        if how == "python":
            os.execv(sys.executable, [sys.executable, "-c", "pass"])
        fd = os.memfd_create("payload")
        os.write(fd, true_binary)
        os.execve(fd, ["payload"], {})
        return None

    assert_denied(run_confined(mode, tree.policy(mode, fs_read=["*"]), attempt))


def test_bytecode_and_environment(mode: str, tree: Tree) -> None:
    policy = tree.policy(mode, env={"AOTUI_APP": "hello"})
    outcome = run_confined(mode, policy, lambda: [sorted(os.environ), os.getcwd()])
    names, cwd = outcome.value
    assert set(names) <= {*KEPT_ENV, "PYTHONDONTWRITEBYTECODE", "AOTUI_APP"}
    assert "AOTUI_APP" in names
    assert cwd == str(tree.app)


# --- network --------------------------------------------------------------------------------

IPPROTO_MPTCP = 262
SOCKETS = {
    "tcp4": (socket.AF_INET, socket.SOCK_STREAM, 0),
    "udp4": (socket.AF_INET, socket.SOCK_DGRAM, 0),
    "tcp6": (socket.AF_INET6, socket.SOCK_STREAM, 0),
    "udp6": (socket.AF_INET6, socket.SOCK_DGRAM, 0),
    "mptcp": (socket.AF_INET, socket.SOCK_STREAM, IPPROTO_MPTCP),
    "raw": (socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP),
    "netlink": (socket.AF_NETLINK, socket.SOCK_RAW, 0),
    "packet": (socket.AF_PACKET, socket.SOCK_RAW, 0),
    # A datagram socket can sendto() any datagram socket path without connect().
    "unix-dgram": (socket.AF_UNIX, socket.SOCK_DGRAM, 0),
}


@pytest.mark.parametrize("kind", list(SOCKETS))
def test_network_sockets_are_denied(mode: str, tree: Tree, kind: str) -> None:
    family, kind_, proto = SOCKETS[kind]
    attempt = lambda: socket.socket(family, kind_ | socket.SOCK_CLOEXEC, proto).fileno()  # noqa: E731
    assert_denied(run_confined(mode, tree.policy(mode), attempt))


def test_connecting_to_loopback_is_denied(mode: str, tree: Tree) -> None:
    attempt = lambda: socket.create_connection(("127.0.0.1", 22), timeout=1).fileno()  # noqa: E731
    assert_denied(run_confined(mode, tree.policy(mode), attempt))


def test_dns_fails_fast(mode: str, tree: Tree) -> None:
    def attempt() -> object:
        start = time.monotonic()
        try:
            return socket.getaddrinfo("example.com", 80)
        finally:
            assert time.monotonic() - start < 2

    outcome = run_confined(mode, tree.policy(mode), attempt)
    assert outcome.error in {"gaierror", "PermissionError"}, outcome


@pytest.mark.parametrize("where", ["path", "abstract"])
def test_connecting_to_a_unix_socket_is_denied(mode: str, tree: Tree, where: str) -> None:
    # Like the desktop's control socket: listening, in a directory the app may even read.
    address = str(tree.shared / "control.sock") if where == "path" else f"\0aotui-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(address)
        if where == "path":  # the user's own socket: file permissions would let it connect
            os.chown(address, mode_uid(mode), mode_uid(mode))
        listener.listen(1)
        listener.setblocking(False)

        def attempt() -> None:
            socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).connect(address)

        assert_denied(run_confined(mode, tree.policy(mode, fs_read=["*"]), attempt))
        with pytest.raises(BlockingIOError):
            listener.accept()


# --- other processes ------------------------------------------------------------------------


def test_signalling_the_supervisor_is_denied(mode: str, tree: Tree, victim: int) -> None:
    parent = os.getpid()

    def attempt() -> list[str]:
        results = []
        for pid, signum in [(victim, signal.SIGTERM), (victim, signal.SIGKILL), (parent, 0)]:
            try:
                os.kill(pid, signum)
                results.append("sent")
            except PermissionError:
                results.append("denied")
        try:
            signal.pidfd_send_signal(os.pidfd_open(victim), signal.SIGKILL)
            results.append("sent")
        except PermissionError:
            results.append("denied")
        return results

    outcome = run_confined(mode, tree.policy(mode), attempt)
    assert outcome.value == ["denied"] * 4, outcome
    assert alive(victim)


def test_changing_the_supervisor_resources_is_denied(mode: str, tree: Tree, victim: int) -> None:
    # Same uid, no signal involved: seccomp allows these on the worker itself only.
    limits_before = Path(f"/proc/{victim}/limits").read_text()
    nice_before = os.getpriority(os.PRIO_PROCESS, victim)  # inherited: CI may run under nice
    attempts = {
        "prlimit": lambda: resource.prlimit(victim, resource.RLIMIT_NOFILE, (5, 5)),
        "renice": lambda: os.setpriority(os.PRIO_PROCESS, victim, 19),
        "renice-user": lambda: os.setpriority(os.PRIO_USER, 0, 19),
        "pin": lambda: os.sched_setaffinity(victim, {0}),
        "deschedule": lambda: os.sched_setscheduler(victim, os.SCHED_IDLE, os.sched_param(0)),
    }

    def attempt() -> dict[str, str]:
        results = {}
        for name, action in attempts.items():
            try:
                action()
                results[name] = "done"
            except PermissionError:
                results[name] = "denied"
        # …while the worker still manages its own.
        resource.setrlimit(resource.RLIMIT_NOFILE, (32, 32))
        # Lowered, not set to a fixed value: under `nice -n 10` a raise to 5 is denied anyway.
        os.setpriority(os.PRIO_PROCESS, 0, min(19, os.getpriority(os.PRIO_PROCESS, 0) + 1))
        os.sched_setaffinity(0, os.sched_getaffinity(0))
        return results

    outcome = run_confined(mode, tree.policy(mode), attempt)
    assert outcome.value == dict.fromkeys(attempts, "denied"), outcome
    assert Path(f"/proc/{victim}/limits").read_text() == limits_before
    assert os.getpriority(os.PRIO_PROCESS, victim) == nice_before
    assert os.sched_getscheduler(victim) == os.SCHED_OTHER


def test_ptrace_is_denied(mode: str, tree: Tree, victim: int) -> None:
    ptrace_attach, ptrace_seize = 16, 0x4206

    def attempt() -> list[str]:
        results = []
        for request in (ptrace_attach, ptrace_seize):
            try:
                syscall(NR["ptrace"], request, victim, 0, 0)
                results.append("attached")
            except PermissionError:
                results.append("denied")
        return results

    assert run_confined(mode, tree.policy(mode), attempt).value == ["denied", "denied"]


def test_reading_another_process_memory_is_denied(mode: str, tree: Tree, victim: int) -> None:
    class IoVec(ctypes.Structure):
        _fields_ = (("base", ctypes.c_void_p), ("len", ctypes.c_size_t))

    marker = ctypes.create_string_buffer(b"in the victim too, at the same address", 64)

    def attempt() -> int:
        local = ctypes.create_string_buffer(64)
        mine, theirs = IoVec(ctypes.addressof(local), 64), IoVec(ctypes.addressof(marker), 64)
        pointers = [ctypes.c_void_p(ctypes.addressof(v)) for v in (mine, theirs)]
        return syscall(NR["process_vm_readv"], victim, pointers[0], 1, pointers[1], 1, 0)

    assert_denied(run_confined(mode, tree.policy(mode), attempt))


@pytest.mark.parametrize("grant", ["none", "everything"])
def test_reading_the_supervisor_environ_is_denied(
    mode: str, tree: Tree, victim: int, grant: str
) -> None:
    # Even with fs:read:* Landlock refuses /proc/<pid>/ of a process outside the sandbox.
    policy = tree.policy(mode, fs_read=["*"] if grant == "everything" else [])
    for pid in (victim, os.getpid()):
        attempt = lambda pid=pid: Path(f"/proc/{pid}/environ").read_bytes()  # noqa: E731
        assert_denied(run_confined(mode, policy, attempt))


CLONE_NEWUSER, CLONE_NEWNS = 0x10000000, 0x00020000
DENIED_CALLS = {
    "unshare": (CLONE_NEWUSER,),
    "setns": (0, 0),
    "mount": (0, 0, 0, 0, 0),
    "umount2": (0, 0),
    "chroot": (0,),
    "pivot_root": (0, 0),
    "bpf": (5, 0, 0),  # BPF_PROG_LOAD
    "io_uring_setup": (8, 0),
    "keyctl": (0, 0, 0, 0, 0),
    "add_key": (0, 0, 0, 0, 0),
    "perf_event_open": (0, 0, -1, -1, 0),
    "userfaultfd": (0,),
    "init_module": (0, 0, 0),
    "kexec_load": (0, 0, 0, 0),
    "open_by_handle_at": (0, 0, 0),
    "process_vm_writev": (1, 0, 0, 0, 0, 0),
}


@pytest.mark.parametrize("name", list(DENIED_CALLS))
def test_dangerous_syscalls_are_denied(mode: str, tree: Tree, name: str) -> None:
    attempt = lambda: syscall(NR[name], *DENIED_CALLS[name])  # noqa: E731
    assert_denied(run_confined(mode, tree.policy(mode), attempt))


def test_clone_into_new_namespaces_is_denied(mode: str, tree: Tree) -> None:
    def attempt() -> list[str]:
        results = []
        for flags in (CLONE_NEWUSER, CLONE_NEWNS):
            try:
                child = syscall(NR["clone"], flags | signal.SIGCHLD, 0, 0, 0, 0)
            except PermissionError:
                results.append("denied")
                continue
            if child == 0:  # an escaped clone must not run the rest of the test
                os._exit(0)
            os.waitpid(child, 0)
            results.append("cloned")
        return results

    assert run_confined(mode, tree.policy(mode), attempt).value == ["denied", "denied"]


def test_clone3_says_enosys_so_libc_falls_back(mode: str, tree: Tree) -> None:
    outcome = run_confined(mode, tree.policy(mode), lambda: syscall(NR["clone3"], 0, 0))
    assert outcome.errno == errno.ENOSYS, outcome


def test_typing_into_the_terminal_is_denied(mode: str, tree: Tree) -> None:
    tiocsti = 0x5412

    char = ctypes.c_char(b"x")

    def attempt() -> list[str]:
        results = []
        # The kernel reads the command as 32 bits: the high bits must not hide it.
        for command in (tiocsti, tiocsti | 1 << 32):
            try:
                syscall(NR["ioctl"], 0, command, ctypes.c_void_p(ctypes.addressof(char)))
                results.append("typed")
            except PermissionError:
                results.append("denied")
        return results

    assert run_confined(mode, tree.policy(mode), attempt).value == ["denied", "denied"]


def test_identity_and_capabilities(mode: str, tree: Tree) -> None:
    def attempt() -> list[object]:
        caps = namespaces.effective_capabilities()
        return [os.getresuid(), os.getgroups(), caps, namespaces.parent_death_signal()]

    resuid, groups, caps, pdeathsig = run_confined(mode, tree.policy(mode), attempt).value
    assert resuid == [mode_uid(mode)] * 3
    if mode != "user":
        assert groups == []
    assert caps == 0
    assert pdeathsig == signal.SIGKILL  # re-armed after the uid change cleared it
