"""The Python client: what a product layer (and the CLI) uses to drive a desktop.

It holds the snapshot id (CONTRACT §6): :meth:`Client.snapshot` stores the id of the snapshot it
returns and releases the previous one; :meth:`Client.execute` attaches the stored id, so refs
resolve against what the agent read. The agent never sees the id.

    with Client() as client:          # leaving the block releases the lease
        client.acquire("my-agent")
        text = client.snapshot()
        client.execute('<context>open --application app_2</context>')

A client is not thread-safe; use one per thread (the lease heartbeat thread has its own socket).

The input lease (CONTRACT §6): :meth:`Client.acquire` keeps the token the desktop returns and
presents it with every execute, heartbeat and release. The heartbeat thread outlives errors: a
desktop that does not answer (paused, busy) is asked again; a lease found lost is acquired again
with a new token; only when another client holds it by then does the thread stop, and the next
:meth:`Client.execute` raises ``E_LOCKED`` saying the lease was lost (also in
:attr:`Client.lease_error`).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import zmq

from aotui.protocol import api, codec
from aotui.protocol.errors import EXIT_NO_DESKTOP, AotuiError, ErrorCode
from aotui.protocol.messages import ErrorReply, Reply, Request, Signal
from aotui.supervisor.paths import DesktopPaths, is_listening

__all__ = ["Client", "DesktopUnavailable"]

#: How soon a client's sockets try again after their desktop went away (ZeroMQ's default: 100).
RECONNECT_MS = 10


#: While a call waits, how often the client checks that the supervisor serving it still runs.
LIVENESS_MS = 250


def _running(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie does not: it died and awaits its parent)."""
    try:
        os.kill(pid, 0)
    except PermissionError:
        return True  # another user's supervisor (a root desktop): there, and not ours to signal
    except OSError:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


class DesktopUnavailable(AotuiError):
    """No desktop answers at the endpoint (not started, or gone): ``E_UNAVAILABLE``, exit 69."""

    exit_code = EXIT_NO_DESKTOP

    def __init__(self, message: str, data: dict[str, Any] | None = None) -> None:
        super().__init__(ErrorCode.E_UNAVAILABLE, message, data or {})


class Client:
    """A connection to one desktop's supervisor."""

    #: Bytes of one import chunk: the desktop's own chunk size, well within a 4 MiB frame.
    TRANSFER_CHUNK_BYTES = 2 << 20

    def __init__(
        self,
        desktop: str = "default",
        socket_dir: str | None = None,
        timeout_s: float = 30.0,
        owner: str | None = None,
    ) -> None:
        self.paths = DesktopPaths.for_desktop(desktop, socket_dir)
        self.timeout_s = timeout_s
        self.owner = owner
        self.snapshot_id: str | None = None
        self._ids = itertools.count(1)
        self._context = zmq.Context()
        # A restarted desktop (`up` after a crash) is reached again within RECONNECT_MS, not
        # ZeroMQ's default 100 ms. No back-off: it would double the pause while the desktop is
        # down and reach it late once it is back; a try is one refused connect(2) on a local
        # socket, and a socket found dead by a call is closed.
        self._context.setsockopt(zmq.RECONNECT_IVL, RECONNECT_MS)
        self._sock: zmq.Socket[bytes] | None = None
        self._heartbeat: threading.Thread | None = None
        self._heartbeat_stop = threading.Event()
        self._holds_lease = False
        #: The token of the input lease this client holds (set by :meth:`acquire`).
        self.lease_token: str | None = None
        #: Why the lease this client held was lost for good, once the heartbeat found out.
        self.lease_error: AotuiError | None = None
        #: Names this client's exports/imports under way (the desktop bounds them per client).
        self._transfer_client = os.urandom(8).hex()

    # --- plumbing -------------------------------------------------------------------------------

    def _socket(self) -> zmq.Socket[bytes]:
        if self._sock is None:
            # Asked before connecting: ZeroMQ would wait out the whole timeout on a socket file
            # that a killed desktop left behind, or on one that is not there yet.
            if not is_listening(self.paths.control_file):
                raise DesktopUnavailable(
                    f"no desktop is running at {self.paths.root} (start one with "
                    f"`{self.paths.command('up')}`)"
                )
            sock = self._context.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            try:
                sock.connect(self.paths.control)
            except (OSError, zmq.ZMQError) as exc:
                sock.close(linger=0)
                raise DesktopUnavailable(
                    f"cannot reach the desktop at {self.paths.root}: {exc}"
                ) from None
            self._sock = sock
        return self._sock

    def call(self, method: str, timeout_s: float | None = None, **params: Any) -> Any:
        """Call a supervisor method; returns its result or raises :class:`AotuiError`."""
        sock = self._socket()
        request_id = next(self._ids)
        sock.send(codec.encode(Request(request_id, method, params)))
        serving: int | None = None
        deadline = time.monotonic() + (timeout_s if timeout_s is not None else self.timeout_s)
        while True:
            left_ms = int((deadline - time.monotonic()) * 1000)
            if not sock.poll(max(0, min(left_ms, LIVENESS_MS))):
                # Read once the call is slow (a quick one pays nothing): the pidfile's supervisor
                # is the one serving it (a restart rewrites the file).
                serving = self._pid() if serving is None else serving
                if left_ms > LIVENESS_MS and (serving is None or _running(serving)):
                    continue  # still waiting, on a supervisor that is still there
                self._drop_socket()
                if serving is not None and not _running(serving):
                    # Its supervisor died with the call (kill -9, a crash): said at once, not
                    # after the whole timeout.
                    raise DesktopUnavailable(
                        f"the desktop's supervisor (pid {serving}) exited while {method} ran: "
                        f"it may or may not have taken effect. Once the desktop is up again, "
                        f"send it again with the same command id (it then runs at most once), "
                        f"or read a snapshot to see.",
                        {"supervisor_exited": serving, "took_effect": "unknown"},
                    )
                if method == "ping" or not self._alive():
                    raise DesktopUnavailable(
                        f"the desktop at {self.paths.root} does not answer (is it running?)"
                    )
                raise AotuiError(
                    ErrorCode.E_TIMEOUT, f"the desktop did not answer {method} in time"
                )
            reply = codec.decode(sock.recv())
            if not isinstance(reply, Reply | ErrorReply) or reply.request_id != request_id:
                continue  # a late answer to a request that already timed out
            if isinstance(reply, ErrorReply):
                code = ErrorCode.parse(reply.code) or ErrorCode.E_INTERNAL
                raise AotuiError(code, reply.message, reply.data)
            return reply.result

    def _alive(self) -> bool:
        pid = self._pid()
        return pid is not None and _running(pid)

    def _pid(self) -> int | None:
        """The supervisor's pid as its pidfile says (``None``: no readable pidfile)."""
        try:
            return int(self.paths.pidfile.read_text())
        except (OSError, ValueError):
            return None

    def _drop_socket(self) -> None:
        if self._sock is not None:
            self._sock.close(linger=0)
            self._sock = None

    def close(self) -> None:
        """Stop the heartbeat, release the input lease if this client holds it, close."""
        self._stop_heartbeat()
        if self._holds_lease and self._sock is not None and is_listening(self.paths.control_file):
            # Otherwise the desktop stays locked for the whole lease after we are gone.
            with contextlib.suppress(AotuiError):
                self.release(timeout_s=2.0)
        self._holds_lease = False
        self._drop_socket()
        self._context.term()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --- the desktop ----------------------------------------------------------------------------

    def request(self, call: api.Params, timeout_s: float | None = None) -> Any:
        """Call the method ``call`` holds the params of; its declared result record (a
        :class:`~aotui.protocol.api.Result`, also readable by key), or the plain answer of a
        method that declares none."""
        declared = call.METHOD
        raw = self.call(declared.name, timeout_s, **call.wire())
        if declared.result is not None and isinstance(raw, dict):
            return declared.result.from_wire(raw)
        return raw

    def ping(self, timeout_s: float = 2.0) -> api.PingResult:
        """The supervisor's pid and desktop name; :class:`DesktopUnavailable` if none answers."""
        if self.paths.pidfile.exists() and not self._alive():
            # A killed supervisor leaves its socket and pidfile: no need to wait for silence.
            raise DesktopUnavailable(f"the desktop at {self.paths.root} is not running")
        result: api.PingResult = self.request(api.PingParams(), timeout_s)
        return result

    def snapshot(
        self,
        since: str | None = None,
        app: str | None = None,
        view: str | None = None,
        max_tokens: int | None = None,
        include_instructions: bool = True,
    ) -> str:
        """Pull the desktop's Markdown; remembers its snapshot id for the next execute.

        ``since`` a snapshot id: only what changed since then (``E_STALE_STATE`` when that id
        is gone: pull without it); ``app``/``view``: only that app or view; ``max_tokens``:
        shortened to fit; ``include_instructions=False``: without the System Instructions (read
        them once per session). Refs of every shown view resolve against the new id.
        """
        call = api.SnapshotParams(
            since=since,
            app=app,
            view=view,
            max_tokens=max_tokens,
            include_instructions=None if include_instructions else False,
            release=self.snapshot_id,
        )
        result: api.SnapshotResult = self.request(call)
        self.snapshot_id = result.snapshot_id
        return result.markdown or ""

    def execute(
        self,
        command: str | dict[str, Any],
        snapshot_id: str | None = None,
        command_id: str | None = None,
    ) -> api.ExecResult:
        """Run an agent message (text with ``<context>`` blocks, method ``exec``) or one
        structured command (its fields: ``action``, ``app``, ``view``, ``operation``, ``args``;
        method ``execute``).

        With ``command_id`` (the caller's, unique per desktop) a retry after a lost reply runs
        it at most once and gets its first reply (docs/durability.md, *A command's id*)."""
        if self.lease_error is not None:
            raise self.lease_error
        reader = {
            "snapshot_id": snapshot_id or self.snapshot_id,
            "owner": self.owner,
            "token": self.lease_token,
            "command_id": command_id,
        }
        call: api.Params
        if isinstance(command, str):
            call = api.ExecParams(text=command, **reader)
        else:
            call = api.ExecuteParams.parse({**command, **reader})
        result: api.ExecResult = self.request(call)
        return result

    def acquire(
        self,
        owner: str | None = None,
        heartbeat: bool = True,
        kind: str = "python",
        idle_s: float | None = None,
    ) -> float:
        """Take the input lease (renewed by a background heartbeat until :meth:`release`).

        ``kind`` is what ``E_LOCKED`` tells others this client is (``python``, ``cli``,
        ``mcp``); with ``idle_s`` (and ``heartbeat=False``) the lease frees that long after
        this client's last command, so call ``acquire`` again before each burst of commands.
        """
        self.owner = owner or self.owner or f"client-{os.getpid()}"
        held = self.lease_token if self._holds_lease else None
        call = api.AcquireParams(
            owner=self.owner, token=held, kind=api.ClientKind(kind), idle_s=idle_s
        )
        granted: api.LeaseResult = self.request(call)
        lease_s = granted.lease_s
        self.lease_token = granted.token
        self.lease_error = None
        self._holds_lease = True
        if heartbeat and (self._heartbeat is None or not self._heartbeat.is_alive()):
            self._heartbeat_stop.clear()
            self._heartbeat = threading.Thread(
                target=self._beat, args=(lease_s / 3,), name="aotui-lease", daemon=True
            )
            self._heartbeat.start()
        return lease_s

    def _beat(self, interval: float) -> None:
        beat = Client(self.paths.root.name, str(self.paths.root.parent), timeout_s=5.0)
        wait = interval
        try:
            while not self._heartbeat_stop.wait(wait):
                wait = interval
                try:
                    beat.call("heartbeat", token=self.lease_token)
                except AotuiError as exc:
                    if exc.code is not ErrorCode.E_LOCKED:
                        wait = min(interval, 1.0)  # paused or busy: ask again soon
                        continue
                    if not self._reacquire(beat, exc):
                        return
        finally:
            beat.close()

    def _reacquire(self, beat: Client, lost: AotuiError) -> bool:
        """The lease was lost (it expired): take it again, or record why not."""
        try:
            granted = beat.call("acquire", owner=self.owner)
        except AotuiError as exc:
            if exc.code is not ErrorCode.E_LOCKED:
                return True  # the desktop did not answer: the next beat tries again
            self.lease_error = AotuiError(
                ErrorCode.E_LOCKED,
                f"this client lost the input lease of {self.owner!r} ({lost.message}) and "
                f"could not take it again: {exc.message}. Call acquire() to wait for it.",
                exc.data,
            )
            self._holds_lease = False
            return False
        self.lease_token = granted["token"]
        return True

    def _stop_heartbeat(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat_stop.set()
            self._heartbeat.join(timeout=5)
            self._heartbeat = None

    def release(self, timeout_s: float | None = None) -> None:
        """Give the input lease up (also done by :meth:`close` and leaving a ``with`` block)."""
        self._stop_heartbeat()
        held, self._holds_lease = self._holds_lease, False
        token, self.lease_token = self.lease_token, None
        self.lease_error = None
        if held and token is not None:
            self.call("release", timeout_s=timeout_s, token=token)

    def wait(self, timeout_ms: int = 10_000, **condition: Any) -> api.WaitResult:
        """Block until ``reason=``, ``text=`` (with ``app=``, ``view=``, ``gone=``) or
        ``quiet_ms=`` holds on the desktop; ``E_TIMEOUT`` past ``timeout_ms``."""
        call = api.WaitParams.parse({**condition, "timeout_ms": timeout_ms})
        result: api.WaitResult = self.request(call, timeout_ms / 1000 + self.timeout_s)
        return result

    def export_state(self) -> dict[str, Any]:
        """The desktop's state (apps, view ids, app data) as JSON-able data, of any size."""
        import msgpack  # only these two methods need it beyond the codec's own import

        # In chunks, each well within a frame: the state may hold 64 MiB per app.
        first = self.call("export", chunked=True, client=self._transfer_client)
        total, export_id, chunks = first["total_bytes"], first["export_id"], [first["chunk"]]
        received = len(first["chunk"])
        while received < total:
            reply = self.call("export", export_id=export_id, offset=received)
            if not reply["chunk"]:
                raise AotuiError(
                    ErrorCode.E_INTERNAL, f"the export stopped at {received} of {total} bytes"
                )
            chunks.append(reply["chunk"])
            received += len(reply["chunk"])
        try:
            result: dict[str, Any] = msgpack.unpackb(b"".join(chunks), raw=False)
        except (ValueError, TypeError) as exc:  # StackError and FormatError are ValueErrors
            raise AotuiError(
                ErrorCode.E_INVALID_CMD,
                f"the desktop's export is not a state this client can read ({str(exc)[:200]})",
            ) from None
        return result

    def import_state(self, state: dict[str, Any], command_id: str | None = None) -> dict[str, Any]:
        """Give the installed apps named in ``state`` its data (running ones restart from it).

        The state goes in chunks; the desktop changes nothing until it has the last one (and
        checks it all again). What it could not take is refused here first, naming its path.
        ``command_id``: as :meth:`execute`'s, taken when the last chunk applies (a retry sends the
        state again and is answered the first import's reply, importing nothing again)."""
        import msgpack

        from aotui.supervisor.interface.plain_data import state_fault

        fault = state_fault(state)  # before msgpack: a 2**64 or 600 levels would raise there
        if fault is not None:
            raise AotuiError(
                ErrorCode.E_INVALID_CMD, f"the state cannot be imported: {fault}; nothing was sent"
            )
        blob: bytes = msgpack.packb(state, use_bin_type=True)
        step = self.TRANSFER_CHUNK_BYTES
        import_id: str | None = None
        offset = 0
        while True:
            chunk = blob[offset : offset + step]
            result: dict[str, Any] = self.call(
                "import",
                chunk=chunk,
                offset=offset,
                total_bytes=len(blob),
                import_id=import_id,
                client=self._transfer_client,
                token=self.lease_token,
                command_id=command_id,  # the desktop takes it when the last chunk applies
            )
            offset += len(chunk)
            if offset >= len(blob):
                return result
            import_id = result["import_id"]

    def capabilities(self) -> dict[str, Any]:
        """What the desktop offers: version, JSON-RPC methods, formats, limits."""
        result: dict[str, Any] = self.call("get_capabilities")
        return result

    def status(self) -> api.StatusResult:
        """Supervisor and per-app status (reference: ``status``)."""
        result: api.StatusResult = self.request(api.StatusParams())
        return result

    def install(self, app_dir: str | Path, command_id: str | None = None) -> api.InstallResult:
        """Install an app directory; its ``app`` is the new ``app_N``. ``command_id``: as
        :meth:`execute`'s (a retry installs nothing again and gets the first reply)."""
        params = api.InstallParams(path=str(Path(app_dir).resolve()), command_id=command_id)
        result: api.InstallResult = self.request(params)
        return result

    def uninstall(self, app: str, command_id: str | None = None) -> api.InstallResult:
        """Stop and remove an app. ``command_id``: as :meth:`execute`'s."""
        params = api.UninstallParams(app=app, command_id=command_id)
        result: api.InstallResult = self.request(params)
        return result

    def say(self, text: str, app: str = "system.chat", command_id: str | None = None) -> Any:
        """Post a user message (the ``user_message`` event) into an app, the chat by default.
        ``command_id``: as :meth:`execute`'s (a retry posts nothing again)."""
        return self.call("say", text=text, app=app, command_id=command_id)

    def shutdown(self) -> None:
        """Stop the desktop and every process it started."""
        self.call("shutdown")

    def signals(self, timeout_s: float | None = None) -> Iterator[Signal]:
        """Yield signals as they are published; stops after ``timeout_s`` of silence.

        Subscribes when called, not at the first ``next()``: a change made between the two
        (``signals = client.signals(); client.execute(...)``) is not missed.
        """
        sock = self._context.socket(zmq.SUB)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SUBSCRIBE, b"")
        try:
            sock.connect(self.paths.signals)
        except (OSError, zmq.ZMQError) as exc:
            sock.close(linger=0)
            raise DesktopUnavailable(
                f"cannot reach the desktop at {self.paths.root}: {exc}"
            ) from None
        return self._receive(sock, timeout_s)

    @staticmethod
    def _receive(sock: zmq.Socket[bytes], timeout_s: float | None) -> Iterator[Signal]:
        try:
            while True:
                if not sock.poll(None if timeout_s is None else int(timeout_s * 1000)):
                    return
                message = codec.decode(sock.recv())
                if isinstance(message, Signal):
                    yield message
        finally:
            sock.close(linger=0)
