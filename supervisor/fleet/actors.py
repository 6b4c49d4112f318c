"""The fleet's two kinds of Ray actor: a desktop, and the router that finds desktops by name.

A :class:`DesktopActor` is a detached named actor (``aotui-desktop:NAME``, restarted without limit
by Ray) that owns one supervisor on its node, started as ``aotui up`` starts one
(:func:`~aotui.supervisor.interface.launch.launch_desktop`) with the fleet's config and its
PostgreSQL store, so a restart on any node loads the state the last one acknowledged. Calls come
in as ``(session, method, args)``: each session (one :class:`~aotui.supervisor.fleet.client.
FleetDesktop`) has its own :class:`~aotui.supervisor.interface.client.Client`, so snapshot ids
and the input lease stay per session as on one machine. A call carrying a command id runs at
most once: the supervisor stores the id with the command's effect (desktop/command_ids.py).

Idle past ``idle_s``, the desktop hibernates: its supervisor stops (its state is in the store)
and the actor waits; the next call starts it again. The supervisor dies with the actor's process
(``PR_SET_PDEATHSIG``), so a node's loss leaves nothing holding the store.

The :class:`Router` (``aotui-fleet-router``) holds the fleet's settings and creates desktop
actors with ``get_if_exists``: Ray's named actors are unique, so two routers (or two clients)
asking for the same name at once get the same actor and a name never runs twice.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil
import ray
import zmq

from aotui.protocol import api, codec
from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.messages import Signal
from aotui.supervisor.fleet.registry import Registry
from aotui.supervisor.interface.client import Client
from aotui.supervisor.interface.launch import AOTUI, DesktopLaunch, LaunchedDesktop, launch_desktop

__all__ = [
    "DESKTOP_PREFIX",
    "MOVED",
    "NAMESPACE",
    "ROUTER",
    "DesktopActor",
    "FleetSettings",
    "Router",
    "decode_reply",
    "encode_reply",
    "takes_command_id",
]

#: The Ray namespace every fleet actor lives in.
NAMESPACE = "aotui"
#: The router's actor name.
ROUTER = "aotui-fleet-router"
#: A desktop's actor name is this and its desktop name.
DESKTOP_PREFIX = "aotui-desktop:"
#: Methods of :class:`Client` that change the desktop: each call gets a command id, which the
#: supervisor stores with the change's effect (desktop/command_ids.py).
CHANGING = frozenset({"execute", "say", "install", "uninstall", "import_state"})
#: The same, as the supervisor's methods (``Client.call``'s first argument): those that declare a
#: ``command_id``.
_CHANGING_CALLS = frozenset(n for n, m in api.METHODS.items() if "command_id" in m.params.FIELDS)
#: How often a signal stream looks for its desktop's supervisor while it is not running.
_SIGNALS_IDLE_S = 0.05
#: Signal streams a desktop's actor runs at once (each holds a thread while it runs).
SIGNAL_STREAMS = 8
#: Methods that only read: sent again when the supervisor died under them.
READS = frozenset({"capabilities", "export_state", "ping", "snapshot", "status"})
#: Methods a session may call (the public ones of :class:`Client` that need no local socket).
FORWARDED = frozenset(
    {
        "acquire", "call", "capabilities", "execute", "export_state", "import_state", "install",
        "ping", "release", "request", "say", "snapshot", "status", "uninstall", "wait",
    }
)  # fmt: skip

# The supervisor dies with the actor's process: a parent-death signal set before it execs (it
# stays across exec). The actor's launcher thread lives as long as the actor (the signal fires
# when the thread that forked the child ends).
_GUARD = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)\n"
    "os.getppid() == int(sys.argv[1]) or os._exit(70)\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


@dataclass(frozen=True)
class FleetSettings:
    """What every desktop of a fleet shares (the router holds them)."""

    #: The PostgreSQL store's URL (``postgresql://…``).
    store: str
    #: The desktops' config (TOML text); ``""``: the bundled default.
    config: str = ""
    #: Where desktops' runtime directories go on each node; ``""``: the temporary directory.
    runtime_base: str = ""
    #: Seconds without a call before a desktop hibernates; 0: never.
    idle_s: float = 0.0
    #: Seconds hibernated before its actor exits too, leaving only rows; 0: the actor stays
    #: (a resume then needs no new actor process: faster, but one idle process per desktop).
    release_s: float = 0.0
    #: What Ray places each desktop by: CPUs and memory (bytes).
    num_cpus: float = 0.1
    memory: int = 256 << 20


def takes_command_id(method: str, args: tuple[Any, ...]) -> bool:
    """Whether a call changes the desktop (:data:`CHANGING`, or ``Client.call`` of one of the
    supervisor's changes): its command id goes to the supervisor, which stores it with the
    change's effect."""
    if method == "call":
        return bool(args) and args[0] in _CHANGING_CALLS
    return method in CHANGING


def encode_reply(value: Any) -> Any:
    """A client's answer as JSON-able data (a declared result by its class name)."""
    if isinstance(value, api.Result):
        return {"result": type(value).__name__, "wire": value.wire()}
    return {"value": value}


def decode_reply(reply: Any) -> Any:
    """The answer :func:`encode_reply` encoded; an error reply is raised."""
    if "error" in reply:
        code = ErrorCode.parse(reply["error"]) or ErrorCode.E_INTERNAL
        raise AotuiError(code, reply["message"], reply.get("data") or {})
    if "result" in reply:
        kind = getattr(api, reply["result"])
        return kind.from_wire(reply["wire"])
    return reply["value"]


#: The answer of an actor that is exiting: the caller sends the call to the desktop's next actor.
MOVED: dict[str, Any] = {"moved": True}


def _error_reply(exc: AotuiError) -> dict[str, Any]:
    return {"error": exc.code.value, "message": exc.message, "data": dict(exc.data)}


class DesktopActor:
    """One desktop of the fleet on its node (see the module's doc)."""

    def __init__(self, name: str, settings: FleetSettings) -> None:
        self.name = name
        self.settings = settings
        self.node = ray.get_runtime_context().get_node_id()
        self.registry = Registry(settings.store)
        self._lock = threading.RLock()
        self._launcher = ThreadPoolExecutor(1, thread_name_prefix="aotui-launch")
        self._sessions: dict[str, Client] = {}
        self._turns: dict[str, threading.Lock] = {}
        self._in_flight = 0
        #: The actor is exiting (released while hibernated): calls go to a new one.
        self._released = False
        self._desktop: LaunchedDesktop | None = None
        self._runtime: Path | None = None
        self.last_use = self._born = time.time()
        self.started: tuple[float, float] | None = None
        #: ``running`` or ``hibernated``, as recorded in the registry (set once it is).
        self.state = "starting"
        row = self.registry.desktop(name)
        if row is None or row.state != "hibernated":
            # A restart on another node: from the store at once, but after this returns, so
            # that Ray sends the calls waiting for the actor while the supervisor starts (they
            # wait for it in _session: it holds the lock).
            threading.Thread(target=self._start_once, name="aotui-start", daemon=True).start()
        else:
            self.registry.record(name, "hibernated", self.node, row.last_use)
            self.state = "hibernated"
            self.last_use = row.last_use
        if settings.idle_s > 0:
            threading.Thread(target=self._watch_idle, name="aotui-idle", daemon=True).start()

    # --- the supervisor -------------------------------------------------------------------------

    def _start(self) -> None:
        base = self.settings.runtime_base or tempfile.gettempdir()
        self._runtime = Path(tempfile.mkdtemp(prefix="aotui-fleet-", dir=base))
        config = None
        if self.settings.config:
            config = self._runtime / "desktop.toml"
            config.write_text(self.settings.config)
        env = {**os.environ, "AOTUI_HOME": str(self._runtime / "home")}
        launch = DesktopLaunch(
            self.name,
            config,
            self._runtime / "run",
            env=env,
            log=self._runtime / "supervisor.out",
            program=(sys.executable, "-c", _GUARD, str(os.getpid()), *AOTUI),
            store=self.settings.store,
        )
        began = time.time()
        self._desktop = self._launcher.submit(launch_desktop, launch).result()
        self.started = (began, time.time())
        self.registry.record(self.name, "running", self.node)
        self.state = "running"

    def _start_once(self) -> None:
        with self._lock:
            if self._desktop is None and not self._released:
                try:
                    self._start()
                except Exception:  # the next call starts it again, or says why it cannot
                    logging.getLogger(__name__).exception("desktop %s did not start", self.name)

    def _stop(self) -> None:
        for client in self._sessions.values():
            client.close()
        self._sessions.clear()
        self._turns.clear()
        if self._desktop is not None:
            self._desktop.stop()
            self._desktop = None
        if self._runtime is not None:
            shutil.rmtree(self._runtime, ignore_errors=True)
            self._runtime = None

    def _watch_idle(self) -> None:
        settings = self.settings
        while True:
            time.sleep(min(1.0, settings.idle_s / 4))
            with self._lock:
                # Since its last use, or since this actor started (a new actor is not released
                # before its first call comes).
                idle = time.time() - max(self.last_use, self._born)
                if self._in_flight:
                    continue
                if self._desktop and idle > settings.idle_s:
                    self.hibernate()
                elif settings.release_s and idle > settings.idle_s + settings.release_s:
                    # Only rows are left: calls from now on are sent to a new actor.
                    self._released = True
                    ray.kill(ray.get_runtime_context().current_actor, no_restart=True)
                    return

    # --- what the fleet calls -------------------------------------------------------------------

    def call(
        self,
        session: str,
        method: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        command_id: str | None = None,
    ) -> Any:
        """Run ``Client.method(*args, **kwargs)`` on ``session``'s client; its answer encoded
        (:func:`encode_reply`), an error too. With ``command_id``, at most once."""
        if method not in FORWARDED:
            return _error_reply(
                AotuiError(ErrorCode.E_INVALID_CMD, f"a fleet desktop has no method {method!r}")
            )
        with self._lock:
            if self._released:
                return MOVED
            self._in_flight += 1  # not hibernated nor released while it runs
            self.last_use = time.time()
        try:
            # A change's id goes to the supervisor, which stores it with the change's effect
            # (desktop/command_ids.py): its retry is answered from there, whatever was lost.
            if command_id is not None and takes_command_id(method, args):
                kwargs = {"command_id": command_id, **kwargs}  # the caller's own id first
            # Sent again once if the supervisor died under it (the next try starts it again):
            # a read, or a change whose id the supervisor answers from its store.
            again = method in READS or "command_id" in kwargs
            while True:
                try:
                    client, turn = self._session(session)
                    with turn:  # one call at a time per session (a Client is not thread-safe)
                        reply = encode_reply(getattr(client, method)(*args, **kwargs))
                except AotuiError as exc:
                    if again and "supervisor_exited" in exc.data:
                        again = False
                        continue
                    reply = _error_reply(exc)
                break
            return reply
        finally:
            with self._lock:
                self._in_flight -= 1
                self.last_use = time.time()

    def _session(self, session: str) -> tuple[Client, threading.Lock]:
        """``session``'s client and its turn; the supervisor started first if it is not (a
        hibernated desktop resumes here)."""
        with self._lock:
            if self._desktop is not None and self._desktop.process.poll() is not None:
                self._stop()  # its supervisor died (a crash, kill -9): started again below
            if self._desktop is None:
                self._start()
            assert self._desktop is not None
            client = self._sessions.get(session)
            if client is None:
                client = self._sessions[session] = self._desktop.client()
                self._turns[session] = threading.Lock()
            return client, self._turns[session]

    @ray.method(concurrency_group="signals")
    def signals(self, beat_s: float = 1.0) -> Iterator[bytes | None]:
        """The desktop's signals, each as its wire frame (:mod:`protocol.codec`): a Ray
        streaming generator (``num_returns="streaming"``), for :meth:`FleetDesktop.signals
        <aotui.supervisor.fleet.client.FleetDesktop.signals>`.

        Yields ``None`` once subscribed, then after every ``beat_s`` of silence (its caller
        learns the stream is alive, and the stream learns of a cancel or a caller gone). A
        hibernated desktop is not resumed by a subscriber: the stream waits for its next start,
        and follows each new supervisor (a restart, a resume) on its own socket. It ends when its
        caller cancels it or the actor is released or moved: the caller subscribes again.
        """
        context = zmq.Context()
        sock: zmq.Socket[bytes] | None = None
        following: LaunchedDesktop | None = None
        beat = time.monotonic()
        try:
            if self._released:  # exiting: no first item, the caller asks the next actor
                return
            yield None
            while not ray.get_runtime_context().is_canceled():
                with self._lock:
                    if self._released:
                        return
                    current = self._desktop
                if current is not following:
                    if sock is not None:
                        sock.close(linger=0)
                        sock = None
                    following = current
                    if current is not None:
                        sock = context.socket(zmq.SUB)
                        sock.setsockopt(zmq.LINGER, 0)
                        sock.setsockopt(zmq.MAXMSGSIZE, 1 << 16)
                        sock.setsockopt(zmq.SUBSCRIBE, b"")
                        sock.connect(current.paths.signals)
                if sock is None:  # hibernated, or starting: looked at again soon
                    time.sleep(_SIGNALS_IDLE_S)
                    if time.monotonic() - beat >= beat_s:
                        beat = time.monotonic()
                        yield None
                    continue
                if not sock.poll(int(beat_s * 1000)):
                    beat = time.monotonic()
                    yield None
                    continue
                frame = sock.recv()
                with contextlib.suppress(AotuiError):  # not a message: skipped
                    if isinstance(codec.decode(frame), Signal):
                        beat = time.monotonic()
                        yield frame
        finally:
            if sock is not None:
                sock.close(linger=0)
            context.term()

    def close_session(self, session: str) -> None:
        with self._lock:
            client = self._sessions.pop(session, None)
            self._turns.pop(session, None)
            if client is not None:
                client.close()

    def hibernate(self) -> bool:
        """Stop the supervisor (its state is in the store); ``False`` if it was not running."""
        with self._lock:
            if self._desktop is None:
                return False
            self._stop()
            self.registry.record(self.name, "hibernated", self.node, self.last_use)
            self.state = "hibernated"
            return True

    def info(self) -> dict[str, Any]:
        """Where it runs and what it holds: for ``aotui fleet status``."""
        memory = 0
        pid = None
        if self._desktop is not None:
            pid = self._desktop.pid
            with contextlib.suppress(psutil.Error):
                tree = psutil.Process(pid)
                for process in [tree, *tree.children(recursive=True)]:
                    with contextlib.suppress(psutil.Error):
                        memory += process.memory_info().rss
        return {
            "desktop": self.name,
            "node": self.node,
            "state": self.state,
            "memory": memory,
            "last_use": self.last_use,
            "pid": pid,
            "actor_pid": os.getpid(),
            # When this actor started, and its supervisor's last start began and ended.
            "born": self._born,
            "started": self.started,
            # Its runtime directory on its node (a local Client reaches it there: the benchmark).
            "socket": str(self._runtime / "run") if self._runtime is not None else None,
        }

    def shutdown(self) -> None:
        """Stop the supervisor for good (the actor is then killed by its caller)."""
        with self._lock:
            self._stop()

    def move(self) -> None:
        """Stop the supervisor and answer every call from now on ``moved``: its caller kills
        this actor so that Ray starts it again elsewhere (a drain), and calls wait for that."""
        with self._lock:
            self._released = True
            self._stop()


class Router:
    """The fleet's router: its settings, and desktop actors made or found by name."""

    def __init__(self, settings: FleetSettings) -> None:
        self.settings = settings
        self.registry = Registry(settings.store)

    def get_settings(self) -> dict[str, Any]:
        return asdict(self.settings)

    def desktop(self, name: str) -> Any:
        """The actor of desktop ``name``, started if it is not running anywhere."""
        return desktop_actor(name, self.settings)

    def status(self) -> list[dict[str, Any]]:
        """Every desktop the fleet knows: live ones as they say, the others as recorded."""
        rows: list[dict[str, Any]] = []
        recorded_rows = self.registry.desktops()
        asked: dict[str, Any] = {}
        for row in recorded_rows:  # every live desktop asked at once, then each answer awaited
            with contextlib.suppress(ValueError):  # no such actor: stopped or released
                actor = ray.get_actor(DESKTOP_PREFIX + row.name, namespace=NAMESPACE)
                asked[row.name] = actor.info.remote()
        deadline = time.monotonic() + 2.0
        for row in recorded_rows:
            recorded: dict[str, Any] = {
                "desktop": row.name, "node": row.node, "state": row.state, "memory": 0,
                "last_use": row.last_use,
            }  # fmt: skip
            if row.name not in asked:  # released (only rows) if hibernated, else stopped
                rows.append(
                    recorded | {"state": "hibernated" if row.state == "hibernated" else "stopped"}
                )
                continue
            try:
                left = max(0.1, deadline - time.monotonic())
                rows.append(ray.get(asked[row.name], timeout=left))
            except (ray.exceptions.RayError, TimeoutError):  # restarting, or its node is gone
                rows.append(recorded | {"state": "moving"})
        return rows

    def drain(self, node: str) -> list[str]:
        """Move every desktop off ``node``: the node takes no new actors (Ray's drain), each
        desktop there is stopped (its state stored) and its actor restarted elsewhere."""
        from ray.core.generated import autoscaler_pb2

        address = ray.get_runtime_context().gcs_address
        # Ray's own drain (`ray drain-node`, a developer API): the node takes no new actors.
        gcs = ray._raylet.GcsClient(address=address)  # type: ignore[attr-defined]
        reason = autoscaler_pb2.DrainNodeReason.Value(  # type: ignore[attr-defined]
            "DRAIN_NODE_REASON_PREEMPTION"
        )
        accepted, why = gcs.drain_node(
            node, reason,
            "aotui fleet drain", 0,
        )  # fmt: skip
        if not accepted:
            raise AotuiError(ErrorCode.E_INVALID_CMD, f"Ray refused to drain {node}: {why}")
        moved: list[str] = []
        for info in self.status():
            if info["node"] != node or info["state"] != "running":
                continue
            actor = ray.get_actor(DESKTOP_PREFIX + info["desktop"], namespace=NAMESPACE)
            ray.get(actor.move.remote(), timeout=60)
            ray.kill(actor, no_restart=False)  # Ray restarts it on a node that is not draining
            moved.append(info["desktop"])
        return moved


def desktop_actor(name: str, settings: FleetSettings) -> Any:
    """The detached named actor of desktop ``name``: the running one, or a new one."""
    # Signal streams run in threads of their own: however many a client opens, calls keep the
    # 16 threads (a stream past SIGNAL_STREAMS waits for one to end). Ray takes the groups
    # here only, not in options().
    groups = {"signals": SIGNAL_STREAMS}  # (Ray's stubs do not list the keyword)
    remote = ray.remote(concurrency_groups=groups)(DesktopActor)  # type: ignore[call-overload]
    return remote.options(
        name=DESKTOP_PREFIX + name,
        namespace=NAMESPACE,
        lifetime="detached",
        get_if_exists=True,
        max_restarts=-1,
        max_task_retries=0,
        # Calls of several sessions at once (each session's in turn), and info() meanwhile.
        max_concurrency=16,
        num_cpus=settings.num_cpus,
        memory=settings.memory,
    ).remote(name, settings)


def router_actor(settings: FleetSettings) -> Any:
    """The fleet's router (started with ``settings`` if none runs yet)."""
    remote = ray.remote(Router)
    return remote.options(
        name=ROUTER,
        namespace=NAMESPACE,
        lifetime="detached",
        get_if_exists=True,
        max_restarts=-1,
        num_cpus=0,
    ).remote(settings)
