"""Export and import a desktop's state (seed 000's persistence, given to the product layer).

``export`` answers the desktop as :class:`~supervisor.store.state.DesktopState` data (format
``aotui.desktop``, versioned): apps, their view ids and their own data. ``import`` takes such data
and gives each app it names (matched by manifest id) that app's data: a running app is closed and
opened again from it, so it shows the imported state at once. Apps the data names that are not
installed here are reported as skipped, never installed behind the user's back. The desktop's
store stays the embedded default: this is how state moves between desktops or is kept aside.

An import takes effect whole or not at all: the state is checked whole first
(:mod:`~supervisor.interface.plain_data`, then each app's budget and the frames that carry its
data to a worker), and a failure while applying gives every app back what it had.

Both move the state in chunks, since it may be far larger than one frame (each app may keep
64 MiB): the state is encoded whole as msgpack and sent in slices of
:attr:`TransferLimits.chunk_bytes`.

- ``export`` with ``chunked=true`` answers ``{export_id, total_bytes, offset, chunk}``; asked again
  with ``export_id`` and the next ``offset`` it answers the next slice. ``export_id`` is null when
  the first chunk is the whole. Without ``chunked`` it answers the state itself, if it fits a frame.
- ``import`` with ``chunk``, ``offset`` and ``total_bytes`` (and from the second chunk on the
  ``import_id`` the first answered) collects the state; nothing changes until the last chunk, then
  every app's data is stored in one write. ``import`` with ``state`` takes it whole, as before.

The supervisor holds transfers under way in a bounded :class:`TransferCache` (per ``client``).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

import msgpack

from aotui.protocol import codec
from aotui.protocol.api import ExportParams, ImportParams
from aotui.protocol.errors import AotuiError, ErrorCode, Outcome
from aotui.supervisor.desktop.app_record import AppStatus
from aotui.supervisor.desktop.command_ids import answer, aside
from aotui.supervisor.interface.plain_data import data_fault, state_fault
from aotui.supervisor.interface.transfer_cache import TransferCache, TransferKind, TransferLimits
from aotui.supervisor.store.budget import MAX_APP_DATA_BYTES
from aotui.supervisor.store.state import DesktopState
from aotui.supervisor.workers.restore import part_bytes, restore_messages

if TYPE_CHECKING:
    from aotui.supervisor.desktop.app_record import AppRecord
    from aotui.supervisor.server.process import Supervisor
    from aotui.supervisor.store.state import AppEntry

__all__ = ["StateTransfer", "pack_state", "unpack_state"]

#: Room for the desktop's own fields and each app's record beside the apps' data budgets.
_IMPORT_SLACK_BYTES = 1 << 20


def pack_state(state: dict[str, Any]) -> bytes:
    """The state encoded whole, as export and import move it."""
    packed: bytes = msgpack.packb(state, use_bin_type=True)
    return packed


def unpack_state(blob: bytes) -> Any:
    """The state in ``blob``; ``E_INVALID_CMD`` if it is not msgpack data."""
    try:
        return msgpack.unpackb(blob, raw=False, strict_map_key=True)
    except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError) as exc:
        why = "nested too deep for msgpack" if isinstance(exc, msgpack.StackError) else exc
        raise AotuiError(
            ErrorCode.E_INVALID_CMD,
            f"the imported chunks do not make an encoded desktop state ({str(why)[:200]}); "
            f"import again from an `aotui export`",
        ) from None


class StateTransfer:
    """The ``export`` and ``import`` methods of one desktop."""

    def __init__(self, supervisor: Supervisor, limits: TransferLimits | None = None) -> None:
        self.supervisor = supervisor
        self.transfers = TransferCache(limits)

    @property
    def chunk_bytes(self) -> int:
        """Bytes of one chunk."""
        return self.transfers.limits.chunk_bytes

    # --- export ---------------------------------------------------------------------------------

    async def export_state(self, call: ExportParams) -> dict[str, Any]:
        """The desktop's state: whole (if it fits a frame) or its first or next chunk."""
        params = call.wire()
        if params.get("export_id") is not None:
            transfer = self.transfers.get(TransferKind.EXPORT, params["export_id"])
            offset = _offset(params, transfer.total)
            if offset == transfer.total:
                self.transfers.drop(params["export_id"])
            return self._chunk(params["export_id"], bytes(transfer.data), offset)
        state = self.supervisor.desktop.serialize().to_dict()
        await asyncio.to_thread(_check_exportable, state)
        if not params.get("chunked"):
            size = len(await asyncio.to_thread(pack_state, state))
            if size > self.chunk_bytes:
                raise AotuiError(
                    ErrorCode.E_INVALID_CMD,
                    f"the desktop's state is {size >> 20} MiB, more than one reply carries: ask "
                    f"for it in chunks (export with chunked=true, as `aotui export` and "
                    f"Client.export_state do)",
                )
            return state
        blob = await asyncio.to_thread(pack_state, state)
        if len(blob) <= self.chunk_bytes:
            return self._chunk(None, blob, 0)
        export_id = self.transfers.open(TransferKind.EXPORT, _client(params), len(blob), blob)
        return self._chunk(export_id, blob, 0)

    def _chunk(self, export_id: str | None, blob: bytes, offset: int) -> dict[str, Any]:
        end = min(offset + self.chunk_bytes, len(blob))
        if export_id is not None and end == len(blob):
            self.transfers.drop(export_id)  # the last chunk: nothing more will be asked
        return {
            "export_id": export_id,
            "total_bytes": len(blob),
            "offset": offset,
            "chunk": blob[offset:end],
        }

    # --- import ---------------------------------------------------------------------------------

    async def import_state(self, call: ImportParams) -> dict[str, Any]:
        """Take ``state`` whole, or collect it by ``chunk``; on the last, give apps their data."""
        params = call.wire()
        token = params.get("token")
        self.supervisor.lease.check(token if isinstance(token, str) else None)
        command_id = params.get("command_id")
        if "chunk" not in params:
            return await self._applied(command_id, params.get("state"))
        chunk = params["chunk"]
        if not isinstance(chunk, bytes):
            raise AotuiError(
                ErrorCode.E_INVALID_CMD,
                f"an import chunk is bytes (a slice of the encoded state), "
                f"not {type(chunk).__name__}",
            )
        import_id = params.get("import_id")
        if import_id is None:
            self.supervisor.desktop.require_writable()
            import_id = self.transfers.open(
                TransferKind.IMPORT, _client(params), self._declared_total(params)
            )
        transfer = self.transfers.get(TransferKind.IMPORT, import_id)
        offset = _offset(params, transfer.total)
        if offset != len(transfer.data) or offset + len(chunk) > transfer.total:
            self.transfers.drop(import_id)
            raise AotuiError(
                ErrorCode.E_INVALID_CMD,
                f"import chunk at offset {offset} of {len(chunk)} bytes does not follow the "
                f"{len(transfer.data)} bytes received of {transfer.total}; import again from "
                f"the start",
            )
        transfer.data += chunk
        if len(transfer.data) < transfer.total:
            return {"import_id": import_id, "received": len(transfer.data)}
        self.transfers.drop(import_id)
        raw = await asyncio.to_thread(unpack_state, bytes(transfer.data))
        return await self._applied(command_id, raw)

    async def _applied(self, command_id: str | None, raw: Any) -> dict[str, Any]:
        """:meth:`_apply`, at most once per ``command_id`` (desktop/command_ids.py: the one
        write of the new data records the reply; a retry gets it, or runs)."""
        ids = self.supervisor.desktop.command_ids
        reply: dict[str, Any] = await ids.run(
            command_id, 1, lambda: self._apply(raw), message=False
        )
        return reply

    def _declared_total(self, params: dict[str, Any]) -> int:
        total = params.get("total_bytes")
        apps = max(1, len(self.supervisor.desktop.apps))
        most = apps * MAX_APP_DATA_BYTES + _IMPORT_SLACK_BYTES
        if type(total) is not int or not 0 < total <= most:
            raise AotuiError(
                ErrorCode.E_INVALID_CMD,
                f"total_bytes {str(total)[:40]} is not the size of an importable state (1 to "
                f"{most >> 20} MiB for this desktop's {apps} app(s))",
            )
        return total

    async def _apply(self, raw: Any) -> dict[str, Any]:
        """Give the installed apps their data from ``raw``: all of it, or none.

        Everything is checked before anything changes (types, integers, depth, budgets, frames);
        if a step of the change fails after all (an app that will not start from its data, the
        store), every app is given back what it had — data, views, running or collapsed — and
        the error says so.
        """
        desktop = self.supervisor.desktop
        desktop.require_writable()
        fault = await asyncio.to_thread(state_fault, raw)  # before anything reads it
        if fault is not None:
            raise AotuiError(ErrorCode.E_INVALID_CMD, f"{fault}; nothing was imported")
        chosen, skipped = self._chosen(DesktopState.from_dict(raw))
        if not chosen and not skipped:
            raise AotuiError(ErrorCode.E_INVALID_CMD, "the state names no apps; nothing imported")
        await asyncio.to_thread(_check_data, chosen)
        # Never under an execute on the same app; taken in one order, so two imports cannot
        # hold each other's locks.
        locks = [
            self.supervisor.app_locks.setdefault(app.app_id, asyncio.Lock())
            for app in sorted((app for app, _ in chosen), key=_order)
        ]
        imported = [app.app_id for app, _ in chosen]
        for lock in locks:
            await lock.acquire()
        try:
            await self._replace(chosen, {"imported": imported, "skipped": skipped})
        finally:
            for lock in locks:
                lock.release()
        desktop.log(
            f"Imported the data of {len(imported)} app(s)"
            + (f"; not installed here, skipped: {', '.join(skipped)}" if skipped else "")
            + "."
        )
        return {"imported": imported, "skipped": skipped}

    def _chosen(self, state: DesktopState) -> tuple[list[tuple[AppRecord, Any]], list[str]]:
        """The installed apps ``state`` gives data (with it), and the manifest ids skipped."""
        installed = {app.manifest.id: app for app in self.supervisor.desktop.apps}
        chosen: dict[str, tuple[AppRecord, Any]] = {}
        skipped: list[str] = []
        for entry in state.apps:
            app = installed.get(entry.manifest_id)
            if app is None:
                skipped.append(entry.manifest_id[:200])
            elif app.app_id in chosen:
                raise AotuiError(
                    ErrorCode.E_INVALID_CMD,
                    f"the state gives {app.app_id} ({app.name}) data twice; nothing was imported",
                )
            else:
                chosen[app.app_id] = (app, entry.data)
        return list(chosen.values()), skipped

    async def _replace(self, chosen: list[tuple[AppRecord, Any]], reply: dict[str, Any]) -> None:
        """Close the live ones of ``chosen``, store their new data in one write, open them again;
        on any failure, undo it all (:meth:`_undo`) and re-raise, saying it was undone.

        Under a command id, the one write of the new data records ``reply``; the closing writes
        nothing under it, and the undo's write records that the import was undone."""
        desktop = self.supervisor.desktop
        apps = [app for app, _ in chosen]
        before = {entry.app: entry for entry in desktop.serialize().apps}
        live = {app.app_id: app.status for app in apps if app.is_live}
        try:
            with aside():
                for app in apps:
                    if app.app_id in live:
                        await desktop.runner.close(app)
            for app, data in chosen:
                app.adopt_state(data)
            answer(reply)
            await desktop.persist(*apps)  # one write: all or none
            for app in apps:
                if app.app_id in live:
                    await self._reopen(app, live[app.app_id])
        except BaseException as exc:
            answer(_undone_reply(exc))  # a retry's, if the desktop stops before the error
            undone = await self._undo(apps, before, live)
            if not isinstance(exc, AotuiError):
                raise
            raise AotuiError(
                exc.code, f"the import was undone: {undone} What failed: {exc.message}", exc.data
            ) from None

    async def _reopen(self, app: AppRecord, status: AppStatus) -> None:
        """Open ``app`` again, collapsed if it was."""
        await self.supervisor.desktop.open_app(app)
        if status is AppStatus.COLLAPSED and app.status is AppStatus.RUNNING:
            app.transition(AppStatus.COLLAPSED)

    async def _undo(
        self, apps: list[AppRecord], before: dict[str, AppEntry], live: dict[str, AppStatus]
    ) -> str:
        """Give ``apps`` back their data, views and state from ``before``; says how that went."""
        desktop = self.supervisor.desktop
        failed: list[str] = []
        for app in apps:
            entry = before[app.app_id]
            if app.app_id not in live:
                app.adopt_state(entry.data)
                continue
            try:
                await desktop.runner.close(app)  # it may run with the imported data by now
            except AotuiError as exc:
                failed.append(f"{app.app_id} could not be closed ({exc.message[:200]})")
                app.adopt_state(entry.data)
                continue
            app.restore(entry)  # its view ids and mounted views too: it opens as it was
        with contextlib.suppress(AotuiError):
            # A store that refuses this write is failing: the desktop writes what it holds (now
            # the data from before) once the store can be written again.
            await desktop.persist(*apps)
        for app in apps:
            if app.app_id in live and not app.is_live:
                try:
                    await self._reopen(app, live[app.app_id])
                except AotuiError as exc:
                    failed.append(f"{app.app_id} could not be opened ({exc.message[:200]})")
        what = f"{', '.join(app.app_id for app in apps)} have their data from before it"
        if failed:
            what += f", but {'; '.join(failed)}"
        desktop.log(f"An import failed and was undone: {what}.")
        return what + "."


def _undone_reply(exc: BaseException) -> dict[str, Any]:
    """What an import's command id records with the write that undoes it: an error, raised to a
    retry if the desktop stops before the import's own error is recorded."""
    code = exc.code if isinstance(exc, AotuiError) else ErrorCode.E_INTERNAL
    return {
        "error": code.value,
        "message": "the import was undone (an app could not take its data) and took no effect",
        "data": {"outcome": Outcome.NOT_APPLIED},
    }


def _order(app: AppRecord) -> str:
    return app.app_id


def _client(params: dict[str, Any]) -> str:
    client = params.get("client")
    return client[:64] if isinstance(client, str) and client else "anonymous"


def _offset(params: dict[str, Any], total: int) -> int:
    offset = params.get("offset")
    if type(offset) is not int or not 0 <= offset <= total:
        raise AotuiError(
            ErrorCode.E_INVALID_CMD,
            f"offset {str(offset)[:40]} is not a byte offset within the {total} bytes",
        )
    return offset


def _check_exportable(state: dict[str, Any]) -> None:
    """``E_INVALID_CMD`` naming an app whose data could not be imported back (runs in a thread).

    Such data never comes from an app (its frames hold it to the same limits) nor, now, from an
    import; a store written otherwise could hold it, and 600 levels of it made export recurse.
    """
    for i, entry in enumerate(state["apps"]):
        fault = data_fault(entry["data"], f"apps[{i}].data")
        if fault is not None:
            raise AotuiError(
                ErrorCode.E_INVALID_CMD,
                f"the desktop's state cannot be exported: {fault}. The data of {entry['app']} "
                f"is not data an app could have sent; start it without its saved state (which "
                f"discards it): <context>open --application {entry['app']} --fresh</context>",
            )


def _check_data(chosen: list[tuple[AppRecord, Any]]) -> None:
    """Each app's data within its budget and sendable to its worker (runs in a thread)."""
    for app, data in chosen:
        _check_budget(app.app_id, data)
        _check_sendable(app, data)


def _check_sendable(app: AppRecord, data: Any) -> None:
    """``E_INVALID_CMD`` unless ``data`` goes to a new worker of ``app`` as its start does: each
    frame of it within the codec's limits (frame bytes, items, string bytes, depth)."""
    for message in restore_messages(app.app_id, data, []):
        try:
            codec.encode(message)
        except AotuiError as exc:
            raise AotuiError(
                ErrorCode.E_INVALID_CMD,
                f"the imported data of {app.app_id} ({app.name}) cannot be sent to the app: "
                f"{exc.message}; nothing was imported",
            ) from None


def _check_budget(app: str, data: Any) -> None:
    """An app's imported data is held to the budget its own operations are (``E_INVALID_CMD``)."""
    if isinstance(data, dict):
        size = sum(part_bytes(part, value) for part, value in data.items())
    else:
        size = len(pack_state({"data": data}))
    if size > MAX_APP_DATA_BYTES:
        raise AotuiError(
            ErrorCode.E_INVALID_CMD,
            f"the imported data of {app} is {size >> 20} MiB, over the "
            f"{MAX_APP_DATA_BYTES >> 20} MiB an app may keep; nothing was imported",
        )
