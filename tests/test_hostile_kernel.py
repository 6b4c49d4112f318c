"""The kernel surface a hostile app reaches (issue 9, class E), in really confined processes.

The seccomp filter is default-deny: a syscall it does not allow fails (``EPERM`` for the ones
refused on purpose, ``ENOSYS`` for everything else, newer and unassigned numbers included),
ioctls are filtered by command, inotify and the mount listings are refused — while what Python,
its C extensions and the worker runtime need keeps working, in a confined child and in a real
worker on a real desktop.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import mmap
import os
import signal
import socket
import struct
from collections.abc import Callable, Iterator

import pytest

from aotui.sandbox import seccomp
from aotui.sandbox.linux import MACHINE, syscall
from tests.confined import MODES, Tree, make_tree, run_confined
from tests.conftest import RunningDesktop

NR = seccomp.SYSCALLS[MACHINE]
FS_IOC_GETFLAGS, FS_IOC_SETFLAGS = 0x80086601, 0x40086602
FS_IOC_FSGETXATTR, FS_IOC_FSSETXATTR = 0x801C581F, 0x401C5820
FS_APPEND_FL = 0x20


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def tree(mode: str) -> Iterator[Tree]:
    with make_tree(mode) as made:
        yield made


def _errno_of(call: object) -> int | None:
    try:
        call()  # type: ignore[operator]
    except OSError as exc:
        return exc.errno
    return None


def test_file_flag_ioctls_are_refused_and_reads_still_work(mode: str, tree: Tree) -> None:
    target = tree.data / "flagged.txt"

    def attempt() -> dict[str, int | None]:
        target.write_text("x")
        flags = ctypes.c_long(FS_APPEND_FL)
        xattr = ctypes.create_string_buffer(28)
        with open(target, "rb") as handle:
            fd = handle.fileno()
            address = ctypes.c_void_p(ctypes.addressof(flags))
            return {
                "setflags": _errno_of(lambda: syscall(NR["ioctl"], fd, FS_IOC_SETFLAGS, address)),
                "fssetxattr": _errno_of(
                    lambda: syscall(
                        NR["ioctl"],
                        fd,
                        FS_IOC_FSSETXATTR,
                        ctypes.c_void_p(ctypes.addressof(xattr)),
                    )
                ),
                "getflags": _errno_of(lambda: fcntl.ioctl(fd, FS_IOC_GETFLAGS, b"\0" * 8)),
                "fsgetxattr": _errno_of(lambda: fcntl.ioctl(fd, FS_IOC_FSGETXATTR, b"\0" * 28)),
            }

    result = run_confined(mode, tree.policy(mode), attempt).value
    assert result["setflags"] == errno.EPERM, result
    assert result["fssetxattr"] == errno.EPERM, result
    # A read may be unsupported by the file system, but it is not refused by the filter.
    assert result["getflags"] != errno.EPERM, result
    assert result["fsgetxattr"] != errno.EPERM, result


def test_what_python_needs_from_ioctl_still_works(mode: str, tree: Tree) -> None:
    def attempt() -> list[object]:
        left, right = socket.socketpair()
        left.setblocking(False)  # FIONBIO
        os.set_inheritable(left.fileno(), True)  # FIONCLEX
        os.set_inheritable(left.fileno(), False)  # FIOCLEX
        right.send(b"abc")
        readable = fcntl.ioctl(left.fileno(), 0x541B, struct.pack("i", 0))  # FIONREAD
        reader, writer = os.pipe()
        return [
            left.getblocking(),
            os.get_inheritable(left.fileno()),
            struct.unpack("i", readable)[0],
            os.isatty(reader),  # TCGETS: ENOTTY, so False
            _errno_of(lambda: fcntl.ioctl(writer, 0x5412, b"x")),  # TIOCSTI
        ]

    outcome = run_confined(mode, tree.policy(mode), attempt)
    assert outcome.value == [False, False, 3, False, errno.EPERM], outcome


def test_inotify_is_refused(mode: str, tree: Tree) -> None:
    def attempt() -> list[int | None]:
        results = [_errno_of(lambda: syscall(NR["inotify_init1"], 0))]
        if "inotify_init" in NR:
            results.append(_errno_of(lambda: syscall(NR["inotify_init"])))
        path = ctypes.create_string_buffer(str(tree.shared).encode())
        where = ctypes.c_void_p(ctypes.addressof(path))
        results.append(_errno_of(lambda: syscall(NR["inotify_add_watch"], 0, where, 0x100)))
        return results

    outcome = run_confined(mode, tree.policy(mode), attempt)
    assert outcome.value, outcome
    assert set(outcome.value) == {errno.EPERM}, outcome


#: Old syscalls on no list, so ``ENOSYS`` (each would answer otherwise with zero arguments:
#: ``EINVAL``, ``EFAULT``, ``EBADF``, 0…). Numbers per architecture: they are not in the filter's
#: table, which names only what it allows or refuses on purpose.
UNLISTED = {
    "x86_64": {
        "vmsplice": 278, "mincore": 27, "shmget": 29, "semget": 64, "msgget": 68, "mq_open": 240,
        "io_setup": 206, "setuid": 105, "getxattr": 191, "sync": 162, "modify_ldt": 154,
        "landlock_create_ruleset": 444, "cachestat": 451, "seccomp": 317,
    },
    "aarch64": {
        "vmsplice": 75, "mincore": 232, "shmget": 194, "semget": 190, "msgget": 186,
        "mq_open": 180, "io_setup": 0, "setuid": 146, "getxattr": 8, "sync": 81,
        "landlock_create_ruleset": 444, "cachestat": 451, "seccomp": 277,
    },
}[MACHINE]  # fmt: skip

#: Newer than the table or never assigned: ``ENOSYS`` (the kernel here has 467 and 469).
NEWER = {"getxattrat": 464, "open_tree_attr": 467, "file_getattr": 468, "file_setattr": 469}
UNASSIGNED = {"unassigned-500": 500, "unassigned-600": 600}

#: Refused on purpose: ``EPERM``, whether or not the kernel would refuse them too.
REFUSED = ("acct", "swapon", "kexec_load", "add_key", "statmount", "listmount", "lsm_list_modules")

EXPECTED = {
    **{name: errno.ENOSYS for name in (*UNLISTED, *NEWER, *UNASSIGNED)},
    **{name: errno.EPERM for name in REFUSED},
}
NUMBERS = {**UNLISTED, **NEWER, **UNASSIGNED, **{name: NR[name] for name in REFUSED}}


@pytest.mark.parametrize("name", list(EXPECTED))
def test_syscalls_not_allowed_fail(mode: str, tree: Tree, name: str) -> None:
    outcome = run_confined(mode, tree.policy(mode), lambda: syscall(NUMBERS[name], 0, 0, 0, 0))
    assert outcome.errno == EXPECTED[name], outcome


def test_prctl_options_off_the_list_are_refused(mode: str, tree: Tree) -> None:
    pr_set_name, pr_get_name, pr_set_dumpable, pr_set_child_subreaper = 15, 16, 4, 36

    def attempt() -> list[int | None]:
        name = ctypes.create_string_buffer(b"renamed", 16)
        where = ctypes.c_void_p(ctypes.addressof(name))
        return [
            _errno_of(lambda: syscall(NR["prctl"], pr_set_name, where, 0, 0)),
            _errno_of(lambda: syscall(NR["prctl"], pr_get_name, where, 0, 0)),
            _errno_of(lambda: syscall(NR["prctl"], pr_set_dumpable, 1, 0, 0)),
            _errno_of(lambda: syscall(NR["prctl"], pr_set_child_subreaper, 1, 0, 0)),
        ]

    outcome = run_confined(mode, tree.policy(mode), attempt)
    assert outcome.value == [None, None, errno.EPERM, errno.EPERM], outcome


def _int_0x80_getpid() -> int:
    """getpid through the i386 gate, as 32-bit code would call it."""
    code = bytes([0xB8, 0x14, 0, 0, 0, 0xCD, 0x80, 0xC3])  # mov eax, 20; int 0x80; ret
    page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(code)
    return int(ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(page)))())


@pytest.mark.skipif(MACHINE != "x86_64", reason="the i386 and x32 tables exist on x86_64 only")
@pytest.mark.parametrize(
    "attempt",
    [_int_0x80_getpid, lambda: syscall(0x40000000 | NR["getpid"])],
    ids=["int-0x80", "x32"],
)
def test_the_other_syscall_tables_kill_the_process(
    mode: str, tree: Tree, attempt: Callable[[], object]
) -> None:
    # Either would read another table, where the allow-list's numbers mean other calls.
    outcome = run_confined(mode, tree.policy(mode), attempt)
    assert outcome.signal == signal.SIGSYS, outcome


# --- the program itself, run by a small classic-BPF interpreter -----------------------------

KILL = 0x80000000
X32_BIT = 0x40000000


def _run_filter(program: list[seccomp.Insn], nr: int, arch: int, args: tuple[int, ...]) -> int:
    """What the kernel would answer: the program run on one ``struct seccomp_data``."""
    data = struct.pack("=IIQ6Q", nr, arch, 0, *(list(args) + [0] * 6)[:6])
    a, pc = 0, 0
    while True:
        code, jt, jf, k = program[pc]
        pc += 1
        if code == 0x20:  # LD W ABS
            a = struct.unpack_from("=I", data, k)[0]
        elif code == 0x54:  # ALU AND K
            a &= k
        elif code == 0x05:  # JA
            pc += k
        elif code in (0x15, 0x35, 0x45):  # JEQ, JGE, JSET
            taken = {0x15: a == k, 0x35: a >= k, 0x45: bool(a & k)}[code]
            pc += jt if taken else jf
        elif code == 0x06:
            return k
        else:
            raise AssertionError(f"unknown instruction {code:#x} at {pc - 1}")


@pytest.mark.parametrize("machine", list(seccomp.SYSCALLS))
def test_the_program_answers_every_number_as_the_lists_say(machine: str) -> None:
    program = seccomp.build_filter(machine)
    arch = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}[machine]
    numbers = seccomp.SYSCALLS[machine]
    checked = {numbers[name] for name in seccomp.CHECKED}
    for nr in range(1100):
        if nr not in checked:
            assert _run_filter(program, nr, arch, ()) == seccomp.verdict(machine, nr), nr
    for names in seccomp.ALLOWED.values():
        for name in names:
            if name in numbers:
                assert _run_filter(program, numbers[name], arch, ()) == seccomp.ALLOW, name
    for name in seccomp.DENIED:
        if name in numbers:
            assert _run_filter(program, numbers[name], arch, ()) == seccomp.EPERM, name
    assert not set(seccomp.CHECKED) & {n for names in seccomp.ALLOWED.values() for n in names}
    assert _run_filter(program, X32_BIT - 1, arch, ()) == seccomp.ENOSYS
    assert _run_filter(program, numbers["read"], 0x40000003, ()) == KILL  # i386: int 0x80
    if machine == "x86_64":
        assert _run_filter(program, X32_BIT | numbers["read"], arch, ()) == KILL
    # The checked calls reach their checks, whatever their place among the numbers.
    af_inet, af_unix, sock_stream = 2, 1, 1
    assert _run_filter(program, numbers["socket"], arch, (af_unix, sock_stream)) == seccomp.ALLOW
    assert _run_filter(program, numbers["socket"], arch, (af_inet, sock_stream)) == seccomp.EPERM
    assert _run_filter(program, numbers["ioctl"], arch, (0, 0x5401)) == seccomp.ALLOW  # TCGETS
    assert _run_filter(program, numbers["ioctl"], arch, (0, 0x5412)) == seccomp.EPERM  # TIOCSTI
    assert _run_filter(program, numbers["prctl"], arch, (15,)) == seccomp.ALLOW  # PR_SET_NAME
    assert _run_filter(program, numbers["clone3"], arch, ()) == seccomp.ENOSYS
    assert _run_filter(program, numbers["prlimit64"], arch, (1,)) == seccomp.EPERM


# --- in a real worker on a real desktop -------------------------------------------------------


def _execute(desktop: RunningDesktop, command: str) -> object:
    context = f'<context app_id="app_0" view_id="view_0">{command}</context>'
    return desktop.client.execute(context)["results"][0]  # type: ignore[index]


@pytest.fixture
def syscaller(start_desktop: Callable[..., RunningDesktop]) -> RunningDesktop:
    desktop = start_desktop(["syscaller"])
    desktop.client.execute("<context>open --application app_0</context>")
    return desktop


def test_a_real_worker_is_refused_what_the_filter_does_not_allow(
    syscaller: RunningDesktop,
) -> None:
    answers = {
        name: _execute(syscaller, f"execute call --number {NUMBERS[name]}") for name in EXPECTED
    }
    expected = {name: errno.errorcode[code] for name, code in EXPECTED.items()}
    assert answers == expected


def test_a_real_worker_does_ordinary_work_under_the_filter(syscaller: RunningDesktop) -> None:
    assert _execute(syscaller, "execute work") == {
        "threads": True,
        "fork": 7,
        "asyncio": 6,
        "sqlite": 4950,
        "tempfile": "scratch",
        "mmap": "x",
        "polling": 5,
        "timers": True,
        "extensions": ["1", True],
        "random": 16,
    }
