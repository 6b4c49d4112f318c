"""A malicious app: its one operation, ``attempt``, tries one way out of the sandbox.

``attempt --what NAME [--arg ARG]`` runs the attempt ``NAME`` from :data:`ATTEMPTS`. An attempt
that gets through returns a short string (the escape suite treats any result as an escape); one
that is stopped lets the kernel's error propagate unchanged, as real code would, so the worker
answers ``E_PERMISSION`` for a ``PermissionError`` and ``E_APP_ERROR`` for any other error.
Nothing here ever sends a packet off the machine: every network attempt fails at ``socket()`` or
``connect()`` when the sandbox holds, and uses a 1 s timeout when it does not.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import socket
import time
from collections.abc import Callable

from aotui.sandbox.sdk import App, View, operation

#: The tree the manifest grants for reading and writing: a placeholder each test's copy of the app
#: replaces with a tree of its own (mode 0777).
GRANT = "/tmp/aotui-escape-grant"
#: Where the app's own files are (read-only to it).
HERE = os.path.dirname(os.path.abspath(__file__))

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.ptrace.restype = ctypes.c_long
_libc.unshare.restype = ctypes.c_int
_libc.mount.restype = ctypes.c_int

# Syscall numbers: x86_64, else the asm-generic table (aarch64).
_X86 = os.uname().machine == "x86_64"
SYS_OPENAT = 257 if _X86 else 56
SYS_PTRACE = 101 if _X86 else 117
SYS_PROCESS_VM_READV = 310 if _X86 else 270
SYS_PIDFD_OPEN = 434
SYS_PIDFD_SEND_SIGNAL = 424
AT_FDCWD = -100
PTRACE_ATTACH, PTRACE_DETACH = 16, 17
CLONE_NEWUSER = 0x10000000
IPPROTO_MPTCP = 262

ATTEMPTS: dict[str, Callable[[str], str]] = {}


def attempt(name: str) -> Callable[[Callable[[str], str]], Callable[[str], str]]:
    def register(func: Callable[[str], str]) -> Callable[[str], str]:
        ATTEMPTS[name] = func
        return func

    return register


def _fail(what: str, path: str | None = None) -> OSError:
    """The ``OSError`` subclass (``PermissionError``, …) for the errno a libc call left."""
    err = ctypes.get_errno()
    return OSError(err, f"{os.strerror(err)} ({what})", path)


def _in_grant(name: str) -> str:
    return os.path.join(GRANT, f"{name}-{os.getpid()}-{time.monotonic_ns()}")


# --- the filesystem -----------------------------------------------------------------------------


@attempt("read-plain")
def read_plain(path: str) -> str:
    with open(path) as handle:
        return "read: " + handle.read(80)


@attempt("read-symlink")
def read_symlink(path: str) -> str:
    link = _in_grant("symlink")
    os.symlink(path, link)  # creating the link inside the grant is allowed
    with open(link) as handle:
        return "read through a symlink: " + handle.read(80)


@attempt("read-hardlink")
def read_hardlink(path: str) -> str:
    link = _in_grant("hardlink")
    os.link(path, link)
    with open(link) as handle:
        return "read through a hard link: " + handle.read(80)


@attempt("read-proc-root")
def read_proc_root(path: str) -> str:
    with open("/proc/self/root" + path) as handle:
        return "read through /proc/self/root: " + handle.read(80)


@attempt("read-openat")
def read_openat(path: str) -> str:
    fd = _libc.syscall(
        ctypes.c_long(SYS_OPENAT),
        ctypes.c_long(AT_FDCWD),
        ctypes.c_char_p(path.encode()),
        ctypes.c_long(os.O_RDONLY),
        ctypes.c_long(0),
    )
    if fd < 0:
        raise _fail("raw openat", path)
    try:
        return "read with a raw openat: " + os.read(fd, 80).decode(errors="replace")
    finally:
        os.close(fd)


@attempt("read-opath")
def read_opath(path: str) -> str:
    directory = os.open(os.path.dirname(path), os.O_PATH)  # metadata access is not confined
    try:
        fd = os.open(os.path.basename(path), os.O_RDONLY, dir_fd=directory)
    finally:
        os.close(directory)
    try:
        return "read relative to an O_PATH descriptor: " + os.read(fd, 80).decode()
    finally:
        os.close(fd)


@attempt("write")
def write(path: str) -> str:
    with open(path, "w") as handle:
        handle.write("escaped\n")
    return f"wrote {path}"


@attempt("write-etc")
def write_etc(_arg: str) -> str:
    return write("/etc/aotui-escaped")


@attempt("write-app-dir")
def write_app_dir(_arg: str) -> str:
    return write(os.path.join(HERE, "escaped.txt"))


@attempt("rename-into-grant")
def rename_into_grant(path: str) -> str:
    target = _in_grant("stolen")
    os.rename(path, target)
    return f"moved {path} to {target}"


@attempt("write-grant")
def write_grant(name: str) -> str:
    """The positive control: the grant itself is writable and readable."""
    path = os.path.join(GRANT, name or "granted.txt")
    with open(path, "w") as handle:
        handle.write("written by the escaper\n")
    with open(path) as handle:
        return handle.read()


# --- exec ---------------------------------------------------------------------------------------

_SHELL = ["sh", "-c", f"echo pwned > {GRANT}/exec-$$"]


@attempt("exec-execv")
def exec_execv(_arg: str) -> str:
    os.execv("/bin/sh", _SHELL)  # on success this process becomes the shell
    return "unreachable"


@attempt("exec-posix-spawn")
def exec_posix_spawn(_arg: str) -> str:
    pid = os.posix_spawn("/bin/sh", _SHELL, {"PATH": "/usr/bin:/bin"})
    _pid, status = os.waitpid(pid, 0)
    return f"spawned /bin/sh (status {status})"


@attempt("exec-subprocess")
def exec_subprocess(_arg: str) -> str:
    """``subprocess.run``; where the module cannot be imported, what it does: fork, then exec."""
    try:
        import subprocess
    except ImportError:
        pass
    else:
        done = subprocess.run(_SHELL, executable="/bin/sh", check=False, timeout=5)
        return f"ran /bin/sh (exit {done.returncode})"
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.execv("/bin/sh", _SHELL)
        except OSError as exc:
            os.write(write_end, str(exc.errno).encode())
        os._exit(127)
    os.close(write_end)
    report = os.read(read_end, 16)
    os.close(read_end)
    os.waitpid(pid, 0)
    if report:
        err = int(report)
        raise OSError(
            err, f"{os.strerror(err)} (execv in a forked child; subprocess unavailable)", "/bin/sh"
        )
    return "ran /bin/sh in a forked child"


# --- the network --------------------------------------------------------------------------------


def _connect(family: int, kind: int, address: tuple[str, int], proto: int = 0) -> str:
    with socket.socket(family, kind, proto) as sock:
        sock.settimeout(1)
        sock.connect(address)
    return f"connected to {address}"


@attempt("tcp-loopback")
def tcp_loopback(port: str) -> str:
    return _connect(socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", int(port)))


@attempt("tcp6-loopback")
def tcp6_loopback(port: str) -> str:
    return _connect(socket.AF_INET6, socket.SOCK_STREAM, ("::1", int(port)))


@attempt("udp-loopback")
def udp_loopback(port: str) -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(1)
        sent = sock.sendto(b"escaped", ("127.0.0.1", int(port)))
    return f"sent {sent} bytes to 127.0.0.1:{port}"


@attempt("tcp-internet")
def tcp_internet(_arg: str) -> str:
    return _connect(socket.AF_INET, socket.SOCK_STREAM, ("1.1.1.1", 443))


@attempt("udp-internet")
def udp_internet(_arg: str) -> str:
    # connect() on a datagram socket only sets the peer: nothing is sent.
    return _connect(socket.AF_INET, socket.SOCK_DGRAM, ("1.1.1.1", 53))


@attempt("mptcp-loopback")
def mptcp_loopback(port: str) -> str:
    return _connect(socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", int(port)), IPPROTO_MPTCP)


@attempt("dns")
def dns(_arg: str) -> str:
    found = socket.getaddrinfo(b"example.com", 80, proto=socket.IPPROTO_TCP)
    return f"resolved example.com to {found[0][4]}"


@attempt("netlink")
def netlink(_arg: str) -> str:
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0):
        return "opened a netlink socket"


@attempt("packet")
def packet(_arg: str) -> str:
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0):
        return "opened a packet socket"


# --- the desktop's sockets and processes ----------------------------------------------------------


@attempt("unix-connect")
def unix_connect(path: str) -> str:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(1)
        sock.connect(_addressable(path))
    return f"connected to {path}"


def _addressable(path: str) -> str:
    """``path``, or past sun_path's 108 bytes the way the desktop reaches it: through an
    ``O_PATH`` descriptor of its directory (whose open is itself an attempt)."""
    if len(path.encode()) < 108 or path.startswith("\0"):
        return path
    directory = os.open(os.path.dirname(path), os.O_PATH)
    return f"/proc/self/fd/{directory}/{os.path.basename(path)}"


@attempt("unix-abstract")
def unix_abstract(name: str) -> str:
    return unix_connect("\0" + name)


@attempt("unix-datagram")
def unix_datagram(path: str) -> str:
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.sendto(b"escaped", path)
    return f"sent a datagram to {path}"


@attempt("zmq-control")
def zmq_control(path: str) -> str:
    """Speak the client protocol to the desktop's control socket from a context of our own."""
    import zmq

    from aotui.protocol import codec
    from aotui.protocol.messages import Request

    context = zmq.Context()
    try:
        sock = context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(f"ipc://{_addressable(path)}")
        sock.send(codec.encode(Request(1, "ping", {})))
        if sock.poll(1000):
            return f"the desktop answered: {codec.decode(sock.recv())}"
    finally:
        context.destroy(linger=0)
    raise TimeoutError(f"no answer from {path} within 1 s")


@attempt("signal-term")
def signal_term(pid: str) -> str:
    os.kill(int(pid), signal.SIGTERM)
    return f"sent SIGTERM to {pid}"


@attempt("signal-kill")
def signal_kill(pid: str) -> str:
    os.kill(int(pid), signal.SIGKILL)
    return f"sent SIGKILL to {pid}"


@attempt("signal-parent")
def signal_parent(_arg: str) -> str:
    return signal_kill(str(os.getppid()))  # the zygote: it would take every worker with it


@attempt("pidfd-signal")
def pidfd_signal(pid: str) -> str:
    fd = _libc.syscall(ctypes.c_long(SYS_PIDFD_OPEN), ctypes.c_long(int(pid)), ctypes.c_long(0))
    if fd < 0:
        raise _fail(f"pidfd_open({pid})")
    try:
        done = _libc.syscall(
            ctypes.c_long(SYS_PIDFD_SEND_SIGNAL),
            ctypes.c_long(fd),
            ctypes.c_long(signal.SIGKILL),
            ctypes.c_void_p(None),
            ctypes.c_long(0),
        )
        if done < 0:
            raise _fail(f"pidfd_send_signal({pid}, SIGKILL)")
    finally:
        os.close(fd)
    return f"sent SIGKILL to {pid} through a pidfd"


@attempt("ptrace")
def ptrace(pid: str) -> str:
    done = _libc.syscall(
        ctypes.c_long(SYS_PTRACE),
        ctypes.c_long(PTRACE_ATTACH),
        ctypes.c_long(int(pid)),
        ctypes.c_long(0),
        ctypes.c_long(0),
    )
    if done < 0:
        raise _fail(f"ptrace(PTRACE_ATTACH, {pid})")
    _libc.syscall(
        ctypes.c_long(SYS_PTRACE),
        ctypes.c_long(PTRACE_DETACH),
        ctypes.c_long(int(pid)),
        ctypes.c_long(0),
        ctypes.c_long(0),
    )
    return f"attached to {pid}"


@attempt("process-vm-readv")
def process_vm_readv(pid: str) -> str:
    class IoVec(ctypes.Structure):
        _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

    buffer = ctypes.create_string_buffer(64)
    local = IoVec(ctypes.cast(buffer, ctypes.c_void_p), 64)
    remote = IoVec(ctypes.c_void_p(0x400000), 64)
    done = _libc.syscall(
        ctypes.c_long(SYS_PROCESS_VM_READV),
        ctypes.c_long(int(pid)),
        ctypes.byref(local),
        ctypes.c_long(1),
        ctypes.byref(remote),
        ctypes.c_long(1),
        ctypes.c_long(0),
    )
    if done < 0:
        raise _fail(f"process_vm_readv({pid})")
    return f"read {done} bytes of {pid}'s memory"


@attempt("proc-environ")
def proc_environ(pid: str) -> str:
    with open(f"/proc/{pid}/environ", "rb") as handle:
        return "read the environment: " + handle.read(80).decode(errors="replace")


@attempt("prlimit")
def prlimit(pid: str) -> str:
    resource.prlimit(int(pid), resource.RLIMIT_CORE, (0, 0))  # harmless if it ever succeeds
    return f"changed {pid}'s limits"


@attempt("unshare-userns")
def unshare_userns(_arg: str) -> str:
    if _libc.unshare(ctypes.c_int(CLONE_NEWUSER)) != 0:
        raise _fail("unshare(CLONE_NEWUSER)")
    return "entered a new user namespace"


@attempt("mount")
def mount(_arg: str) -> str:
    if _libc.mount(b"none", GRANT.encode(), b"tmpfs", ctypes.c_ulong(0), None) != 0:
        raise _fail(f"mount tmpfs on {GRANT}")
    return f"mounted a tmpfs on {GRANT}"


# --- resources ----------------------------------------------------------------------------------


@attempt("fork-bomb")
def fork_bomb(keep: str) -> str:
    """Fork until refused; children sleep (``--arg keep``: leave them to the runtime)."""
    children: list[int] = []
    refused: OSError | None = None
    while len(children) < 1000:
        try:
            pid = os.fork()
        except OSError as exc:
            refused = exc
            break
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        children.append(pid)
    if keep != "keep":
        for pid in children:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    if refused is None:
        return f"forked {len(children)} children"
    raise OSError(refused.errno, f"{refused.strerror}: fork #{len(children) + 1} refused")


@attempt("memory-bomb")
def memory_bomb(mb: str) -> str:
    hoard = []
    for _ in range(int(mb or 1024) // 8):
        chunk = bytearray(8 << 20)
        chunk[::4096] = b"x" * len(chunk[::4096])  # touch every page so it is resident
        hoard.append(chunk)
        time.sleep(0.002)
    return f"holds {len(hoard) * 8} MiB"


@attempt("fd-bomb")
def fd_bomb(_arg: str) -> str:
    fds: list[int] = []
    try:
        while len(fds) < 100_000:
            fds.append(os.open("/dev/null", os.O_RDONLY))
    except OSError as exc:
        raise OSError(exc.errno, f"{exc.strerror} after {len(fds)} more descriptors") from None
    finally:
        for fd in fds:
            os.close(fd)
    return f"opened {len(fds)} descriptors"


@attempt("disk-bomb")
def disk_bomb(mb: str) -> str:
    chunk = b"x" * (1 << 20)
    written = 0
    path = os.path.join(GRANT, "disk-bomb")
    with open(path, "wb", buffering=0) as handle:
        try:
            for _ in range(int(mb or 64)):
                written += handle.write(chunk)
        except OSError as exc:
            raise OSError(exc.errno, f"{exc.strerror} after {written} bytes", path) from None
    return f"wrote {written} bytes"


class EscaperView(View):
    def render(self) -> str:
        return """<section view="Escaper"><p>Let me out.</p>
<button operation="attempt" args='{"what": "string", "arg?": "string"}'>Attempt</button>
</section>"""

    @operation
    def attempt(self, what: str, arg: str | None = None) -> str:
        what = str(what)
        if what not in ATTEMPTS:
            raise LookupError(f"no attempt {what!r}; known: {', '.join(sorted(ATTEMPTS))}")
        return ATTEMPTS[what](str(arg or ""))


class EscaperApp(App):
    def roots(self) -> list[View]:
        return [EscaperView("escaper")]


app = EscaperApp()
