"""seccomp: a hand-assembled classic BPF filter that allows the syscalls a worker needs, no more.

Default deny, as Chromium's, Android's and systemd's filters are: a syscall the filter does not
name fails. The program, in order:

1. the audit arch must be the one the filter was built for, else the process is killed (an
   ``int 0x80`` i386 syscall or an x32 number would read another table);
2. the calls of :data:`CHECKED`, allowed only with certain arguments:

   - ``socket``/``socketpair``: only ``AF_UNIX`` with ``SOCK_STREAM`` or ``SOCK_SEQPACKET``.
     ``AF_INET``, ``AF_INET6`` (and so MPTCP, protocol 262), netlink, packet… are ``EPERM``; so
     are Unix datagram sockets, because ``sendto`` with an address reaches any datagram socket
     path without ``connect``;
   - ``clone`` with any namespace flag → ``EPERM``; ``clone3`` → ``ENOSYS`` (its flags live in
     memory BPF cannot read, and glibc falls back to ``clone`` on ``ENOSYS``);
   - ``ioctl``: only the commands of :data:`IOCTLS` (terminal and descriptor queries, flag
     reads); every other command → ``EPERM`` — among them ``TIOCSTI``/``TIOCLINUX`` (typing
     into a terminal) and ``FS_IOC_SETFLAGS``/``FS_IOC_FSSETXATTR`` (file flags Landlock does
     not cover). The command is compared on its low 32 bits, the width the kernel uses;
   - ``prctl``: only the options of :data:`PRCTLS` (thread names, queries) → else ``EPERM``;
   - ``personality`` other than a query → ``EPERM``;
   - the calls of :data:`GUARDED` aimed at another process → ``EPERM``: without this a worker
     sharing the supervisor's uid (an unprivileged desktop) could ``prlimit`` the supervisor
     down to no descriptors, renice, re-pin or deschedule it — Landlock's scopes cover signals
     only;

3. the calls of :data:`ALLOWED` (grouped by what they are for) → allowed;
4. the calls of :data:`DENIED`, refused on purpose → ``EPERM`` (``PermissionError`` in Python):
   escapes, kernel attack surface, metadata changes Landlock cannot see, inotify;
5. everything else — old calls nobody listed (SysV IPC, ``vmsplice``, xattr reads…), numbers a
   newer kernel adds (``open_tree_attr``, ``file_setattr``…), unassigned numbers → ``ENOSYS``,
   as a kernel without them would answer, so libc falls back where it can.

Steps 3–5 are one binary search over the syscall number, so the program stays short; the
kernel's constant-action cache then skips it for every allowed call that has no argument check.

A browser worker (a web app's Chromium) gets the **browser profile**, built from the same
tables: :data:`ALLOWED` plus :data:`BROWSER_ALLOWED` (``execve``, ``capset``), and the
:data:`BROWSER_IOCTLS`/:data:`BROWSER_PRCTLS` additions (none so far). Python workers keep
their filter unchanged.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import struct
from collections.abc import Iterator

from aotui.sandbox.linux import MACHINE, syscall

__all__ = [
    "ALLOW",
    "ALLOWED",
    "BROWSER_ALLOWED",
    "BROWSER_IOCTLS",
    "BROWSER_PRCTLS",
    "CHECKED",
    "DENIED",
    "ENOSYS",
    "EPERM",
    "GUARDED",
    "IOCTLS",
    "PRCTLS",
    "SYSCALLS",
    "build_filter",
    "install",
    "verdict",
]

# Every syscall the filter names, per architecture (aarch64 uses the asm-generic table and has
# none of x86_64's legacy path calls: ``open``, ``stat``, ``fork``, ``chmod``…).
SYSCALLS: dict[str, dict[str, int]] = {
    "x86_64": {
        "read": 0, "write": 1, "readv": 19, "writev": 20, "pread64": 17, "pwrite64": 18,
        "preadv": 295, "pwritev": 296, "preadv2": 327, "pwritev2": 328, "lseek": 8, "close": 3,
        "close_range": 436, "dup": 32, "dup2": 33, "dup3": 292, "fcntl": 72, "flock": 73,
        "fsync": 74, "fdatasync": 75, "sync_file_range": 277, "ftruncate": 77, "fallocate": 285,
        "fadvise64": 221, "readahead": 187, "sendfile": 40, "splice": 275, "tee": 276,
        "copy_file_range": 326, "pipe": 22, "pipe2": 293, "getdents": 78, "getdents64": 217,
        "fstat": 5, "fstatfs": 138, "open": 2, "openat": 257, "openat2": 437, "creat": 85,
        "stat": 4, "lstat": 6, "newfstatat": 262, "statx": 332, "access": 21, "faccessat": 269,
        "faccessat2": 439, "readlink": 89, "readlinkat": 267, "getcwd": 79, "chdir": 80,
        "fchdir": 81, "mkdir": 83, "mkdirat": 258, "rmdir": 84, "unlink": 87, "unlinkat": 263,
        "rename": 82, "renameat": 264, "renameat2": 316, "link": 86, "linkat": 265, "symlink": 88,
        "symlinkat": 266, "mknod": 133, "mknodat": 259, "truncate": 76, "statfs": 137,
        "umask": 95, "brk": 12, "mmap": 9, "munmap": 11, "mprotect": 10, "mremap": 25,
        "madvise": 28, "msync": 26, "mlock": 149, "mlock2": 325, "munlock": 150, "mlockall": 151,
        "munlockall": 152, "membarrier": 324, "memfd_create": 319, "mseal": 462, "futex": 202,
        "futex_waitv": 449, "set_robust_list": 273, "get_robust_list": 274,
        "set_tid_address": 218, "rseq": 334, "gettid": 186, "sched_yield": 24, "arch_prctl": 158,
        "sched_getaffinity": 204, "sched_getparam": 143, "sched_getscheduler": 145,
        "sched_get_priority_max": 146, "sched_get_priority_min": 147,
        "sched_rr_get_interval": 148, "sched_getattr": 315, "getcpu": 309, "rt_sigaction": 13,
        "rt_sigprocmask": 14, "rt_sigreturn": 15, "rt_sigpending": 127, "rt_sigtimedwait": 128,
        "rt_sigsuspend": 130, "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297,
        "sigaltstack": 131, "kill": 62, "tkill": 200, "tgkill": 234, "pause": 34,
        "restart_syscall": 219, "signalfd": 282, "signalfd4": 289, "pidfd_open": 434,
        "pidfd_send_signal": 424, "clock_gettime": 228, "clock_getres": 229,
        "clock_nanosleep": 230, "nanosleep": 35, "gettimeofday": 96, "time": 201, "times": 100,
        "alarm": 37, "getitimer": 36, "setitimer": 38, "timer_create": 222, "timer_settime": 223,
        "timer_gettime": 224, "timer_getoverrun": 225, "timer_delete": 226, "timerfd_create": 283,
        "timerfd_settime": 286, "timerfd_gettime": 287, "poll": 7, "ppoll": 271, "select": 23,
        "pselect6": 270, "epoll_create": 213, "epoll_create1": 291, "epoll_ctl": 233,
        "epoll_wait": 232, "epoll_pwait": 281, "epoll_pwait2": 441, "eventfd": 284,
        "eventfd2": 290, "fork": 57, "vfork": 58, "exit": 60, "exit_group": 231, "wait4": 61,
        "waitid": 247, "getpid": 39, "getppid": 110, "getpgrp": 111, "getpgid": 121,
        "getsid": 124, "getuid": 102, "geteuid": 107, "getgid": 104, "getegid": 108,
        "getresuid": 118, "getresgid": 120, "getgroups": 115, "capget": 125, "capset": 126,
        "getrlimit": 97,
        "setrlimit": 160, "getrusage": 98, "getpriority": 140, "ioprio_get": 252, "uname": 63,
        "sysinfo": 99, "getrandom": 318, "bind": 49, "listen": 50, "accept": 43, "accept4": 288,
        "getsockname": 51, "getpeername": 52, "sendto": 44, "recvfrom": 45, "sendmsg": 46,
        "recvmsg": 47, "sendmmsg": 307, "recvmmsg": 299, "shutdown": 48, "setsockopt": 54,
        "getsockopt": 55, "socket": 41, "socketpair": 53, "clone": 56, "clone3": 435, "ioctl": 16,
        "personality": 135, "prctl": 157, "prlimit64": 302, "setpriority": 141, "ioprio_set": 251,
        "sched_setaffinity": 203, "sched_setattr": 314, "sched_setscheduler": 144, "seccomp": 317,
        "connect": 42, "execve": 59, "execveat": 322, "ptrace": 101, "process_vm_readv": 310,
        "process_vm_writev": 311, "process_madvise": 440, "pidfd_getfd": 438, "kcmp": 312,
        "unshare": 272, "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155,
        "chroot": 161, "move_mount": 429, "open_tree": 428, "fsopen": 430, "fsconfig": 431,
        "fsmount": 432, "fspick": 433, "mount_setattr": 442, "open_by_handle_at": 304,
        "name_to_handle_at": 303, "fanotify_init": 300, "bpf": 321, "perf_event_open": 298,
        "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "keyctl": 250, "add_key": 248, "request_key": 249,
        "kexec_load": 246, "kexec_file_load": 320, "init_module": 175, "finit_module": 313,
        "delete_module": 176, "acct": 163, "swapon": 167, "swapoff": 168, "reboot": 169,
        "settimeofday": 164, "clock_settime": 227, "clock_adjtime": 305, "adjtimex": 159,
        "syslog": 103, "quotactl": 179, "quotactl_fd": 443, "vhangup": 153, "sethostname": 170,
        "setdomainname": 171, "lookup_dcookie": 212, "iopl": 172, "ioperm": 173, "uselib": 134,
        "chmod": 90, "fchmod": 91, "fchmodat": 268, "fchmodat2": 452, "chown": 92, "fchown": 93,
        "lchown": 94, "fchownat": 260, "utime": 132, "utimes": 235, "futimesat": 261,
        "utimensat": 280, "setxattr": 188, "lsetxattr": 189, "fsetxattr": 190, "removexattr": 197,
        "lremovexattr": 198, "fremovexattr": 199, "setxattrat": 463, "removexattrat": 466,
        "setsid": 112, "setpgid": 109, "inotify_init": 253, "inotify_init1": 294,
        "inotify_add_watch": 254, "inotify_rm_watch": 255, "statmount": 457, "listmount": 458,
        "lsm_get_self_attr": 459, "lsm_set_self_attr": 460, "lsm_list_modules": 461,
    },
    "aarch64": {
        "read": 63, "write": 64, "readv": 65, "writev": 66, "pread64": 67, "pwrite64": 68,
        "preadv": 69, "pwritev": 70, "preadv2": 286, "pwritev2": 287, "lseek": 62, "close": 57,
        "close_range": 436, "dup": 23, "dup3": 24, "fcntl": 25, "flock": 32, "fsync": 82,
        "fdatasync": 83, "sync_file_range": 84, "ftruncate": 46, "fallocate": 47,
        "fadvise64": 223, "readahead": 213, "sendfile": 71, "splice": 76, "tee": 77,
        "copy_file_range": 285, "pipe2": 59, "getdents64": 61, "fstat": 80, "fstatfs": 44,
        "openat": 56, "openat2": 437, "newfstatat": 79, "statx": 291, "faccessat": 48,
        "faccessat2": 439, "readlinkat": 78, "getcwd": 17, "chdir": 49, "fchdir": 50,
        "mkdirat": 34, "unlinkat": 35, "renameat": 38, "renameat2": 276, "linkat": 37,
        "symlinkat": 36, "mknodat": 33, "truncate": 45, "statfs": 43, "umask": 166, "brk": 214,
        "mmap": 222, "munmap": 215, "mprotect": 226, "mremap": 216, "madvise": 233, "msync": 227,
        "mlock": 228, "mlock2": 284, "munlock": 229, "mlockall": 230, "munlockall": 231,
        "membarrier": 283, "memfd_create": 279, "mseal": 462, "futex": 98, "futex_waitv": 449,
        "set_robust_list": 99, "get_robust_list": 100, "set_tid_address": 96, "rseq": 293,
        "gettid": 178, "sched_yield": 124, "sched_getaffinity": 123, "sched_getparam": 121,
        "sched_getscheduler": 120, "sched_get_priority_max": 125, "sched_get_priority_min": 126,
        "sched_rr_get_interval": 127, "sched_getattr": 275, "getcpu": 168, "rt_sigaction": 134,
        "rt_sigprocmask": 135, "rt_sigreturn": 139, "rt_sigpending": 136, "rt_sigtimedwait": 137,
        "rt_sigsuspend": 133, "rt_sigqueueinfo": 138, "rt_tgsigqueueinfo": 240,
        "sigaltstack": 132, "kill": 129, "tkill": 130, "tgkill": 131, "restart_syscall": 128,
        "signalfd4": 74, "pidfd_open": 434, "pidfd_send_signal": 424, "clock_gettime": 113,
        "clock_getres": 114, "clock_nanosleep": 115, "nanosleep": 101, "gettimeofday": 169,
        "times": 153, "getitimer": 102, "setitimer": 103, "timer_create": 107,
        "timer_settime": 110, "timer_gettime": 108, "timer_getoverrun": 109, "timer_delete": 111,
        "timerfd_create": 85, "timerfd_settime": 86, "timerfd_gettime": 87, "ppoll": 73,
        "pselect6": 72, "epoll_create1": 20, "epoll_ctl": 21, "epoll_pwait": 22,
        "epoll_pwait2": 441, "eventfd2": 19, "exit": 93, "exit_group": 94, "wait4": 260,
        "waitid": 95, "getpid": 172, "getppid": 173, "getpgid": 155, "getsid": 156, "getuid": 174,
        "geteuid": 175, "getgid": 176, "getegid": 177, "getresuid": 148, "getresgid": 150,
        "getgroups": 158, "capget": 90, "capset": 91, "getrlimit": 163, "setrlimit": 164,
        "getrusage": 165,
        "getpriority": 141, "ioprio_get": 31, "uname": 160, "sysinfo": 179, "getrandom": 278,
        "bind": 200, "listen": 201, "accept": 202, "accept4": 242, "getsockname": 204,
        "getpeername": 205, "sendto": 206, "recvfrom": 207, "sendmsg": 211, "recvmsg": 212,
        "sendmmsg": 269, "recvmmsg": 243, "shutdown": 210, "setsockopt": 208, "getsockopt": 209,
        "socket": 198, "socketpair": 199, "clone": 220, "clone3": 435, "ioctl": 29,
        "personality": 92, "prctl": 167, "prlimit64": 261, "setpriority": 140, "ioprio_set": 30,
        "sched_setaffinity": 122, "sched_setattr": 274, "sched_setscheduler": 119, "seccomp": 277,
        "connect": 203, "execve": 221, "execveat": 281, "ptrace": 117, "process_vm_readv": 270,
        "process_vm_writev": 271, "process_madvise": 440, "pidfd_getfd": 438, "kcmp": 272,
        "unshare": 97, "setns": 268, "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51,
        "move_mount": 429, "open_tree": 428, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
        "fspick": 433, "mount_setattr": 442, "open_by_handle_at": 265, "name_to_handle_at": 264,
        "fanotify_init": 262, "bpf": 280, "perf_event_open": 241, "userfaultfd": 282,
        "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "keyctl": 219,
        "add_key": 217, "request_key": 218, "kexec_load": 104, "kexec_file_load": 294,
        "init_module": 105, "finit_module": 273, "delete_module": 106, "acct": 89, "swapon": 224,
        "swapoff": 225, "reboot": 142, "settimeofday": 170, "clock_settime": 112,
        "clock_adjtime": 266, "adjtimex": 171, "syslog": 116, "quotactl": 60, "quotactl_fd": 443,
        "vhangup": 58, "sethostname": 161, "setdomainname": 162, "lookup_dcookie": 18,
        "fchmod": 52, "fchmodat": 53, "fchmodat2": 452, "fchown": 55, "fchownat": 54,
        "utimensat": 88, "setxattr": 5, "lsetxattr": 6, "fsetxattr": 7, "removexattr": 14,
        "lremovexattr": 15, "fremovexattr": 16, "setxattrat": 463, "removexattrat": 466,
        "setsid": 157, "setpgid": 154, "inotify_init1": 26, "inotify_add_watch": 27,
        "inotify_rm_watch": 28, "statmount": 457, "listmount": 458, "lsm_get_self_attr": 459,
        "lsm_set_self_attr": 460, "lsm_list_modules": 461,
    },
}  # fmt: skip

#: Allowed whatever the arguments, by what they are for. Paths are Landlock's to check, sockets
#: are Unix sockets only (``socket`` is checked), signals are bounded by uid and Landlock's scope.
ALLOWED: dict[str, tuple[str, ...]] = {
    "descriptors": (
        "read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev",
        "preadv2", "pwritev2", "lseek", "close", "close_range", "dup", "dup2", "dup3", "fcntl",
        "flock", "fsync", "fdatasync", "sync_file_range", "ftruncate", "fallocate", "fadvise64",
        "readahead", "sendfile", "splice", "tee", "copy_file_range", "pipe", "pipe2", "getdents",
        "getdents64", "fstat", "fstatfs",
    ),
    "paths": (
        "open", "openat", "openat2", "creat", "stat", "lstat", "newfstatat", "statx", "access",
        "faccessat", "faccessat2", "readlink", "readlinkat", "getcwd", "chdir", "fchdir",
        "mkdir", "mkdirat", "rmdir", "unlink", "unlinkat", "rename", "renameat", "renameat2",
        "link", "linkat", "symlink", "symlinkat", "mknod", "mknodat", "truncate", "statfs",
        "umask",
    ),
    "memory": (
        "brk", "mmap", "munmap", "mprotect", "mremap", "madvise", "msync", "mlock", "mlock2",
        "munlock", "mlockall", "munlockall", "membarrier", "memfd_create", "mseal",
    ),
    "threads": (
        "futex", "futex_waitv", "set_robust_list", "get_robust_list", "set_tid_address", "rseq",
        "gettid", "sched_yield", "arch_prctl", "sched_getaffinity", "sched_getparam",
        "sched_getscheduler", "sched_get_priority_max", "sched_get_priority_min",
        "sched_rr_get_interval", "sched_getattr", "getcpu",
    ),
    "signals": (
        "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending", "rt_sigtimedwait",
        "rt_sigsuspend", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "sigaltstack", "kill", "tkill",
        "tgkill", "pause", "restart_syscall", "signalfd", "signalfd4", "pidfd_open",
        "pidfd_send_signal",
    ),
    "time": (
        "clock_gettime", "clock_getres", "clock_nanosleep", "nanosleep", "gettimeofday", "time",
        "times", "alarm", "getitimer", "setitimer", "timer_create", "timer_settime",
        "timer_gettime", "timer_getoverrun", "timer_delete", "timerfd_create", "timerfd_settime",
        "timerfd_gettime",
    ),
    "polling": (
        "poll", "ppoll", "select", "pselect6", "epoll_create", "epoll_create1", "epoll_ctl",
        "epoll_wait", "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2",
    ),
    "processes": (
        "fork", "vfork", "exit", "exit_group", "wait4", "waitid", "getpid", "getppid", "getpgrp",
        "getpgid", "getsid", "getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid",
        "getgroups", "capget", "getrlimit", "setrlimit", "getrusage", "getpriority",
        "ioprio_get", "uname", "sysinfo", "getrandom",
    ),
    "sockets": (
        "bind", "listen", "accept", "accept4", "getsockname", "getpeername", "sendto",
        "recvfrom", "sendmsg", "recvmsg", "sendmmsg", "recvmmsg", "shutdown", "setsockopt",
        "getsockopt",
    ),
}  # fmt: skip

#: Refused on purpose with ``EPERM``: escapes (namespaces, mounts, ptrace-like access to other
#: processes, exec, connect), kernel attack surface no app needs (bpf, io_uring, keyrings…) and
#: changes to file metadata. Not needed for the filter to refuse them (it refuses what it does
#: not allow); listed so an app sees ``PermissionError``, not "not implemented".
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
    "inotify_init", "inotify_init1", "inotify_add_watch", "inotify_rm_watch", "statmount",
    "listmount", "lsm_get_self_attr", "lsm_set_self_attr", "lsm_list_modules",
)  # fmt: skip

#: Allowed with argument checks (step 2 of the program), before the search over the number.
CHECKED = (
    "socket", "socketpair", "clone", "clone3", "ioctl", "prctl", "personality", "prlimit64",
    "setpriority", "ioprio_set", "sched_setaffinity", "sched_setattr", "sched_setscheduler",
)  # fmt: skip

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

#: The ``prctl`` options a worker may use: thread names (ZeroMQ names its threads, glibc names
#: memory regions), the parent-death signal, and queries. Not ``PR_SET_DUMPABLE``,
#: ``PR_SET_MM``, ``PR_SET_PTRACER``, ``PR_SET_CHILD_SUBREAPER``, ``PR_SET_SECUREBITS``….
PRCTLS: dict[str, int] = {
    "PR_SET_PDEATHSIG": 1,
    "PR_GET_PDEATHSIG": 2,
    "PR_GET_DUMPABLE": 3,
    "PR_GET_KEEPCAPS": 7,
    "PR_SET_NAME": 15,
    "PR_GET_NAME": 16,
    "PR_GET_SECCOMP": 21,
    "PR_CAPBSET_READ": 23,
    "PR_SET_TIMERSLACK": 29,
    "PR_GET_TIMERSLACK": 30,
    "PR_SET_NO_NEW_PRIVS": 38,
    "PR_GET_NO_NEW_PRIVS": 39,
    "PR_GET_THP_DISABLE": 42,
    "PR_SET_VMA": 0x53564D41,
}

#: The browser profile (a web app's worker runs Chromium): the calls it allows on top of
#: :data:`ALLOWED`, each justified in docs/sandbox.md, *The browser profile*. Every other table
#: is the same; a Python worker's filter never includes these.
BROWSER_ALLOWED: dict[str, tuple[str, ...]] = {
    # The worker starts the browser, and the browser its zygote, renderer and GPU processes:
    # Landlock grants EXECUTE only on the browser's own files and the ELF loader.
    "exec": ("execve",),
    # Chromium's zygote clears its children's capability sets before they run (they hold none
    # in a worker anyway); capset can only lower them without CAP_SETPCAP, and only its own.
    "capabilities": ("capset",),
}

#: ``ioctl`` commands the browser profile adds to :data:`IOCTLS`.
BROWSER_IOCTLS: dict[str, int] = {}

#: ``prctl`` options the browser profile adds to :data:`PRCTLS`.
BROWSER_PRCTLS: dict[str, int] = {}

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
_JA = 0x05
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06
#: A conditional jump's offsets are one byte; a longer one goes through ``JA``.
_MAX_JUMP = 255

_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_RET_ALLOW = 0x7FFF0000
#: The filter's three answers to a syscall number (``SECCOMP_RET_*`` values).
ALLOW, EPERM, ENOSYS = _RET_ALLOW, _RET_ERRNO | errno.EPERM, _RET_ERRNO | errno.ENOSYS

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


def _one_of(argument: int, values: list[int]) -> list[Insn]:
    """Allow when the low 32 bits of ``argument`` are one of ``values``, deny every other."""
    body: list[Insn] = [_ld(_arg(argument))]
    for index, value in enumerate(values):
        # A match jumps over the remaining compares and the deny, to the allow.
        body.append((_JEQ_K, len(values) - index, 0, value))
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


def _checks(numbers: dict[str, int], browser: bool) -> Iterator[Insn]:
    """Step 2: the calls allowed with argument checks (``browser``: the browser profile's)."""
    ioctls = {**IOCTLS, **(BROWSER_IOCTLS if browser else {})}
    prctls = {**PRCTLS, **(BROWSER_PRCTLS if browser else {})}
    yield from _on_syscall(numbers["socket"], _socket_check())
    yield from _on_syscall(numbers["socketpair"], _socket_check())
    yield from _on_syscall(
        numbers["clone"],
        [_ld(_arg(0)), (_JSET_K, 0, 1, _CLONE_NAMESPACES), _deny(), _ret(_RET_ALLOW)],
    )
    yield from _on_syscall(numbers["clone3"], [_deny(errno.ENOSYS)])
    yield from _on_syscall(numbers["ioctl"], _one_of(1, list(ioctls.values())))
    yield from _on_syscall(numbers["prctl"], _one_of(0, list(prctls.values())))
    yield from _on_syscall(
        numbers["personality"],
        [_ld(_arg(0)), (_JEQ_K, 0, 1, _PERSONALITY_QUERY), _ret(_RET_ALLOW), _deny()],
    )
    for name, checks in GUARDED.items():
        yield from _on_syscall(numbers[name], _only_if(checks))


def verdict(machine: str, number: int, *, browser: bool = False) -> int:
    """What steps 3–5 answer for syscall ``number``: :data:`ALLOW`, :data:`EPERM` or ENOSYS."""
    return _verdicts(machine, browser).get(number, ENOSYS)


@functools.cache
def _verdicts(machine: str, browser: bool) -> dict[int, int]:
    numbers = SYSCALLS[machine]
    result = {numbers[name]: EPERM for name in DENIED if name in numbers}
    groups = [*ALLOWED.values(), *(BROWSER_ALLOWED.values() if browser else ())]
    for names in groups:
        result.update((numbers[name], ALLOW) for name in names if name in numbers)
    return result


def _ranges(machine: str, browser: bool) -> list[tuple[int, int]]:
    """``(first number, verdict)`` of each run of equal verdicts, from 0 to the end of numbers.

    The checked calls never reach the search: they take their neighbour's verdict, so runs
    merge across them.
    """
    checked = {SYSCALLS[machine][name] for name in CHECKED}
    ranges: list[tuple[int, int]] = []
    for number in range(max(SYSCALLS[machine].values()) + 2):
        if number in checked:
            continue
        action = verdict(machine, number, browser=browser)
        if not ranges or ranges[-1][1] != action:
            ranges.append((number if ranges else 0, action))
    return ranges


def _search(ranges: list[tuple[int, int]]) -> list[Insn]:
    """A binary search over ``ranges`` on the number in ``A``; every leaf returns its verdict."""
    if len(ranges) == 1:
        return [_ret(ranges[0][1])]
    middle = len(ranges) // 2
    below, above = _search(ranges[:middle]), _search(ranges[middle:])
    boundary = ranges[middle][0]
    if len(below) <= _MAX_JUMP:
        return [(_JGE_K, len(below), 0, boundary), *below, *above]
    # Too far for a conditional jump: ``nr >= boundary`` falls on a ``JA`` over ``below``.
    return [(_JGE_K, 0, 1, boundary), (_JA, 0, 0, len(below)), *below, *above]


def build_filter(machine: str = MACHINE, *, browser: bool = False) -> list[Insn]:
    """The filter program for ``machine`` as ``(code, jt, jf, k)`` instructions; ``browser``
    builds the browser profile (the same tables plus :data:`BROWSER_ALLOWED`)."""
    numbers = SYSCALLS[machine]
    program: list[Insn] = [
        _ld(_ARCH),
        (_JEQ_K, 1, 0, _AUDIT_ARCH[machine]),
        _ret(_RET_KILL_PROCESS),
        _ld(_NR),
    ]
    if machine == "x86_64":
        program += [(_JGE_K, 0, 1, _X32_SYSCALL_BIT), _ret(_RET_KILL_PROCESS)]
    program += _checks(numbers, browser)
    program += _search(_ranges(machine, browser))
    return program


@functools.cache
def _assemble(machine: str, browser: bool = False) -> bytes:
    program = build_filter(machine, browser=browser)
    return b"".join(struct.pack("=HBBI", *insn) for insn in program)


def install(machine: str = MACHINE, *, browser: bool = False) -> int:
    """Install the filter (``browser``: the browser profile) on every thread of this process
    for good; returns its length."""
    if machine not in SYSCALLS:
        raise OSError(errno.ENOSYS, f"no seccomp syscall table for {machine}")
    code = _assemble(machine, browser)
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
    _assemble(MACHINE, True)
