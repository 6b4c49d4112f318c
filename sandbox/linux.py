"""Thin ctypes access to the Linux calls Python 3.11 does not wrap (syscall, prctl, unshare).

Only the standard library: the confinement modules, the probe and the zygote's cgroup cleanup use
it before or without anything else of ours.
"""

from __future__ import annotations

import ctypes
import os
import platform

__all__ = [
    "MACHINE",
    "PR_SET_NO_NEW_PRIVS",
    "check",
    "libc",
    "prctl",
    "set_no_new_privs",
    "syscall",
    "unshare",
]

#: ``x86_64`` or ``aarch64``: selects the syscall table of :mod:`sandbox.seccomp`.
MACHINE = platform.machine()

PR_SET_NO_NEW_PRIVS = 38
_PR_GET_NO_NEW_PRIVS = 39

#: ``use_errno`` so a failing call's errno survives until :func:`check` reads it.
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.prctl.restype = ctypes.c_int
libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
libc.unshare.restype = ctypes.c_int
libc.unshare.argtypes = [ctypes.c_int]


def check(result: int, what: str) -> int:
    """Return ``result``, or raise the ``OSError`` (``PermissionError``, …) its errno names."""
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")
    return result


def syscall(number: int, *args: int | ctypes.c_void_p, what: str = "syscall") -> int:
    """Call syscall ``number``; integers go as full ``long``s (``syscall`` is variadic)."""
    converted = [a if isinstance(a, ctypes.c_void_p) else ctypes.c_long(a) for a in args]
    return check(int(libc.syscall(ctypes.c_long(number), *converted)), what)


def prctl(option: int, arg2: int = 0, arg3: int = 0, arg4: int = 0, arg5: int = 0) -> int:
    """``prctl(2)``; raises ``OSError`` on failure."""
    return check(int(libc.prctl(option, arg2, arg3, arg4, arg5)), f"prctl({option})")


def unshare(flags: int) -> None:
    """``unshare(2)`` (``os.unshare`` only exists from Python 3.12)."""
    check(int(libc.unshare(flags)), f"unshare({flags:#x})")


def set_no_new_privs() -> None:
    """Forbid gaining privileges through exec for good (Landlock and seccomp require it)."""
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    if prctl(_PR_GET_NO_NEW_PRIVS) != 1:
        raise OSError(0, "PR_SET_NO_NEW_PRIVS did not stick")
