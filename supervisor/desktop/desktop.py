"""The desktop: installed apps, their workers, and what every command of CONTRACT §5 does.

Lives inside the supervisor's event loop. Every wait on a worker has a deadline
(:class:`~supervisor.workers.handle.WorkerHandle`), so one slow app delays only the command that
waits on it. Changes are reported through ``on_change`` (which the supervisor turns into throttled
signals).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import zmq
import zmq.asyncio

from aotui.protocol.args import ResolvedRef, coerce_args, parse_arg_schema, parse_ref
from aotui.protocol.commands import Action, Command
from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.errors import Outcome as ReplyOutcome
from aotui.protocol.messages import (
    Ack,
    Dismount,
    Message,
    Mount,
    Operation,
    SignalReason,
)
from aotui.supervisor.config import DesktopConfig, Durability
from aotui.supervisor.desktop.app_record import AppRecord, AppStatus
from aotui.supervisor.desktop.command_ids import CommandIds, answer, aside
from aotui.supervisor.desktop.confirmations import (
    AwaitingUser,
    ConfirmationBook,
    Outcome,
    PendingConfirmation,
    Verdict,
)
from aotui.supervisor.desktop.controls import check_dialog, confirm_rule
from aotui.supervisor.desktop.persistence import Persistence, desktop_state, persistence_for
from aotui.supervisor.desktop.snapshot import RefTable, Snapshot, build_snapshot
from aotui.supervisor.desktop.snapshot_cache import SnapshotCache
from aotui.supervisor.desktop.snapshot_diff import SeenBlocks
from aotui.supervisor.desktop.snapshot_pull import PullOptions, select
from aotui.supervisor.desktop.system_log import SystemLog
from aotui.supervisor.desktop.view_tree import ViewRecord
from aotui.supervisor.instrument import Instrument
from aotui.supervisor.manifest import Manifest, load_manifest, names_clash
from aotui.supervisor.paths import DesktopPaths, app_log_dir
from aotui.supervisor.server.registry import RefTableSharing, SnapshotRegistry
from aotui.supervisor.store.faults import StoreIOError
from aotui.supervisor.store.state import DesktopState
from aotui.supervisor.workers.app_logs import last_output, log_size
from aotui.supervisor.workers.exits import ExitReason
from aotui.supervisor.workers.restart import RestartTracker
from aotui.supervisor.workers.runner import AppRunner

__all__ = ["Desktop", "uninstalled"]


def uninstalled(app: AppRecord) -> dict[str, Any]:
    """``uninstall``'s reply for ``app`` (stored with its removal under a command id)."""
    return {"app": app.app_id, "id": app.manifest.id}


class Desktop:
    """One agent's workspace: apps by ``app_N``, system log, snapshot registry."""

    def __init__(
        self,
        config: DesktopConfig,
        paths: DesktopPaths,
        context: zmq.asyncio.Context,
        on_change: Callable[..., None],
    ) -> None:
        self.config = config
        self.paths = paths
        self.context = context
        self.on_change = on_change
        self.desktop_id = config.desktop
        self.created = time.time()
        self.apps: list[AppRecord] = []
        # A fair share per source: one app cannot evict the others' crash reports.
        self.system_log = SystemLog(config.log_entries)
        #: Where its state is stored, by durability mode (persistence.py).
        self.persistence: Persistence = persistence_for(self, config)
        #: Commands with a client's id run at most once (desktop/command_ids.py).
        self.command_ids = CommandIds(self.persistence)
        self.registry: SnapshotRegistry[RefTable] = SnapshotRegistry(
            config.snapshot_ttl_s,
            config.snapshot_max_entries,
            reserve=self.persistence.reserve_ids if config.durability != Durability.OFF else None,
            compact=RefTableSharing(),
        )
        #: What each pull left the agent with, the base of a later pull ``since`` it.
        self.seen = SeenBlocks(config.snapshot_max_entries, config.snapshot_ttl_s)
        #: Each shown app's snapshot part, kept while what it is made of is unchanged.
        self.snapshot_cache = SnapshotCache()
        #: Block id (``app_0/view_3``) → when the agent last mounted it or executed in it: token
        #: budgets shorten the least recently touched first.
        self.touched: dict[str, float] = {}
        #: What observes the desktop's commands (supervisor/instrument.py; a chaos run's
        #: nemesis), set with :meth:`instrument_with`.
        self.instrument = Instrument()
        self.runner = AppRunner(config, paths, context, lambda: self.apps, self.log, on_change)
        # app_N ids follow install order and are never reused while the desktop lives.
        self.next_app = 0
        #: Operations waiting for the user's confirmation (seed 004; confirmations.py).
        self.confirmations = ConfirmationBook()

    def instrument_with(self, instrument: Instrument) -> None:
        """Have ``instrument`` observe this desktop's commands and its apps' HTTP requests."""
        self.instrument = instrument
        self.runner.http.instrument = instrument

    # --- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the zygote; restore the stored desktop or create it; open what was open."""
        saved = self.persistence.open()
        self.registry.reserve_ids()  # before any snapshot id is handed out, durably
        self.runner.start()
        to_open: list[tuple[AppRecord, str]] = []
        if saved is not None:
            to_open = self.restore(saved)
        restored = {app.app_id for app, _ in to_open}
        installed = {app.manifest.id for app in self.apps}
        quarantined = self.persistence.quarantined
        installed |= {q.manifest_id for q in quarantined if q.manifest_id}
        unknown = [q.app for q in quarantined if not q.manifest_id]
        for entry in [] if unknown else self.config.apps:
            directory = self.config.resolve_app_dir(entry)
            try:
                if self.manifest(directory).id in installed:
                    continue  # restored with its data
                record = self.install(directory)
            except AotuiError as exc:
                self.log(f"Could not install {entry}: {exc.message}")
                continue
            if record.manifest.system:
                to_open.append((record, "running"))
        if unknown:
            self.log(
                f"Apps from the config were not installed: the damaged row(s) of "
                f"{', '.join(unknown)} may be one of them, and a second copy would hide it."
            )
        self.log("Desktop restored." if saved else "Desktop initialized.")
        self.loaded = True
        await asyncio.gather(
            *(self._reopen(app, status, again=app.app_id in restored) for app, status in to_open)
        )
        await self.persistence.started()

    async def _reopen(self, app: AppRecord, status: str, again: bool) -> None:
        logs = app_log_dir(self.config.desktop)
        printed_before = log_size(logs, app.app_id)
        try:
            await self.open_app(app)
            if status == "collapsed":
                app.transition(AppStatus.COLLAPSED)
        except AotuiError as exc:
            cause = exc.message
            output = last_output(logs, app.app_id, since=printed_before)
            if output:  # the app's own last words say why far better than an exit status
                cause += f"; its last output: {output}"
            self.log(f"Could not open {app.name}{' again' if again else ''}: {cause}")

    async def stop(self) -> None:
        """Stop every worker and the zygote (leaves no process behind); flush the store."""
        await self.persistence.stop()
        await self.runner.stop()

    # --- serialize / restore / persist ----------------------------------------------------------

    def serialize(self) -> DesktopState:
        """The desktop as a :class:`DesktopState` (seed 000 §9)."""
        return desktop_state(self)

    def restore(self, state: DesktopState) -> list[tuple[AppRecord, str]]:
        """Rebuild the apps of a saved desktop (same ``app_N``, view ids and data).

        Returns the apps to open again with the status they had. An app whose directory or
        manifest is gone stays out, and the System Logs say why; its ``app_N`` is not reused.
        """
        self.created = state.created
        self.next_app = max(self.next_app, state.next_app)
        reopen: list[tuple[AppRecord, str]] = []
        for entry in state.apps:
            try:
                manifest = self.manifest(entry.app_dir)
            except AotuiError as exc:
                self.log(f"Could not restore {entry.app} ({entry.manifest_id}): {exc.message}")
                continue
            if manifest.id != entry.manifest_id:
                self.log(f"Could not restore {entry.app}: {entry.app_dir} now holds {manifest.id}")
                continue
            record = self._record(entry.app, manifest)
            record.restore(entry)
            self.apps.append(record)
            if entry.status in ("running", "collapsed") or manifest.system:
                reopen.append((record, entry.status))
        return reopen

    @property
    def loaded(self) -> bool:
        """True once the stored desktop is loaded: only then may anything be written to it."""
        return self.persistence.loaded

    @loaded.setter
    def loaded(self, value: bool) -> None:
        self.persistence.loaded = value

    async def persist(self, *apps: AppRecord) -> None:
        """Store ``apps`` (and the desktop); in ``ack`` mode, returns once it is durable."""
        await self.persistence.persist(*apps)

    def require_writable(self) -> None:
        """``E_IO`` before a state-changing command while the store refuses writes."""
        self.persistence.require_writable()

    def store_status(self) -> dict[str, Any]:
        """The store's state for ``status``: ``ok``, ``failing`` (with why) or ``off``."""
        return self.persistence.status()

    def log(self, text: str, owner: str | None = None) -> None:
        """Add a line to System Logs (``owner``: see :mod:`supervisor.desktop.system_log`)."""
        self.system_log.add(time.time(), text, owner)

    # --- install --------------------------------------------------------------------------------

    def install(self, app_dir: str | Path) -> AppRecord:
        """Install the app in ``app_dir``; returns its record with the next ``app_N``."""
        if self.loaded:
            self.require_writable()
        manifest = self.manifest(app_dir)
        for app in self.apps:
            if app.manifest.id == manifest.id:
                raise AotuiError(
                    ErrorCode.E_INVALID_CMD,
                    f"{manifest.id} is already installed as {app.app_id}",
                    {"app": app.app_id},
                )
            if names_clash(app.manifest.name, manifest.name):
                # Two apps the agent cannot tell apart could pose as each other.
                raise AotuiError(
                    ErrorCode.E_INVALID_CMD,
                    f"{manifest.app_dir / 'aoapp.json'}: field 'name' ({manifest.name!r}) reads "
                    f"as the name of {app.app_id} ({app.manifest.id}); names are unique on a "
                    f"desktop as an agent reads them (case, compatibility forms and look-alike "
                    f"letters of other scripts do not make another name): rename the app",
                    {"app": app.app_id, "field": "name"},
                )
        record = self._record(f"app_{self.next_app}", manifest)
        self.next_app += 1
        self.apps.append(record)
        self.log(f"Installed {manifest.name} ({manifest.id}) as {record.app_id}.")
        return record

    def manifest(self, app_dir: str | Path) -> Manifest:
        """``app_dir``'s manifest under this desktop's rules: only the apps its config lists (and
        the bundled system apps) may be system apps; limits within its ``max_limits``."""
        return load_manifest(
            app_dir, system_dirs=self.config.system_app_dirs(), ceilings=self.config.max_limits
        )

    def _record(self, app_id: str, manifest: Manifest) -> AppRecord:
        """A new record for an installed or restored app, with its restart policy."""
        return AppRecord(
            app_id,
            manifest,
            self.config.log_entries,
            restart_tracker=RestartTracker(self.config.restart_policy(manifest.restart)),
            on_transition=self._moved,
        )

    async def uninstall(self, ref: str) -> AppRecord:
        """Stop and remove an app; its ``app_N`` is never reused."""
        self.require_writable()
        app = self.app(ref)
        if app.manifest.system:
            raise AotuiError(ErrorCode.E_INVALID_CMD, f"{app.app_id} is a system app")
        with aside():  # a command id is stored with the removal, not the close
            await self.close_app(app)
        self.apps.remove(app)
        self.log(f"Uninstalled {app.name} ({app.manifest.id}).")
        answer(uninstalled(app))
        await self.persistence.forget(app)
        return app

    def _moved(self, app: AppRecord, old: AppStatus, new: AppStatus) -> None:
        if new is AppStatus.RUNNING and old is AppStatus.STARTING:
            self.on_change(SignalReason.APP_OPENED, app.app_id)
        elif new is AppStatus.NOT_RUNNING:
            self.on_change(SignalReason.APP_CLOSED, app.app_id)
        elif new in (AppStatus.RESTARTING, AppStatus.FAILED):
            self.on_change(SignalReason.APP_CRASHED, app.app_id)
        else:
            self.on_change(SignalReason.DOM_MUTATION, app.app_id)

    def app(self, ref: str) -> AppRecord:
        """An app by ``app_N`` or manifest id; ``E_NOT_FOUND`` listing what exists."""
        for app in self.apps:
            if ref in (app.app_id, app.manifest.id):
                return app
        known = ", ".join(f"{a.app_id} ({a.name})" for a in self.apps) or "none"
        raise AotuiError(
            ErrorCode.E_NOT_FOUND, f"no application {ref!r}; installed: {known}", {"app": ref}
        )

    # --- workers (see supervisor.workers.runner) -------------------------------------------

    async def open_app(self, app: AppRecord, fresh: bool = False) -> None:
        """Start a worker for ``app`` (or show it, when collapsed); ``fresh``: without its state."""
        await self.runner.open(app, fresh)

    async def close_app(self, app: AppRecord) -> None:
        """Stop ``app``'s worker; system apps cannot be closed while the desktop lives."""
        if app.manifest.system and not self.runner.closing:
            raise AotuiError(
                ErrorCode.E_INVALID_CMD,
                f"{app.app_id} ({app.name}) is a system app and cannot be closed; "
                f"collapse it instead: <context>collapse --application {app.app_id}</context>",
            )
        await self.runner.close(app)

    # --- commands -------------------------------------------------------------------------------

    def snapshot(self, options: PullOptions | None = None) -> tuple[str, Snapshot]:
        """Assemble a snapshot and record its ref table; returns (snapshot id, snapshot).

        The ref table is always the whole desktop's; ``options`` (focus, diff, token budget)
        choose the text (:mod:`~supervisor.desktop.snapshot_pull`).
        """
        options = options or PullOptions()
        base = self._diff_base(options.since) if options.since is not None else None
        if options.app is not None:
            options = dataclasses.replace(options, app=self.app(options.app).app_id)
        snap = build_snapshot(
            self.apps,
            self.system_log,
            self.config.snapshot_budget(),
            self._unshowable,
            self.snapshot_cache,
        )
        for app in self.apps:
            worker = app.worker
            if app.app_id in snap.over_budget and worker and not worker.reported_over_budget:
                worker.reported_over_budget = True  # once per worker, not once per pull
                self.log(
                    f"{app.name} ({app.app_id}) is over its snapshot budget; parts of it are "
                    f"not shown (see the markers in its block).",
                    app.app_id,
                )
        try:
            pulled = select(snap, options, base, self.touched)
        except AotuiError as exc:
            raise self._why_not_shown(exc, options) from None
        snapshot_id = self.registry.add(snap.refs)
        self.seen.record(snapshot_id, pulled.seen)
        return snapshot_id, dataclasses.replace(snap, markdown=pulled.markdown)

    def _why_not_shown(self, exc: AotuiError, options: PullOptions) -> AotuiError:
        """A pull of one app that shows no block, told by the app's state (restarting, …)."""
        if exc.code is not ErrorCode.E_NOT_FOUND or options.app is None or options.view:
            return exc
        app = self.app(options.app)
        status = app.status
        if status is AppStatus.RESTARTING or status is AppStatus.STARTING:
            # A worker started again after one ended is a restart, whatever the step.
            restart = status is AppStatus.RESTARTING or app.last_exit
            word = "restarting" if restart else "starting"
            why = f"its worker ended ({app.last_exit}) and " if app.last_exit else ""
            return AotuiError(
                ErrorCode.E_NOT_FOUND,
                f"{app.app_id} ({app.name}) is {word}: {why}it shows no block until its first "
                f"views come; pull again in a moment (aotui wait --reason app_restarted)",
                {"app": app.app_id, "state": word},
            )
        return AotuiError(
            ErrorCode.E_NOT_FOUND,
            f"{app.app_id} ({app.name}) is {status.value} and shows no block"
            + ("; open it first" if status is not AppStatus.COLLAPSED else "; show it first"),
            {"app": app.app_id, "state": status.value},
        )

    def _diff_base(self, since: str) -> dict[str, str]:
        """What the agent had after pull ``since``; ``E_STALE_STATE`` when it is not known."""
        seen = self.seen.get(since)
        if seen is not None:
            return seen
        raise AotuiError(
            ErrorCode.E_STALE_STATE,
            f"snapshot {since} is unknown or expired, so there is nothing to diff against: "
            f"pull a full snapshot (without since), then diff against its id",
            {"snapshot_id": since},
        )

    def _unshowable(self, app: AppRecord, error: Exception) -> None:
        """An app's block could not be assembled: say so once per app incarnation."""
        if app.worker is not None and not app.worker.reported_unshowable:
            app.worker.reported_unshowable = True
            self.log(f"{app.name}'s views could not be shown ({type(error).__name__}: {error}).")

    async def run(
        self, command: Command, refs: RefTable | None, deadline: float | None = None
    ) -> Any:
        """Run one parsed command; returns its result (``None`` for most).

        ``deadline`` (monotonic) bounds an execute or view command whole, a wait for its app's
        restart included; by default it is ``operation_timeout_ms`` from now. The instrument
        sees each command (a chaos run takes the app's state when it returns).
        """
        return await self.instrument.command(command, refs, deadline, self._run)

    async def _run(self, command: Command, refs: RefTable | None, deadline: float | None) -> Any:
        self.require_writable()  # every command may change what is stored
        action = command.action
        if command.app_id is not None and (command.view_id or command.target):
            app_id = self.app(command.app_id).app_id
            self.touched[f"{app_id}/{command.view_id or command.target}"] = time.monotonic()
            if len(self.touched) > 4096:  # a client naming made-up views cannot grow it
                del self.touched[next(iter(self.touched))]
        if deadline is None:
            deadline = time.monotonic() + self.config.operation_timeout_ms / 1000
        if action is Action.EXECUTE:
            await self._await_restart(self.app(command.app_id or ""), deadline)
            return await self._execute(command, refs, deadline)
        app = self.app(command.app_id or command.target)
        if action not in (Action.OPEN_APPLICATION, Action.CLOSE_APPLICATION):
            await self._await_restart(app, deadline)
        if action is Action.OPEN_APPLICATION:
            await self.open_app(app, fresh=command.args.get("fresh") is True)
        elif action is Action.CLOSE_APPLICATION:
            await self.close_app(app)
        elif action is Action.COLLAPSE_APPLICATION:
            app.require_live()
            app.transition(AppStatus.COLLAPSED)
        elif action is Action.SHOW_APPLICATION:
            app.require_live()
            app.transition(AppStatus.RUNNING)
        else:
            await self._view_command(app, action, command.target, deadline)
        await self.persist(app)
        return None

    async def _await_restart(self, app: AppRecord, deadline: float) -> None:
        """A command for an app that is restarting waits for it, within its own deadline."""
        try:
            async with asyncio.timeout(deadline - time.monotonic()):
                await app.wait_while(AppStatus.RESTARTING, AppStatus.STARTING)
        except TimeoutError:
            why = f" after {app.last_exit}" if app.last_exit else ""
            raise AotuiError(
                ErrorCode.E_TIMEOUT,
                f"{app.app_id} ({app.name}) is {app.status.value}{why} and did not come back "
                f"within this command's deadline; the command did not run. Retry in a "
                f"moment (status shows when it is running again).",
                {"app": app.app_id, "state": app.status.value, "outcome": ReplyOutcome.NOT_APPLIED},
            ) from None

    async def _view_command(
        self, app: AppRecord, action: Action, view_id: str, deadline: float
    ) -> None:
        app.require_live()
        key = app.views.key_for(view_id)
        if action in (Action.HIDE_VIEW, Action.SHOW_VIEW):
            app.views.mounted_view(view_id)
            (app.views.hidden.add if action is Action.HIDE_VIEW else app.views.hidden.discard)(key)
            self.on_change(SignalReason.DOM_MUTATION, app.app_id)
            return
        if action is Action.MOUNT_VIEW:
            await self.deliver(app, lambda rid: Mount(rid, key), f"mount {view_id}", deadline)
        else:
            what = f"dismount {view_id}"
            await self.deliver(app, lambda rid: Dismount(rid, key), what, deadline)
            app.views.hidden.discard(key)
        app.log_operation(f"{action.value.split('_')[0]} {view_id}: ok")

    async def _execute(self, command: Command, refs: RefTable | None, deadline: float) -> Any:
        app = self.app(command.app_id or "")
        app.require_live()
        view_id = command.view_id or ""
        view = app.views.mounted_view(view_id)
        spec = next((op for op in view.operations if op.op_id == command.target), None)
        if spec is None:
            offered = ", ".join(op.op_id for op in view.operations) or "none"
            raise AotuiError(
                ErrorCode.E_NOT_FOUND,
                f"{view_id} of {app.app_id} has no operation {command.target!r} "
                f"(it offers: {offered})",
            )
        check_dialog(app, view_id, command.target)
        rule = confirm_rule(self.config.policy, app, command.target)
        seen = (refs or {}).get((app.app_id, view_id), view)
        coerced = coerce_args(parse_arg_schema(spec.args), command.args, _resolver(seen, view_id))
        self.instrument.resolved(command, coerced.args)  # a chaos run records them

        def asking(reason: str) -> PendingConfirmation:
            return PendingConfirmation(
                ident="",
                app=app.app_id,
                app_name=app.name,
                view_key=view.key,
                view_id=view_id,
                operation=command.target,
                args=coerced.args,
                stable_keys=coerced.stable_keys,
                reason=reason,
            )

        if spec.confirm or rule is not None:
            marked = f"{app.name} marks {command.target} confirm"
            return await self._ask_user(asking(rule or marked))
        try:
            return await self._operate(
                app, view.key, command.target, coerced.args, coerced.stable_keys, deadline
            )
        except AotuiError as exc:
            asked = _asks_confirmation(exc)
            if asked is None:
                raise
        # The app asked for the user's confirmation before doing anything (sdk
        # ConfirmationRequired): the same flow as an operation marked confirm.
        return await self._ask_user(asking(f"{app.name} asks: {asked}"))

    async def _operate(
        self,
        app: AppRecord,
        view_key: str,
        op_id: str,
        args: dict[str, Any],
        stable_keys: dict[str, Any],
        deadline: float,
        note: str = "",
        confirmed: bool = False,
    ) -> Any:
        """Deliver one checked operation to ``app``'s worker and log what became of it."""
        what = f"execute {op_id}{note}"
        try:
            result = await self.deliver(
                app,
                lambda rid: Operation(
                    rid,
                    view_key,
                    op_id,
                    args,
                    stable_keys,
                    int(_left(deadline, self.config.operation_timeout_ms) * 1000),
                    confirmed,
                ),
                what,
                deadline,
            )
        except AotuiError as exc:
            app.log_operation(f"{what}: {exc.code.value} {exc.message}")
            if exc.code is ErrorCode.E_PERMISSION and "confirm" not in exc.data:
                # Reported by the trusted side, whatever the worker itself logs or floods.
                self.log(f"{app.name}: {exc.message} (in operation {op_id})")
            raise
        app.log_operation(f"{what}: ok")
        return result

    # --- confirmation (seed 004; confirmations.py) ----------------------------------------------

    async def _ask_user(self, asked: PendingConfirmation) -> AwaitingUser:
        """Record the operation as pending and ask the user, in the chat app and System Logs."""
        pending = self.confirmations.ask(asked)
        app, ident = self.app(pending.app), pending.ident
        confirm = self.paths.command(f"confirm {ident}")
        answer = f"{confirm} (or {confirm} --deny)"
        args = ", ".join(f"{k}={v!r}" for k, v in pending.shown_args.items()) or "no arguments"
        if len(args) > 200:  # the whole call is in `aotui confirm`'s list; the answer must show
            args = args[:199] + "…"
        self.log(
            f"{app.name} ({app.app_id}) asks the user to confirm {pending.operation} as {ident}: "
            f"{answer}. Arguments: {args}.",
            app.app_id,
        )
        app.log_operation(f"execute {pending.operation}: waiting for the user ({ident})")
        chat = next((a for a in self.apps if a.manifest.id == "system.chat" and a.is_live), None)
        if chat is not None:
            text = (
                f"The agent asks to run {pending.operation} in {app.name} ({args}). "
                f"Answer with {answer}."
            )
            try:
                await self.deliver(
                    chat,
                    lambda rid: Operation(rid, "", "desktop_message", {"text": text}, {}, 5000),
                    "desktop_message",
                )
            except AotuiError as exc:  # the request stands: `aotui confirm` lists it
                self.log(f"Could not post confirmation {ident} in the chat: {exc.message}")
        self.on_change(SignalReason.DOM_MUTATION)
        return AwaitingUser(
            pending,
            f"{pending.operation} waits for the user's confirmation {ident} ({pending.reason}); "
            f"it has not run. It runs once when the user confirms; a refusal is E_PERMISSION. "
            f"The outcome appears in {app.app_id}'s Operation Log, or wait for it: "
            f"{self.paths.command(f'wait --confirmation {ident}')}",
        )

    async def run_confirmed(self, pending: PendingConfirmation, deadline: float) -> Any:
        """Run an operation the user confirmed (once), re-checking that it can still run."""
        app = self.app(pending.app)
        try:
            self.require_writable()
            await self._await_restart(app, deadline)
            app.require_live()
            view = app.views.rendered.get(pending.view_key)
            view_id = app.views.ids.get(pending.view_key, pending.view_id)
            if view is None or not view.mounted:
                raise AotuiError(
                    ErrorCode.E_NOT_FOUND,
                    f"{view_id} of {app.app_id} is no longer mounted, so {pending.operation} "
                    f"could not run; the agent may ask again",
                )
            if all(op.op_id != pending.operation for op in view.operations):
                raise AotuiError(
                    ErrorCode.E_NOT_FOUND,
                    f"{view_id} of {app.app_id} no longer offers {pending.operation}",
                )
            check_dialog(app, view_id, pending.operation)
            result = await self._operate(
                app,
                pending.view_key,
                pending.operation,
                pending.args,
                pending.stable_keys,
                deadline,
                f" (confirmed {pending.ident})",
                confirmed=True,
            )
        except AotuiError as exc:
            self.confirmations.decide(pending.ident, Outcome(Verdict.FAILED, error=exc))
            self.on_change(SignalReason.DOM_MUTATION, pending.app)
            raise
        self.confirmations.decide(pending.ident, Outcome(Verdict.RAN, result))
        self.on_change(SignalReason.DOM_MUTATION, pending.app)
        return result

    def refuse(self, pending: PendingConfirmation, reason: str | None) -> dict[str, Any]:
        """The user refused ``pending``: it never runs; its outcome is ``E_PERMISSION``."""
        why = f": {reason}" if reason else ""
        error = AotuiError(
            ErrorCode.E_PERMISSION,
            f"the user refused {pending.operation} on {pending.app} ({pending.app_name}){why}; "
            f"it did not run",
            {"outcome": ReplyOutcome.NOT_APPLIED},
        )
        self.confirmations.decide(pending.ident, Outcome(Verdict.REFUSED, error=error))
        app = next((a for a in self.apps if a.app_id == pending.app), None)
        if app is not None:
            app.log_operation(
                f"execute {pending.operation} ({pending.ident}): E_PERMISSION refused by the "
                f"user{why}"
            )
        self.log(f"The user refused {pending.ident} ({pending.operation} on {pending.app}){why}.")
        self.on_change(SignalReason.DOM_MUTATION, pending.app)
        return {"confirmation": pending.ident, "verdict": Verdict.REFUSED.value}

    async def deliver(
        self,
        app: AppRecord,
        build: Callable[[int], Message],
        what: str,
        deadline: float | None = None,
    ) -> Any:
        """Send one request to ``app``'s worker; returns its result once its effect is stored.

        CONTRACT §6: an error means it took no effect. A timeout stops the worker before the
        reply (the request can never land later); a worker that ran it but cannot acknowledge
        it, and a result the store cannot record, restart the app from its stored state.
        """
        worker = app.worker
        assert worker is not None
        timeout = _left(deadline, self.config.operation_timeout_ms)  # it may have queued
        try:
            reply = await worker.request(build, timeout, what)
        except AotuiError as exc:
            if exc.code is ErrorCode.E_TIMEOUT:
                raise await self._abandon(app, what, exc) from None
            if (
                exc.data.get("outcome") == ReplyOutcome.NOT_APPLIED
                and exc.code is ErrorCode.E_APP_ERROR
            ):
                # The worker ran it but cannot acknowledge it: its memory holds an effect that
                # must not survive. (A worker that lies here only gets itself restarted.)
                await self._stop_worker(app, ExitReason.UNACKNOWLEDGED_EFFECT)
            raise
        if not isinstance(reply, Ack):
            raise AotuiError(
                ErrorCode.E_APP_ERROR, f"{app.app_id} answered {what} with a {reply.KIND} frame"
            )
        if reply.state_changes and not isinstance(app.saved_state, dict):
            # Changes to data this desktop does not hold cannot be stored: the effect must go.
            await self._stop_worker(app, ExitReason.UNACKNOWLEDGED_EFFECT)
            raise AotuiError(
                ErrorCode.E_APP_ERROR,
                f"{app.app_id} sent changed parts of data it never sent whole; {what} took no "
                f"effect: the app restarts from its last acknowledged state",
                {"outcome": ReplyOutcome.NOT_APPLIED},
            )
        if reply.state_changes:
            try:
                self.persistence.budget.admit(
                    app.app_id, app.name, app.saved_state, reply.state_changes
                )
            except AotuiError:
                await self._stop_worker(app, ExitReason.UNACKNOWLEDGED_EFFECT)
                raise
        answer(reply.result)  # a command with a client's id: stored with its effect
        try:  # the ack waits for the store (durability "ack")
            if reply.state_changes:
                await self.persistence.commit_parts(app, reply.state_changes)
            elif reply.state is not None and reply.state != app.saved_state:
                await self.persistence.commit(app, reply.state)
        except StoreIOError as exc:
            raise await self._undo(app, what, exc) from None
        return reply.result

    async def _stop_worker(self, app: AppRecord, reason: ExitReason) -> None:
        """Kill ``app``'s worker and wait until its views are no longer shown (bounded).

        The views it sent may show an effect that is being discarded; once the exit is handled
        the app is restarting (not shown) and comes back rendered from its stored state.
        """
        worker = app.worker
        self.runner.kill(app, reason)
        # Until it leaves RUNNING (woken by each status change), or a new worker serves it.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(2.0):
                while app.status is AppStatus.RUNNING and app.worker in (None, worker):
                    await app.changed()

    async def _abandon(self, app: AppRecord, operation: str, timeout: AotuiError) -> AotuiError:
        """A timed-out operation may still land: stop the worker first, so it never does.

        The worker is restarted from the app's last acknowledged state, so the operation took
        no effect on the app's state (CONTRACT §6: the outcome is made knowable, not guessed).
        """
        self.log(f"{app.name} did not finish {operation} in time; restarting it without it.")
        await self._stop_worker(app, ExitReason.TIMEOUT)
        return AotuiError(
            ErrorCode.E_TIMEOUT,
            f"{timeout.message}; the app was stopped before the operation could complete and "
            f"is restarted from its last acknowledged state, so {operation} took no effect on "
            f"it (effects outside the desktop, such as HTTP requests, may have happened). "
            f"Pull a snapshot, then retry if you still want it.",
            {**timeout.data, "outcome": ReplyOutcome.NOT_APPLIED},
        )

    async def _undo(self, app: AppRecord, operation: str, exc: StoreIOError) -> AotuiError:
        """The operation ran but cannot be stored: restart the app from its stored state."""
        self.log(f"{app.name}: {operation} was undone, because the store cannot be written.")
        await self._stop_worker(app, ExitReason.STORE_WRITE_FAILED)
        return AotuiError(
            ErrorCode.E_IO,
            f"{operation} on {app.app_id} was undone: its result could not be stored "
            f"({exc.detail}). The app is restarted from its last stored state, so nothing "
            f"changed; state-changing commands are refused until the store can be written "
            f"(free disk space or fix the disk). Snapshots and status still work.",
            {"store": "failing", "outcome": ReplyOutcome.NOT_APPLIED},
        )


def _left(deadline: float | None, timeout_ms: int) -> float:
    """Seconds a request may take: ``timeout_ms``, or what is left of ``deadline`` if less."""
    timeout = timeout_ms / 1000
    if deadline is None:
        return timeout
    return max(0.05, min(timeout, deadline - time.monotonic()))


def _resolver(view: ViewRecord, view_id: str) -> Callable[[str, str], ResolvedRef]:
    """Resolve refs against the view as the agent saw it."""

    def resolve(ref: str, expected_type: str) -> ResolvedRef:
        name, index = parse_ref(ref)
        key = ref
        lists = {r.split("[", 1)[0] for r in view.ref_types if "[" in r}
        if index is not None and name == "list" and name not in lists and len(lists) == 1:
            key = f"{next(iter(lists))}[{index}]"
        if key not in view.refs and key not in view.keys:
            known = ", ".join(sorted(view.ref_types)[:20]) or "none"
            raise AotuiError(
                ErrorCode.E_NOT_FOUND,
                f"{ref} is not in {view_id} as you saw it (refs there: {known})",
                {"ref": ref},
            )
        actual = view.ref_types.get(key, "")
        if expected_type and actual and actual != expected_type:
            raise AotuiError(
                ErrorCode.E_INVALID_CMD,
                f"{ref} is a {actual}, but this argument expects a {expected_type}",
                {"ref": ref},
            )
        return ResolvedRef(view.refs.get(key), view.keys.get(key, key))

    return resolve


def _asks_confirmation(exc: AotuiError) -> str | None:
    """The reason an app gave for asking the user to confirm an operation, if it asked (its
    worker's E_PERMISSION with ``confirm``, sanitized by the worker handle); else ``None``."""
    reason = exc.data.get("confirm")
    if exc.code is not ErrorCode.E_PERMISSION or not isinstance(reason, str):
        return None
    return reason or "no reason given"
