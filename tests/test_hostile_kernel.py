"""The kernel surface a hostile app reaches (issue 9, class E), in a really confined child.

ioctls are filtered by command (an allow-list), inotify and the mount listings are refused, and
every syscall numbered past the reviewed table fails with ``ENOSYS`` — while what Python itself
needs (``isatty``, non-blocking and close-on-exec switches) keeps working.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import socket
import struct
from collections.abc import Iterator

import pytest

from aotui.sandbox import seccomp
from aotui.sandbox.linux import MACHINE, syscall
from tests.confined import MODES, Tree, make_tree, run_confined

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


@pytest.mark.parametrize(
    ("number", "expected"),
    [
        (NR["statmount"], errno.EPERM),
        (NR["listmount"], errno.EPERM),
        (NR["lsm_list_modules"], errno.EPERM),
        (464, errno.ENOSYS),  # getxattrat
        (467, errno.ENOSYS),  # open_tree_attr
        (468, errno.ENOSYS),  # file_getattr
        (469, errno.ENOSYS),  # file_setattr
        (500, errno.ENOSYS),  # not assigned yet
    ],
)
def test_unreviewed_and_listing_syscalls_fail(
    mode: str, tree: Tree, number: int, expected: int
) -> None:
    outcome = run_confined(mode, tree.policy(mode), lambda: syscall(number, 0, 0, 0, 0))
    assert outcome.errno == expected, outcome


def test_the_reviewed_boundary_is_below_every_new_call() -> None:
    newest = max(
        number
        for table in seccomp.SYSCALLS.values()
        for name, number in table.items()
        if name not in ("setxattrat", "removexattrat")
    )
    assert newest < seccomp.FIRST_UNREVIEWED
    program = seccomp.build_filter(MACHINE)
    assert (0x35, 0, 1, seccomp.FIRST_UNREVIEWED) in program  # nr >= boundary → ENOSYS
