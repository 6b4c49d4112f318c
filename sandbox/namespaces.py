"""Namespaces and identity: empty network and IPC namespaces, then a per-app uid or a userns.

Root unshares the namespaces and drops to a per-app uid; anyone else gets them, and a mount
namespace for its filesystem view (``sandbox/fsview.py``), inside a new user namespace that maps
only its own uid.

A new network namespace holds only a loopback interface that is down, so nothing — not even the
host's loopback services — is reachable over IP whatever else fails. The IPC namespace hides the
host's System V shared memory, semaphores and message queues.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator

from aotui.sandbox.linux import check, libc, prctl, unshare

__all__ = [
    "CLONE_NEWIPC",
    "CLONE_NEWNET",
    "CLONE_NEWNS",
    "CLONE_NEWUSER",
    "drop_capabilities",
    "drop_to_uid",
    "effective_capabilities",
    "enter_user_namespace",
    "isolate_network",
    "keep_parent_death_signal",
    "parent_death_signal",
]

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000

_PR_SET_PDEATHSIG = 1
_PR_GET_PDEATHSIG = 2
_CAPABILITY_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))


class _CapData(ctypes.Structure):
    _fields_ = (
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    )


def isolate_network() -> None:
    """Root only: move into new, empty network and IPC namespaces, and a mount namespace of its
    own for the filesystem view (``sandbox/fsview.py``) — one call, as one costs the same."""
    unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC)


def enter_user_namespace() -> None:
    """Unprivileged: new user (this uid mapped to itself), mount, network and IPC namespaces.

    ``unshare(CLONE_NEWUSER)`` grants every capability inside the new namespace: the caller
    builds its filesystem view with them (``sandbox/fsview.py``) and must then drop them
    (:func:`drop_capabilities`), whether or not this raised.
    """
    uid, gid = os.geteuid(), os.getegid()
    unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC)
    # setgroups must be denied before an unprivileged process may write its gid_map.
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")


def drop_to_uid(uid: int, gid: int) -> None:
    """Root only: become ``uid``/``gid`` with no supplementary groups, irreversibly."""
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    # Leaving uid 0 clears the capability sets; check rather than trust.
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid):
        raise PermissionError(f"the uid drop to {uid}:{gid} did not take effect")
    if effective_capabilities():
        raise PermissionError(f"capabilities survived the uid drop to {uid}")


def drop_capabilities() -> None:
    """Clear the effective, permitted and inheritable capability sets of this thread."""
    header = _CapHeader(_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    check(int(libc.capset(ctypes.byref(header), data)), "capset")


def effective_capabilities() -> int:
    """This thread's effective capability set as a 64-bit mask."""
    header = _CapHeader(_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    check(int(libc.capget(ctypes.byref(header), data)), "capget")
    return int(data[0].effective) | int(data[1].effective) << 32


def parent_death_signal() -> int:
    """The signal this process gets when its parent dies (``PR_SET_PDEATHSIG``), or 0."""
    signum = ctypes.c_int(0)
    prctl(_PR_GET_PDEATHSIG, ctypes.addressof(signum))
    return signum.value


@contextlib.contextmanager
def keep_parent_death_signal() -> Iterator[None]:
    """Re-arm ``PR_SET_PDEATHSIG`` after the credential change in the body, which clears it."""
    # Without this a worker that dropped its uid would outlive its zygote.
    signum = parent_death_signal()
    parent = os.getppid()
    yield
    if signum:
        prctl(_PR_SET_PDEATHSIG, signum)
        # The parent may have died in between: its signal can no longer come, so say so.
        if os.getppid() != parent:
            raise ProcessLookupError("the parent died while credentials were changing")


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
