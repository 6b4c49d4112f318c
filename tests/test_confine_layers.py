"""The confinement layers one by one: resource bombs, the worker's start path, strict mode, the
cgroup lifecycle, the seccomp program and Landlock alone, and the ``doctor`` probe.

Confined children come from ``tests/confined.py``; see ``tests/test_confine.py`` for the modes.
"""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import zmq

from aotui.sandbox import cgroups, landlock, rlimits, seccomp
from aotui.sandbox.confine import ConfinementError, required_layers
from aotui.sandbox.linux import set_no_new_privs
from aotui.sandbox.policy import Policy
from aotui.sandbox.probe import probe
from aotui.sandbox.render import render_view
from aotui.sandbox.worker import load_app
from tests.confined import APP, MODES, ROOT, Tree, make_tree, run_confined

root_only = pytest.mark.skipif(not ROOT, reason="needs root (cgroups, per-app uid)")


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def tree(mode: str) -> Iterator[Tree]:
    with make_tree(mode) as made:
        yield made


# --- layers reported, strict mode ------------------------------------------------------------


def test_every_required_layer_is_in_force(mode: str, tree: Tree) -> None:
    outcome = run_confined(mode, tree.policy(mode, strict=True), lambda: None)
    assert outcome.error is None, outcome
    assert required_layers(mode == "root") <= set(outcome.layers)
    assert ("uid-drop" in outcome.layers) == (mode == "root")
    assert ("userns" in outcome.layers) == (mode != "root")


@root_only
def test_strict_mode_refuses_to_run_without_a_per_app_uid() -> None:
    with make_tree("root") as tree:
        outcome = run_confined("root", tree.policy("root", uid=None), lambda: None)
        assert "uid-drop" not in outcome.layers
        assert "no-caps" in outcome.layers
        # confine itself raises: the attempt never runs; the harness reports the error.
        with pytest.raises(AssertionError, match=r"ConfinementError.*uid-drop"):
            run_confined("root", tree.policy("root", uid=None, strict=True), lambda: None)


def test_confinement_error_names_every_missing_layer() -> None:
    error = ConfinementError({"seccomp": "ENOSYS", "cgroup": "read-only"})
    assert str(error).endswith("missing layers: cgroup (read-only); seccomp (ENOSYS)")


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ({"fs_reads": []}, "unknown policy keys: fs_reads"),
        ({"fs_read": ["relative/path"]}, "relative path"),
        ({"fs_write": "/tmp"}, "list of absolute paths"),
        ({"uid": 0}, "positive id"),
        ({"limits": {"memory_mb": -1}}, "limits.memory_mb"),
        ({"limits": {"swap_mb": 1}}, "limits.swap_mb"),
    ],
)
def test_a_malformed_policy_is_refused(policy: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        Policy.from_mapping(policy)


def test_star_grants_everything_read_only() -> None:
    policy = Policy.from_mapping({"fs_read": ["*"], "app_dir": "/srv/app"})
    grants = policy.grants()
    assert grants["/"] == landlock.READ
    assert grants["/srv/app"] == landlock.READ
    assert not any(rights & landlock.EXECUTE for rights in grants.values())
    assert policy.app == "app"
    assert policy.runtime_read


def test_confine_refuses_a_second_thread(mode: str, tree: Tree) -> None:
    # Landlock and credentials bind one thread: a thread started before would stay unconfined.
    def start_a_thread() -> None:
        threading.Thread(target=time.sleep, args=(5,), daemon=True).start()

    with pytest.raises(AssertionError, match="single-threaded"):
        run_confined(mode, tree.policy(mode), lambda: None, before=start_a_thread)


# --- resources -----------------------------------------------------------------------------


def test_open_files_bomb_is_stopped_and_the_worker_survives(mode: str, tree: Tree) -> None:
    def attempt() -> list[int]:
        fds: list[int] = []
        try:
            while len(fds) < 10_000:
                fds.append(os.open("/dev/null", os.O_RDONLY))
        except OSError as exc:
            failure = exc.errno
        for fd in fds:
            os.close(fd)
        os.close(os.open("/dev/null", os.O_RDONLY))  # and it recovers
        return [failure or 0, len(fds)]

    outcome = run_confined(mode, tree.policy(mode, limits={"open_files": 64}), attempt)
    failure, opened = outcome.value
    assert failure == errno.EMFILE, outcome
    assert opened < 64


def test_a_file_cannot_grow_past_the_size_limit(mode: str, tree: Tree) -> None:
    def attempt() -> int:
        with open(tree.data / "big", "wb") as handle:
            handle.write(b"x" * (2 << 20))
        return 0

    outcome = run_confined(mode, tree.policy(mode, limits={"file_size_mb": 1}), attempt)
    assert outcome.errno == errno.EFBIG, outcome
    assert (tree.data / "big").stat().st_size <= 1 << 20


def test_fork_bomb_is_bounded(mode: str, tree: Tree) -> None:
    def attempt() -> list[object]:
        children: list[int] = []
        error = "none"
        try:
            while len(children) < 200:
                pid = os.fork()
                if pid == 0:
                    signal.pause()
                    os._exit(0)
                children.append(pid)
        except OSError as exc:
            error = type(exc).__name__
        finally:
            for pid in children:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
        return [error, len(children)]

    outcome = run_confined(mode, tree.policy(mode, limits={"pids": 16}), attempt)
    error, forked = outcome.value
    assert error == "BlockingIOError", outcome
    assert forked < 16


def test_one_huge_allocation_hits_the_address_space_limit(mode: str, tree: Tree) -> None:
    size = rlimits.address_space_bytes(64, 32)
    outcome = run_confined(
        mode, tree.policy(mode, limits={"memory_mb": 64}), lambda: len(bytearray(size))
    )
    assert outcome.error == "MemoryError", outcome


def test_a_growing_memory_bomb_is_stopped(mode: str, tree: Tree) -> None:
    def attempt() -> int:
        hoard = []
        while True:
            hoard.append(b"x" * (32 << 20))  # written, so really resident

    policy = tree.policy(mode, limits={"memory_mb": 64, "pids": 8})
    # The child is forked from this test process, whose address space the backstop counts too: a
    # large pytest process (the whole suite loaded) leaves less than the cgroup's limit before
    # it. A worker forks from the small zygote, where the cgroup acts first.
    mapped = psutil.Process().memory_info().vms
    roomy = mapped + 2 * 68 * 2**20 < rlimits.address_space_bytes(64, 8)
    outcome = run_confined(mode, policy, attempt)
    if mode == "root" and roomy:  # the memory cgroup's OOM killer
        assert outcome.signal == signal.SIGKILL, outcome
    elif mode == "root":  # either layer stops it, whichever comes first
        assert outcome.signal == signal.SIGKILL or outcome.error == "MemoryError", outcome
    else:  # no cgroup: the address-space backstop, at memory_mb + base + stacks
        assert outcome.error == "MemoryError", outcome


@root_only
def test_cgroup_limits_and_cleanup() -> None:
    seen: dict[str, str] = {}

    def inspect(pid: int) -> None:
        for controller, directory in cgroups.cgroup_paths(APP, pid).items():
            for name in os.listdir(directory):
                if name in {"memory.limit_in_bytes", "pids.max", "cpu.cfs_quota_us"}:
                    seen[name] = Path(directory, name).read_text().strip()
            seen[controller] = directory

    limits = {"memory_mb": 100, "pids": 20, "cpu_percent": 25}
    with make_tree("root") as tree:
        outcome = run_confined(
            "root", tree.policy("root", limits=limits), lambda: 0, inspect=inspect
        )
    assert "cgroup" in outcome.layers
    # Backstops above the watchdog's limits: memory + 10 %, twice the CPU share.
    assert seen["memory.limit_in_bytes"] == str(int((100 << 20) * cgroups.MEMORY_BACKSTOP))
    assert seen["pids.max"] == "20"
    assert seen["cpu.cfs_quota_us"] == str(cgroups.CPU_PERIOD_US // 2)  # 2 x 25 % of a period
    assert not any(os.path.exists(seen[c]) for c in cgroups.CONTROLLERS)


@root_only
def test_removing_cgroups_kills_what_the_worker_left_behind() -> None:
    ready, go = os.pipe()
    worker = os.fork()
    if worker == 0:
        try:
            cgroups.join_cgroups(APP, {"memory_mb": 64, "pids": 8, "cpu_percent": 50})
            if os.fork() == 0:  # an orphan that stays in the cgroup
                signal.pause()
            os.write(go, b"1")
        finally:
            os._exit(0)
    assert os.read(ready, 1) == b"1"
    os.waitpid(worker, 0)
    procs = Path(cgroups.cgroup_paths(APP, worker)["pids"], "cgroup.procs")
    orphan = int(procs.read_text().split()[0])
    assert cgroups.remove_cgroups(APP, worker) == []
    assert not procs.parent.exists()
    assert _dead(orphan)
    os.close(ready)
    os.close(go)


def _dead(pid: int, timeout_s: float = 1.0) -> bool:
    """Gone, or a zombie waiting for init to reap it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state == "Z":
            return True
        time.sleep(0.005)
    return False


@root_only
def test_sweeping_removes_only_the_cgroups_of_dead_workers() -> None:
    dead = os.fork()
    if dead == 0:
        os._exit(0)
    os.waitpid(dead, 0)
    stale, live = cgroups.cgroup_paths(APP, dead), cgroups.cgroup_paths(APP, os.getpid())
    try:
        for directory in [*stale.values(), *live.values()]:
            os.makedirs(directory)
        removed = cgroups.sweep_cgroups()
        assert set(stale.values()) <= set(removed)
        assert all(os.path.isdir(d) for d in live.values())
    finally:
        cgroups.remove_cgroups(APP, dead)
        for directory in live.values():
            os.rmdir(directory)


def test_cgroup_names_are_one_safe_path_part() -> None:
    assert cgroups.cgroup_name("com.example.notes", 42) == "com.example.notes-42"
    assert cgroups.cgroup_name("../../etc", 7) == "_.._etc-7"


# --- the worker's start path ---------------------------------------------------------------


def test_the_worker_start_path_runs_under_full_confinement(mode: str, tree: Tree) -> None:
    """As the zygote and run_worker do: channel on fd 3, confine, ZeroMQ binds it with USE_FD,
    the supervisor connects, the app is imported and rendered."""
    sockets = tree.base / "sockets"  # granted to no one: ZeroMQ must not need the path
    sockets.mkdir()
    path = str(sockets / "channel.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)

    def serve() -> str:
        context = zmq.Context(1)
        channel = context.socket(zmq.PAIR)
        channel.setsockopt(zmq.USE_FD, 3)
        channel.bind(f"ipc://{path}")
        if not channel.poll(3000):
            raise TimeoutError("nothing from the supervisor")
        request = channel.recv()
        app = load_app(str(tree.app), "app.py", "confined")
        markdown = render_view(next(iter(app.roots())).render()).markdown
        channel.send(request + b" " + markdown.encode())
        channel.close(linger=2000)
        context.term()
        return "served"

    context = zmq.Context()
    supervisor = context.socket(zmq.PAIR)
    try:
        supervisor.connect(f"ipc://{path}")
        supervisor.send(b"ping")  # queued until the worker's ZeroMQ accepts the connection
        policy = tree.policy(mode, strict=True)
        before = lambda: os.dup2(listener.fileno(), 3)  # noqa: E731
        outcome = run_confined(mode, policy, serve, before=before)
        assert outcome.value == "served", outcome
        assert supervisor.poll(2000), "the confined worker's reply never arrived"
        reply = supervisor.recv().decode()
    finally:
        supervisor.close(linger=0)
        context.term()
        listener.close()
    assert reply.startswith("ping "), reply
    assert "from a confined worker" in reply
    assert os.path.exists(path), "ZeroMQ unlinked the channel's path"
    assert not (tree.app / "__pycache__").exists()


# --- seccomp and Landlock on their own ------------------------------------------------------


@pytest.mark.parametrize("machine", list(seccomp.SYSCALLS))
def test_the_seccomp_program_is_well_formed(machine: str) -> None:
    program = seccomp.build_filter(machine)
    assert len(program) < 4096  # BPF_MAXINSNS
    for index, (code, jt, jf, _k) in enumerate(program):
        if code & 0x07 == 0x05:  # a jump: both targets inside the program
            assert index + 1 + max(jt, jf) < len(program), (index, code, jt, jf)
    assert program[0] == (0x20, 0, 0, 4)  # it starts by checking the architecture
    assert program[-1] == (0x06, 0, 0, 0x50026)  # and refuses what it does not name (ENOSYS)
    numbers = seccomp.SYSCALLS[machine]
    assert len(set(numbers.values())) == len(numbers)
    assert set(seccomp.GUARDED) <= set(numbers)
    missing = set(seccomp.DENIED) - set(numbers)
    legacy = {"iopl", "ioperm", "uselib", "chmod", "chown", "lchown", "utime", "utimes"}
    assert missing <= (legacy | {"futimesat", "inotify_init"} if machine == "aarch64" else set())


def _header_numbers(path: str, prefix: str) -> dict[str, int]:
    text = Path(path).read_text()
    return {m[1]: int(m[2]) for m in re.finditer(rf"#define {prefix}(\w+)\s+(\d+)\b", text)}


@pytest.mark.parametrize(
    ("machine", "header", "prefix"),
    [
        ("x86_64", "/usr/include/x86_64-linux-gnu/asm/unistd_64.h", "__NR_"),
        ("aarch64", "/usr/include/asm-generic/unistd.h", "__NR(?:3264)?_"),
    ],
)
def test_the_syscall_tables_match_the_kernel_headers(
    machine: str, header: str, prefix: str
) -> None:
    if not os.path.exists(header):
        pytest.skip(f"{header} is not installed")
    known = _header_numbers(header, prefix)
    for name, number in seccomp.SYSCALLS[machine].items():
        if name in known:  # headers older than the kernel lack the newest calls
            assert known[name] == number, name


def test_landlock_alone_denies_exec_and_tcp_with_eacces(tree: Tree) -> None:
    def restrict_only() -> list[int | None]:
        set_no_new_privs()
        landlock.restrict({str(tree.app): landlock.READ})
        results: list[int | None] = []
        for attempt in (
            lambda: os.execv("/bin/true", ["true"]),
            lambda: socket.create_connection(("127.0.0.1", 9), timeout=1),
            lambda: Path(tree.secret).read_text(),
        ):
            try:
                attempt()
                results.append(None)
            except OSError as exc:
                results.append(exc.errno)
        return results

    assert _in_plain_child(restrict_only) == [errno.EACCES, errno.EACCES, errno.EACCES]


def test_seccomp_alone_denies_with_eperm() -> None:
    def filter_only() -> list[int | None]:
        set_no_new_privs()
        seccomp.install()
        results: list[int | None] = []
        for attempt in (
            lambda: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM),
            lambda: os.execv("/bin/true", ["true"]),
        ):
            try:
                attempt()
                results.append(None)
            except OSError as exc:
                results.append(exc.errno)
        return results

    assert _in_plain_child(filter_only) == [errno.EPERM, errno.EPERM]


def _in_plain_child(action: Callable[[], Any]) -> Any:
    """Run ``action`` in a forked child with no other layer; returns its (JSON) result."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.write(write_end, json.dumps(action()).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    try:
        data = os.read(read_end, 65536)
    finally:
        os.close(read_end)
        os.waitpid(pid, 0)
    return json.loads(data)


# --- the doctor's probe -------------------------------------------------------------------


def test_probe_reports_every_layer_quickly() -> None:
    leftovers = Path(cgroups.CGROUP_ROOT, "pids", cgroups.PARENT)
    before = set(leftovers.glob("aotui-probe-*"))
    start = time.monotonic()
    report = probe()
    assert time.monotonic() - start < 1.0
    assert report["landlock_abi"] >= 1
    mine = report["this_user"]
    assert mine["mode"] == ("root" if ROOT else "unprivileged")
    for layer in ("landlock", "seccomp", "netns", "rlimits"):
        assert mine["layers"][layer]["available"], mine["layers"][layer]
    if ROOT:
        assert report["unprivileged_user"]["layers"]["userns"]["available"]
        assert not report["unprivileged_user"]["layers"]["cgroup"]["available"]
    # Its own probe's group is gone. Another suite's probe on this machine (CI runs root and
    # unprivileged suites at once) may hold one for a moment: only one that stays is left over.
    def left() -> set[Path]:
        return set(leftovers.glob("aotui-probe-*")) - before

    deadline = time.monotonic() + 3
    while left() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left()
