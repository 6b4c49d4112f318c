"""Reaching a fleet's desktops by name: :class:`FleetClient` and its :class:`FleetDesktop`.

    fleet = FleetClient("ray://head:10001")   # or an address ray.init takes, or "auto"
    desktop = fleet.desktop("topic-42")        # started, or resumed, wherever Ray places it
    desktop.snapshot()
    desktop.execute('<context>open --application app_2</context>')

A :class:`FleetDesktop` has the typed methods of :class:`~aotui.supervisor.interface.client.
Client` (the ones a remote desktop can serve): each is forwarded to the desktop's actor, which
calls it on a ``Client`` of its own for this session. A call that changes the desktop carries a
fresh command id; when the desktop's node is lost while it runs, the call is sent again with the
same id once the actor answers on another node, and it runs at most once because the supervisor
stores its id with its effect: it answers the retry with the first reply, runs a command whose
effect was never stored, and says which commands of a message cut off half-way took effect
(docs/durability.md). Calls that only read are simply sent again.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import ray

from aotui.protocol import codec
from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.messages import Signal
from aotui.supervisor.fleet.actors import (
    DESKTOP_PREFIX,
    FORWARDED,
    MOVED,
    NAMESPACE,
    ROUTER,
    decode_reply,
    takes_command_id,
)
from aotui.supervisor.fleet.auth import refused_by_token, token_refused, use_token

if TYPE_CHECKING:
    from aotui.supervisor.interface.client import Client

    _Typed = Client  # the checker sees Client's typed methods on a FleetDesktop
else:
    _Typed = object

__all__ = ["FAILOVER_S", "FleetClient", "FleetDesktop", "connect"]

#: How long a call keeps trying while the desktop's actor is restarting elsewhere.
FAILOVER_S = 60.0
#: Pause between two tries while it restarts.
RETRY_S = 0.05
#: A signal stream's heartbeat: how soon a silent stream notices a ``timeout_s`` or a cancel.
BEAT_S = 1.0
#: Heartbeats a stream runs ahead of a caller that does not read them, before it waits.
BACKLOG = 64


def connect(address: str) -> None:
    """Join the Ray cluster at ``address`` (once per process), in the fleet's namespace, with
    the fleet's token if there is one (:func:`~aotui.supervisor.fleet.auth.use_token`)."""
    if not ray.is_initialized():
        source = use_token()
        try:
            ray.init(
                address=address,
                namespace=NAMESPACE,
                include_dashboard=False,
                log_to_driver=False,
                logging_level=logging.WARNING,
            )
        except ConnectionError as exc:
            if not refused_by_token(exc):
                raise
            raise token_refused(address, source) from None


class FleetClient:
    """A client of the fleet running on the Ray cluster at ``address``."""

    def __init__(self, address: str = "auto") -> None:
        connect(address)
        try:
            self.router = ray.get_actor(ROUTER, namespace=NAMESPACE)
        except ValueError:
            raise AotuiError(
                ErrorCode.E_UNAVAILABLE,
                f"no fleet runs on the Ray cluster at {address} (start one with "
                f"`aotui fleet up --ray {address} --store postgresql://…`)",
            ) from None

    def desktop(
        self, name: str, failover_s: float = FAILOVER_S, session: str | None = None
    ) -> FleetDesktop:
        """Desktop ``name``: started on some node if it runs nowhere yet. ``session``: go on
        with a session an earlier client named so (its snapshot id, its lease); else a new one."""
        return FleetDesktop(self, name, failover_s, session)

    def actor(self, name: str) -> Any:
        """Desktop ``name``'s actor: looked up by name, or made by the router."""
        try:
            return ray.get_actor(DESKTOP_PREFIX + name, namespace=NAMESPACE)
        except ValueError:
            return ray.get(self.router.desktop.remote(name))

    def status(self) -> list[dict[str, Any]]:
        """Every desktop: its node, state (running / hibernated / moving), memory, last use."""
        rows: list[dict[str, Any]] = ray.get(self.router.status.remote())
        return rows

    def drain(self, node: str) -> list[str]:
        """Move the desktops off ``node`` (a Ray node id); the names moved."""
        moved: list[str] = ray.get(self.router.drain.remote(node))
        return moved


class FleetDesktop(_Typed):
    """One desktop of the fleet, with :class:`Client`'s methods (see the module's doc)."""

    def __init__(
        self,
        fleet: FleetClient,
        name: str,
        failover_s: float = FAILOVER_S,
        session: str | None = None,
    ) -> None:
        self.fleet = fleet
        self.name = name
        self.failover_s = failover_s
        #: This client's session on the desktop (its own snapshot id and lease).
        self.session = session or uuid.uuid4().hex
        #: Kept here for a caller that pulls with ``call("snapshot", …)`` and passes the id on
        #: itself (the MCP server); :meth:`snapshot` keeps its id in the desktop's own client.
        self.snapshot_id: str | None = None
        #: The lease owner a caller names (passed on by its ``acquire(owner=…)``).
        self.owner: str | None = None
        self._actor: Any = None
        #: Counts :meth:`close` calls: a signal iterator ends once it changes.
        self._closes = 0

    def __getattr__(self, method: str) -> Any:
        if method not in FORWARDED:
            raise AttributeError(f"a fleet desktop has no method {method!r}")

        def forwarded(*args: Any, **kwargs: Any) -> Any:
            return self.invoke(method, args, kwargs)

        forwarded.__name__ = method
        return forwarded

    def invoke(
        self,
        method: str,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        command_id: str | None = None,
    ) -> Any:
        """Call ``method`` on the desktop; see the module's doc for what a lost node does."""
        if command_id is None and takes_command_id(method, args):
            command_id = uuid.uuid4().hex
        deadline = time.monotonic() + self.failover_s
        while True:
            try:
                if self._actor is None:
                    self._actor = self.fleet.actor(self.name)
                call = self._actor.call.remote(self.session, method, args, kwargs or {}, command_id)
                reply = ray.get(call)
            except ray.exceptions.RayError as exc:
                self._actor = None  # its node was lost, or it is restarting: look it up again
                if time.monotonic() > deadline:
                    raise AotuiError(
                        ErrorCode.E_UNAVAILABLE,
                        f"desktop {self.name!r} did not answer again within "
                        f"{self.failover_s:g} s ({type(exc).__name__}); "
                        + (
                            f"command {command_id!r} may have taken effect: retry it with "
                            "the same command id"
                            if command_id
                            else "try again"
                        ),
                        {"took_effect": "unknown", "command_id": command_id},
                    ) from None
                time.sleep(RETRY_S)
                continue
            if reply == MOVED:  # its actor exits (released while hibernated): the next one
                self._actor = None
                time.sleep(RETRY_S)
                continue
            return decode_reply(reply)

    def signals(self, timeout_s: float | None = None) -> Iterator[Signal]:
        """Yield the desktop's signals as :meth:`Client.signals` does; stops after
        ``timeout_s`` of silence (to within :data:`BEAT_S`).

        Subscribed when called: a change made after this returns is not missed. The signals
        come over a Ray streaming generator of the desktop's actor; when the actor is restarted
        (its node lost, a drain, a release) the stream is opened again on the new one, and the
        signals published in between are not delivered (docs/fleet.md): read a snapshot after a
        move. ``E_UNAVAILABLE`` when no actor answers within ``failover_s``.
        """
        beat_s = BEAT_S if timeout_s is None else max(0.05, min(BEAT_S, timeout_s))
        return self._follow(self._subscribe(beat_s), beat_s, timeout_s, self._closes)

    def _subscribe(self, beat_s: float) -> Any:
        """A stream of the desktop's signals, once its actor says it is subscribed."""
        deadline = time.monotonic() + self.failover_s
        while True:
            if not ray.is_initialized():  # this process left the cluster (ray.shutdown)
                raise AotuiError(ErrorCode.E_UNAVAILABLE, "not connected to the fleet's cluster")
            try:
                if self._actor is None:
                    self._actor = self.fleet.actor(self.name)
                stream = self._actor.signals.options(
                    num_returns="streaming", _generator_backpressure_num_objects=BACKLOG
                ).remote(beat_s)
                ray.get(next(stream))  # the actor's first item: it is subscribed
                return stream
            except (ray.exceptions.RayError, StopIteration) as exc:
                self._actor = None  # restarting, moving or released: looked up again
                if time.monotonic() > deadline:
                    raise AotuiError(
                        ErrorCode.E_UNAVAILABLE,
                        f"desktop {self.name!r} did not take a signal subscriber within "
                        f"{self.failover_s:g} s ({type(exc).__name__}); try again",
                    ) from None
                time.sleep(RETRY_S)

    def _follow(
        self, stream: Any, beat_s: float, timeout_s: float | None, closes: int
    ) -> Iterator[Signal]:
        quiet_since = time.monotonic()
        try:
            while self._closes == closes:  # closed: ended at the next heartbeat
                try:
                    frame = ray.get(next(stream))
                except (ray.exceptions.RayError, StopIteration):
                    # Its actor died or moved: subscribe on the next one (what was published
                    # meanwhile is not delivered).
                    self._actor = None
                    stream = self._subscribe(beat_s)
                    continue
                if frame is None:  # a heartbeat
                    if timeout_s is not None and time.monotonic() - quiet_since >= timeout_s:
                        return
                    continue
                message = codec.decode(frame)
                if isinstance(message, Signal):
                    quiet_since = time.monotonic()
                    yield message
        finally:
            if ray.is_initialized():  # (ray.cancel would join a cluster again)
                with contextlib.suppress(Exception):  # its actor is gone: so is the stream
                    ray.cancel(stream)

    def close(self) -> None:
        """End this session on the desktop (its lease is released); its signal iterators end
        within a heartbeat (:data:`BEAT_S`)."""
        self._closes += 1
        if self._actor is not None:
            with contextlib.suppress(ray.exceptions.RayError):  # gone: so is the session
                ray.get(self._actor.close_session.remote(self.session), timeout=10)
            self._actor = None

    def __enter__(self) -> FleetDesktop:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
