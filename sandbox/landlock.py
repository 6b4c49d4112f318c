"""Landlock: the filesystem, TCP and scope ruleset a worker restricts itself to (ABI 1–7).

The ruleset *handles* every right the running kernel knows, so anything without a rule is denied:
filesystem rights outside the granted trees, every TCP bind/connect (ABI ≥ 4: handled, no rule),
abstract Unix sockets and signals towards processes outside the sandbox (ABI ≥ 6 scopes).

No rule of a Python worker grants ``EXECUTE``: a forked worker never needs ``execve`` (shared
libraries are mapped with ``mmap``, which Landlock does not check), so ``/bin/sh`` and friends
stay out of reach even under ``fs:read:*``. A browser worker's policy grants it on the browser's
install directory and the ELF loader only (``Policy.grants``). A path that does not exist is
skipped, never an error.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass

from aotui.sandbox.linux import syscall

__all__ = [
    "READ",
    "READ_WRITE",
    "Confinement",
    "abi_version",
    "restrict",
]

# Same numbers on every architecture (they were added after the tables were unified).
_SYS_CREATE_RULESET = 444
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1

EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3
IOCTL_DEV = 1 << 15  # ABI 5

NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1

#: Filesystem rights each ABI handles (ABI 4, 6 and 7 added no filesystem right).
_FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 5: (1 << 16) - 1}
#: The only rights the kernel accepts on a rule for a non-directory.
_FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV

#: A read-only grant.
READ = READ_FILE | READ_DIR
#: A read-write grant: create, remove, rename and truncate; never execute, never device nodes.
READ_WRITE = (
    READ
    | WRITE_FILE
    | REMOVE_DIR
    | REMOVE_FILE
    | MAKE_DIR
    | MAKE_REG
    | MAKE_SOCK
    | MAKE_FIFO
    | MAKE_SYM
    | REFER
    | TRUNCATE
)


class _RulesetAttr(ctypes.Structure):
    _fields_ = (
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    )


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # the kernel's struct is __attribute__((packed)): 12 bytes
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


@dataclass(frozen=True)
class Confinement:
    """What :func:`restrict` enforced."""

    #: The Landlock ABI of the running kernel.
    abi: int
    #: TCP bind/connect denied by Landlock itself (ABI ≥ 4).
    tcp: bool
    #: Abstract Unix sockets and signals scoped to the sandbox (ABI ≥ 6).
    scoped: bool
    #: Granted paths that did not exist or could not be opened, with the reason.
    skipped: tuple[str, ...]


def abi_version() -> int:
    """The kernel's Landlock ABI, or 0 when Landlock is missing or disabled."""
    try:
        return syscall(_SYS_CREATE_RULESET, 0, 0, _CREATE_RULESET_VERSION, what="landlock")
    except OSError as exc:
        if exc.errno in (errno.ENOSYS, errno.EOPNOTSUPP):
            return 0
        raise


def _handled_fs(abi: int) -> int:
    return _FS_BY_ABI[max(level for level in _FS_BY_ABI if level <= abi)]


def restrict(grants: Mapping[str, int]) -> Confinement:
    """Restrict this thread and its future children to ``grants`` (path → rights), for good."""
    # Only the calling thread is restricted (until ABI 8's TSYNC), so call it single-threaded,
    # after PR_SET_NO_NEW_PRIVS.
    abi = abi_version()
    if abi < 1:
        raise OSError(errno.EOPNOTSUPP, "Landlock is not supported or disabled by this kernel")
    attr = _RulesetAttr(
        handled_access_fs=_handled_fs(abi),
        handled_access_net=NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0,
        scoped=SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0,
    )
    # An older kernel rejects a struct longer than the one it knows (E2BIG): pass its length.
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    ruleset = syscall(
        _SYS_CREATE_RULESET, ctypes.c_void_p(ctypes.addressof(attr)), size, 0, what="landlock"
    )
    skipped: list[str] = []
    try:
        for path, rights in grants.items():
            reason = _add_rule(ruleset, path, rights & attr.handled_access_fs)
            if reason:
                skipped.append(f"{path}: {reason}")
        syscall(_SYS_RESTRICT_SELF, ruleset, 0, what="landlock_restrict_self")
    finally:
        os.close(ruleset)
    return Confinement(abi, abi >= 4, abi >= 6, tuple(skipped))


def _add_rule(ruleset: int, path: str, rights: int) -> str:
    """Grant ``rights`` beneath ``path``; returns why the path was skipped, or ``""``."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError as exc:  # missing, or not reachable for this uid: nothing to grant
        return exc.strerror or type(exc).__name__
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            rights &= _FILE_RIGHTS
        if not rights:
            return "no applicable right"
        rule = _PathBeneathAttr(allowed_access=rights, parent_fd=fd)
        syscall(
            _SYS_ADD_RULE,
            ruleset,
            _RULE_PATH_BENEATH,
            ctypes.c_void_p(ctypes.addressof(rule)),
            0,
            what=f"landlock_add_rule({path})",
        )
    finally:
        os.close(fd)
    return ""
