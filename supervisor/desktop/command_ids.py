"""A client's command id: a command retried with the same id runs at most once.

A client may send ``exec``, ``execute``, ``say``, ``install`` or ``uninstall`` with a
``command_id`` of its own (unique per desktop, up to 200 characters). The desktop answers a
retry of that id with the command's first reply and runs nothing again; a command it never
recorded had no stored effect, and runs. What makes this true across a crash, a kill -9 or a
node lost under a fleet desktop: in durability ``ack`` the id goes into the store **in the same
transaction as the command's first effect** (:class:`~supervisor.store.base.Command`), and each
later write of the same run records what the command has done so far beside its data.
So after any loss the store holds one of:

- no row for the id: nothing the command did was stored (its effects went with the process);
  a retry runs it;
- a row with ``partial``: the message's first ``ran`` commands took their stored effect, the
  later ones none; a retry runs nothing and is told so (``E_UNAVAILABLE``, ``took_effect:
  "partly"``, with ``ran`` and the results);
- its reply: a retry gets it again, an error reply raised again.

``say``, ``install`` and ``uninstall`` are one change each, and their reply is known before the
write that makes it (``say``'s is the chat app's answer, the others' the app's ids), so the write
records their whole reply: a retry gets it, or (no row) they run.

In durability ``batch`` and ``off`` effects are not written with their acknowledgement, so the
ids are remembered in memory only (the last :data:`REMEMBERED` of this supervisor's life).

While a command with an id runs, a retry of the same id waits for it and gets its reply.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aotui.protocol import codec
from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.errors import Outcome as ReplyOutcome
from aotui.protocol.messages import AppState
from aotui.supervisor.store.base import Command

if TYPE_CHECKING:
    from aotui.supervisor.desktop.persistence import Persistence

__all__ = [
    "REMEMBERED",
    "REPLY_KEEP_BYTES",
    "RUNNING",
    "CommandIds",
    "CommandRun",
    "answer",
    "aside",
    "kept",
]

#: Replies a desktop without a store that records ids keeps in memory (each at most
#: :data:`REPLY_KEEP_BYTES`: 64 MiB at worst).
REMEMBERED = 1024
#: A reply larger than this (encoded) is kept without its results (what ran, and that they were
#: too large to keep): what a client's ids can make the store or memory hold is bounded.
REPLY_KEEP_BYTES = 64 << 10


@dataclass
class CommandRun:
    """A command with a client's id, while it runs: what its writes record beside their data."""

    id: str
    #: How many commands its message holds.
    total: int
    #: The task running it: writes from any other task (a restart it set off) carry nothing.
    task: asyncio.Task[Any] | None
    #: The results of its commands that have finished (the message's reply lists them).
    results: list[Any] = field(default_factory=list)
    #: The result of the command running now, once its worker answered (stored with its effect).
    result: Any = None
    #: The reply recorded with its last write.
    recorded: Any = None
    #: Whether a write of this run has recorded it (``recorded`` may be ``None``, a reply).
    wrote: bool = False
    #: An ``exec``/``execute`` (its reply lists its commands' results); otherwise the reply is
    #: :attr:`result`, set before the one write that makes the change.
    message: bool = True

    def so_far(self) -> Any:
        """What the run has done, as of the write being made now."""
        if not self.message:
            return kept(self.result)
        ran = len(self.results) + 1
        reply: dict[str, Any] = {"ran": ran, "results": [*self.results, self.result]}
        if ran < self.total:
            reply |= {"partial": True, "total": self.total}
        recorded: dict[str, Any] = kept(reply)
        return recorded

    def carry(self) -> Command | None:
        """The command a write made now records (``None`` from another task)."""
        if asyncio.current_task() is not self.task:
            return None
        return Command(self.id, self.so_far(), continues=self.wrote)


#: The command with an id the current task runs, if any.
RUNNING: contextvars.ContextVar[CommandRun | None] = contextvars.ContextVar(
    "aotui_command_run", default=None
)


def answer(reply: Any) -> None:
    """The reply (or, for a message, the result of the command running now) that the next write
    of the current task's command with an id records beside its effect; nothing without one."""
    run = RUNNING.get()
    if run is not None:
        run.result = reply


@contextlib.contextmanager
def aside() -> Iterator[None]:
    """Writes made inside are not the current command's effect: they carry no command id."""
    token = RUNNING.set(None)
    try:
        yield
    finally:
        RUNNING.reset(token)


def kept(reply: Any) -> Any:
    """``reply`` as it is recorded: whole, or without its results past :data:`REPLY_KEEP_BYTES`."""
    size = len(codec.encode(AppState(request_id=0, data=reply)))
    if size <= REPLY_KEEP_BYTES or not isinstance(reply, dict):
        return reply
    dropped = f"{size} bytes, more than the {REPLY_KEEP_BYTES} kept for a retry"
    if "error" in reply:
        data = {k: v for k, v in reply.get("data", {}).items() if k != "results"}
        return reply | {"data": data | {"results_dropped": dropped}}
    if "results" in reply:
        return reply | {"results": [None] * len(reply["results"]), "results_dropped": dropped}
    return reply


def _error_reply(exc: AotuiError) -> dict[str, Any]:
    return {"error": exc.code.value, "message": exc.message, "data": dict(exc.data)}


def _replayed(command_id: str, reply: Any) -> Any:
    """A recorded reply as the retry's answer (an error raised again)."""
    if isinstance(reply, dict) and "error" in reply:
        code = ErrorCode.parse(reply["error"]) or ErrorCode.E_INTERNAL
        raise AotuiError(code, reply["message"], {**reply.get("data", {}), "replayed": True})
    if isinstance(reply, dict) and reply.get("partial"):
        ran, total = reply["ran"], reply["total"]
        raise AotuiError(
            ErrorCode.E_UNAVAILABLE,
            f"command {command_id!r} was cut off (its desktop stopped while it ran): the first "
            f"{ran} of its {total} commands took effect and the rest took none. It is not run "
            f"again; read a snapshot, then send what is left as a new command.",
            {
                "command_id": command_id,
                "took_effect": "partly",
                "ran": ran,
                "total": total,
                "results": reply["results"],
                "outcome": ReplyOutcome.NOT_APPLIED,
            },
        )
    return reply


class CommandIds:
    """The desktop's side of command ids: runs a command once per id (see the module's doc)."""

    def __init__(self, persistence: Persistence) -> None:
        self.persistence = persistence
        self._running: dict[str, asyncio.Future[Any]] = {}

    async def run(
        self,
        command_id: str | None,
        total: int,
        work: Callable[[], Awaitable[Any]],
        message: bool = True,
    ) -> Any:
        """``work()``'s reply, or with ``command_id`` the first reply recorded under it.
        ``message``: see :attr:`CommandRun.message`."""
        if command_id is None:
            return await work()
        Command(command_id, None)  # E_INVALID_CMD for an id no store can record
        running = self._running.get(command_id)
        if running is not None:  # a retry while the first try still runs: its reply
            return _replayed(command_id, await asyncio.shield(running))
        recorded = await self.persistence.reply_to(command_id)
        if recorded is not None:
            return _replayed(command_id, recorded.reply)
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._running[command_id] = done
        run = CommandRun(command_id, total, asyncio.current_task(), message=message)
        token = RUNNING.set(run)
        final: Any = _error_reply(
            AotuiError(ErrorCode.E_UNAVAILABLE, "the first try of this command ended unanswered")
        )
        try:
            final = await work()
        except AotuiError as exc:
            final = _error_reply(exc)
            if run.wrote:  # it took some effect: the error is its reply
                await self.persistence.record_reply(
                    Command(command_id, kept(final), continues=True)
                )
            raise
        else:
            if not run.wrote or kept(final) != run.recorded:
                await self.persistence.record_reply(Command(command_id, kept(final), run.wrote))
            return final
        finally:
            RUNNING.reset(token)
            del self._running[command_id]
            done.set_result(final)
