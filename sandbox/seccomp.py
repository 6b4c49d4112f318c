"""seccomp: a hand-assembled classic BPF filter over the syscalls a worker must never make.

Default allow, deny a table (the kernel attack surface and every way out of the sandbox's other
layers). The program, in order:

1. the audit arch must be the one the filter was built for, else the process is killed (an
   ``int 0x80`` i386 syscall or an x32 number would read another table);
2. ``socket``/``socketpair``: only ``AF_UNIX`` with ``SOCK_STREAM`` or ``SOCK_SEQPACKET``.
   ``AF_INET``, ``AF_INET6`` (and so MPTCP, protocol 262), netlink, packet… are ``EPERM``; so are
   Unix datagram sockets, because ``sendto`` with an address reaches any datagram socket path
   without ``connect``;
3. ``clone`` with any namespace flag → ``EPERM``; ``clone3`` → ``ENOSYS`` (its flags live in
   memory BPF cannot read, and glibc falls back to ``clone`` on ``ENOSYS``);
4. ``ioctl``: only the commands of :data:`IOCTLS` (terminal and descriptor queries, flag
   reads); every other command → ``EPERM`` — among them ``TIOCSTI``/``TIOCLINUX`` (typing into
   a terminal) and ``FS_IOC_SETFLAGS``/``FS_IOC_FSSETXATTR`` (file flags Landlock does not
   cover). The command is compared on its low 32 bits, the width the kernel uses;
5. ``personality`` other than a query → ``EPERM``;
6. the calls of :data:`GUARDED` aimed at another process → ``EPERM``: without this a worker
   sharing the supervisor's uid (an unprivileged desktop) could ``prlimit`` the supervisor down
   to no descriptors, renice, re-pin or deschedule it — Landlock's scopes cover signals only;
7. the table of :data:`DENIED` → ``EPERM`` (inotify among them: a watch on a directory the
   app's uid can read but Landlock does not grant would show another app's file names);
8. any syscall numbered :data:`FIRST_UNREVIEWED` or above → ``ENOSYS``, as an older kernel would
   answer: what a newer kernel adds (``open_tree_attr``, ``file_setattr``…) is refused until
   someone reviews it and lists it here. Everything else is allowed: below that number the filter
   is still a deny-list (see docs/sandbox.md, *Threat model*).

``EPERM`` reaches Python code as ``PermissionError``.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import struct
from collections.abc import Iterator

from aotui.sandbox.linux import MACHINE, syscall

__all__ = [
    "DENIED",
    "FIRST_UNREVIEWED",
    "GUARDED",
    "IOCTLS",
    "SYSCALLS",
    "build_filter",
    "install",
]

# The syscalls the filter names, per architecture (aarch64 uses the asm-generic table).
SYSCALLS: dict[str, dict[str, int]] = {
    "x86_64": {
        "socket": 41, "connect": 42, "socketpair": 53, "clone": 56, "clone3": 435, "ioctl": 16,
        "personality": 135, "execve": 59, "execveat": 322, "seccomp": 317,
        "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "process_madvise": 440,
        "pidfd_getfd": 438, "kcmp": 312, "unshare": 272, "setns": 308, "mount": 165,
        "umount2": 166, "pivot_root": 155, "chroot": 161, "move_mount": 429, "open_tree": 428,
        "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
        "open_by_handle_at": 304, "name_to_handle_at": 303, "fanotify_init": 300, "bpf": 321,
        "perf_event_open": 298, "userfaultfd": 323, "io_uring_setup": 425,
        "io_uring_enter": 426, "io_uring_register": 427, "keyctl": 250, "add_key": 248,
        "request_key": 249, "kexec_load": 246, "kexec_file_load": 320, "init_module": 175,
        "finit_module": 313, "delete_module": 176, "acct": 163, "swapon": 167, "swapoff": 168,
        "reboot": 169, "settimeofday": 164, "clock_settime": 227, "clock_adjtime": 305,
        "adjtimex": 159, "syslog": 103, "quotactl": 179, "quotactl_fd": 443, "vhangup": 153,
        "sethostname": 170, "setdomainname": 171, "lookup_dcookie": 212, "iopl": 172,
        "ioperm": 173, "uselib": 134, "prlimit64": 302, "setpriority": 141,
        "sched_setaffinity": 203, "sched_setscheduler": 144, "sched_setattr": 314,
        "ioprio_set": 251, "chmod": 90, "fchmod": 91, "fchmodat": 268, "fchmodat2": 452,
        "chown": 92, "fchown": 93, "lchown": 94, "fchownat": 260, "utime": 132, "utimes": 235,
        "futimesat": 261, "utimensat": 280, "setxattr": 188, "lsetxattr": 189, "fsetxattr": 190,
        "removexattr": 197, "lremovexattr": 198, "fremovexattr": 199, "setxattrat": 463,
        "removexattrat": 466, "setsid": 112, "setpgid": 109, "inotify_init": 253,
        "inotify_add_watch": 254, "inotify_rm_watch": 255, "inotify_init1": 294,
        "statmount": 457, "listmount": 458, "lsm_get_self_attr": 459, "lsm_set_self_attr": 460,
        "lsm_list_modules": 461,
    },
    "aarch64": {
        "socket": 198, "connect": 203, "socketpair": 199, "clone": 220, "clone3": 435,
        "ioctl": 29, "personality": 92, "execve": 221, "execveat": 281, "seccomp": 277,
        "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "process_madvise": 440,
        "pidfd_getfd": 438, "kcmp": 272, "unshare": 97, "setns": 268, "mount": 40,
        "umount2": 39, "pivot_root": 41, "chroot": 51, "move_mount": 429, "open_tree": 428,
        "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
        "open_by_handle_at": 265, "name_to_handle_at": 264, "fanotify_init": 262, "bpf": 280,
        "perf_event_open": 241, "userfaultfd": 282, "io_uring_setup": 425,
        "io_uring_enter": 426, "io_uring_register": 427, "keyctl": 219, "add_key": 217,
        "request_key": 218, "kexec_load": 104, "kexec_file_load": 294, "init_module": 105,
        "finit_module": 273, "delete_module": 106, "acct": 89, "swapon": 224, "swapoff": 225,
        "reboot": 142, "settimeofday": 170, "clock_settime": 112, "clock_adjtime": 266,
        "adjtimex": 171, "syslog": 116, "quotactl": 60, "quotactl_fd": 443, "vhangup": 58,
        "sethostname": 161, "setdomainname": 162, "lookup_dcookie": 18, "prlimit64": 261,
        "setpriority": 140, "sched_setaffinity": 122, "sched_setscheduler": 119,
        "sched_setattr": 274, "ioprio_set": 30, "fchmod": 52, "fchmodat": 53, "fchmodat2": 452,
        "fchown": 55, "fchownat": 54, "utimensat": 88, "setxattr": 5, "lsetxattr": 6,
        "fsetxattr": 7, "removexattr": 14, "lremovexattr": 15, "fremovexattr": 16,
        "setxattrat": 463, "removexattrat": 466, "setsid": 157, "setpgid": 154,
        "inotify_init1": 26, "inotify_add_watch": 27, "inotify_rm_watch": 28, "statmount": 457,
        "listmount": 458, "lsm_get_self_attr": 459, "lsm_set_self_attr": 460,
        "lsm_list_modules": 461,
    },
}  # fmt: skip

#: Denied outright with ``EPERM``: escapes (namespaces, mounts, ptrace-like access to other
#: processes, exec, connect), kernel attack surface no app needs (bpf, io_uring, keyrings…) and
#: changes to file metadata.
DENIED = (
    "connect", "execve", "execveat", "ptrace", "process_vm_readv", "process_vm_writev",
    "process_madvise", "pidfd_getfd", "kcmp", "unshare", "setns", "mount", "umount2",
    "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount", "fspick",
    "mount_setattr", "open_by_handle_at", "name_to_handle_at", "fanotify_init", "bpf",
    "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "keyctl", "add_key", "request_key", "kexec_load", "kexec_file_load", "init_module",
    "finit_module", "delete_module", "acct", "swapon", "swapoff", "reboot", "settimeofday",
    "clock_settime", "clock_adjtime", "adjtimex", "syslog", "quotactl", "quotactl_fd", "vhangup",
    "sethostname", "setdomainname", "lookup_dcookie", "iopl", "ioperm", "uselib",
    # Landlock (ABI 7) has no right for metadata: without these a worker could chmod, chown,
    # touch or tag any file its uid owns — for an unprivileged desktop, all of the user's.
    "chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat", "utime",
    "utimes", "futimesat", "utimensat", "setxattr", "lsetxattr", "fsetxattr", "removexattr",
    "lremovexattr", "fremovexattr", "setxattrat", "removexattrat",
    # The worker leads its own session and process group (set before confinement); its
    # descendants may not leave it, so killing the group kills every process the app started.
    "setsid", "setpgid",
    # Watches see names Landlock would not show; mount listings show the host's every mount;
    # LSM attributes are nothing an app needs.
    "inotify_init1", "inotify_add_watch", "inotify_rm_watch", "statmount", "listmount",
    "lsm_get_self_attr", "lsm_set_self_attr", "lsm_list_modules",
)  # fmt: skip

#: Denied where the architecture has them (``inotify_init`` is x86_64's legacy form).
_DENIED_LEGACY = ("inotify_init",)

#: The first syscall number nobody has reviewed (``setxattrat``, 6.13, and every later one); from
#: here on a call fails with ``ENOSYS`` unless it is named above. Both tables share numbers here.
FIRST_UNREVIEWED = 463

#: The ``ioctl`` commands a worker may use: terminal and descriptor queries (``isatty``, the
#: window size, bytes readable), non-blocking and close-on-exec switches, file flag reads.
IOCTLS: dict[str, int] = {
    "TCGETS": 0x5401,
    "TIOCGPGRP": 0x540F,
    "TIOCGWINSZ": 0x5413,
    "FIONREAD": 0x541B,
    "FIONBIO": 0x5421,
    "FIONCLEX": 0x5450,
    "FIOCLEX": 0x5451,
    "FIOASYNC": 0x5452,
    "TCGETS2": 0x802C542A,
    "FS_IOC_GETFLAGS": 0x80086601,
    "FS_IOC_FSGETXATTR": 0x801C581F,
}

_ALL = 0xFFFFFFFF
_SCHED_OTHER, _SCHED_RESET_ON_FORK = 0, 0x40000000

#: Calls allowed only when every ``(argument index, mask, value)`` check holds — on the caller
#: itself (pid argument 0), or harmless to others. ``setpriority(PRIO_USER, 0)`` would reach every
#: process of the uid; ``sched_setscheduler`` is what ``pthread_setschedparam`` calls with its
#: own thread id (ZeroMQ's threads do), so it may target anyone but only with ``SCHED_OTHER``,
#: whose sole priority, 0, changes nothing.
GUARDED: dict[str, tuple[tuple[int, int, int], ...]] = {
    "prlimit64": ((0, _ALL, 0),),
    "setpriority": ((0, _ALL, 0), (1, _ALL, 0)),  # PRIO_PROCESS, who = 0
    "ioprio_set": ((0, _ALL, 1), (1, _ALL, 0)),  # IOPRIO_WHO_PROCESS, who = 0
    "sched_setaffinity": ((0, _ALL, 0),),
    "sched_setattr": ((0, _ALL, 0),),
    "sched_setscheduler": ((1, ~_SCHED_RESET_ON_FORK & _ALL, _SCHED_OTHER),),
}

_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_X32_SYSCALL_BIT = 0x40000000

_AF_UNIX = 1
_SOCK_STREAM, _SOCK_SEQPACKET = 1, 5
_SOCK_TYPE_MASK = 0xF  # strips SOCK_NONBLOCK and SOCK_CLOEXEC
#: CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET.
_CLONE_NAMESPACES = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000
_CLONE_NAMESPACES |= 0x40000000
_PERSONALITY_QUERY = 0xFFFFFFFF

# Classic BPF opcodes (linux/filter.h).
_LD_W_ABS = 0x20
_ALU_AND_K = 0x54
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06

_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_RET_ALLOW = 0x7FFF0000

# Offsets in struct seccomp_data: nr, arch, instruction pointer, then six 64-bit args; an
# argument's low 32 bits come first (both supported architectures are little-endian).
_NR, _ARCH = 0, 4


def _arg(index: int) -> int:
    return 16 + 8 * index


_SECCOMP_SET_MODE_FILTER = 1
_SECCOMP_FILTER_FLAG_TSYNC = 1

Insn = tuple[int, int, int, int]


def _ld(offset: int) -> Insn:
    return (_LD_W_ABS, 0, 0, offset)


def _ret(value: int) -> Insn:
    return (_RET_K, 0, 0, value)


def _deny(code: int = errno.EPERM) -> Insn:
    return _ret(_RET_ERRNO | code)


def _on_syscall(number: int, body: list[Insn]) -> Iterator[Insn]:
    """``if nr == number: body`` — the body ends in a return, so ``A`` needs no reload after."""
    yield (_JEQ_K, 0, len(body), number)
    yield from body


def _socket_check() -> list[Insn]:
    # Jump offsets count the instructions to skip: 0 falls through to the next one.
    return [
        _ld(_arg(0)),
        (_JEQ_K, 0, 4, _AF_UNIX),
        _ld(_arg(1)),
        (_ALU_AND_K, 0, 0, _SOCK_TYPE_MASK),
        (_JEQ_K, 2, 0, _SOCK_STREAM),
        (_JEQ_K, 1, 0, _SOCK_SEQPACKET),
        _deny(),
        _ret(_RET_ALLOW),
    ]


def _ioctl_check() -> list[Insn]:
    """Allow the commands of :data:`IOCTLS` (low 32 bits), deny every other."""
    commands = list(IOCTLS.values())
    body: list[Insn] = [_ld(_arg(1))]
    for index, command in enumerate(commands):
        # A match jumps over the remaining compares and the deny, to the allow.
        body.append((_JEQ_K, len(commands) - index, 0, command))
    return [*body, _deny(), _ret(_RET_ALLOW)]


def _only_if(checks: tuple[tuple[int, int, int], ...]) -> list[Insn]:
    """Allow when every ``(argument, mask, value)`` holds on the low 32 bits, else deny."""
    body: list[Insn] = []
    jumps = []
    for argument, mask, value in checks:
        body.append(_ld(_arg(argument)))
        if mask != _ALL:
            body.append((_ALU_AND_K, 0, 0, mask))
        jumps.append(len(body))
        body.append((_JEQ_K, 0, 0, value))
    deny = len(body) + 1  # after the allow
    for at in jumps:  # a mismatch jumps straight to the deny
        code, jt, _jf, k = body[at]
        body[at] = (code, jt, deny - at - 1, k)
    return [*body, _ret(_RET_ALLOW), _deny()]


def build_filter(machine: str = MACHINE) -> list[Insn]:
    """The filter program for ``machine`` as ``(code, jt, jf, k)`` instructions."""
    numbers = SYSCALLS[machine]
    program: list[Insn] = [
        _ld(_ARCH),
        (_JEQ_K, 1, 0, _AUDIT_ARCH[machine]),
        _ret(_RET_KILL_PROCESS),
        _ld(_NR),
    ]
    if machine == "x86_64":
        program += [(_JGE_K, 0, 1, _X32_SYSCALL_BIT), _ret(_RET_KILL_PROCESS)]
    program += _on_syscall(numbers["socket"], _socket_check())
    program += _on_syscall(numbers["socketpair"], _socket_check())
    program += _on_syscall(
        numbers["clone"],
        [_ld(_arg(0)), (_JSET_K, 0, 1, _CLONE_NAMESPACES), _deny(), _ret(_RET_ALLOW)],
    )
    program += _on_syscall(numbers["clone3"], [_deny(errno.ENOSYS)])
    program += _on_syscall(numbers["ioctl"], _ioctl_check())
    program += _on_syscall(
        numbers["personality"],
        [_ld(_arg(0)), (_JEQ_K, 0, 1, _PERSONALITY_QUERY), _ret(_RET_ALLOW), _deny()],
    )
    for name, checks in GUARDED.items():
        program += _on_syscall(numbers[name], _only_if(checks))
    for name in (*DENIED, *_DENIED_LEGACY):
        if name in numbers:  # the legacy path calls (chmod, iopl…) exist on x86_64 only
            program += _on_syscall(numbers[name], [_deny()])
    program += [(_JGE_K, 0, 1, FIRST_UNREVIEWED), _deny(errno.ENOSYS)]
    program.append(_ret(_RET_ALLOW))
    return program


@functools.cache
def _assemble(machine: str) -> bytes:
    return b"".join(struct.pack("=HBBI", *insn) for insn in build_filter(machine))


def install(machine: str = MACHINE) -> int:
    """Install the filter on every thread of this process for good; returns its length."""
    if machine not in SYSCALLS:
        raise OSError(errno.ENOSYS, f"no seccomp syscall table for {machine}")
    code = _assemble(machine)
    buffer = ctypes.create_string_buffer(code, len(code))
    # struct sock_fprog: unsigned short len, then (aligned) a pointer to the instructions.
    fprog = struct.pack("=H6xQ", len(code) // 8, ctypes.addressof(buffer))
    fprog_buffer = ctypes.create_string_buffer(fprog, len(fprog))
    syscall(
        SYSCALLS[machine]["seccomp"],
        _SECCOMP_SET_MODE_FILTER,
        _SECCOMP_FILTER_FLAG_TSYNC,
        ctypes.c_void_p(ctypes.addressof(fprog_buffer)),
        what="seccomp(SET_MODE_FILTER)",
    )
    return len(code) // 8


if MACHINE in SYSCALLS:  # assembled once, in the zygote, not in every worker
    _assemble(MACHINE)
