"""The ``aotui`` command line (CONTRACT §8).

Exit codes are those of CONTRACT §7 (``ErrorCode.exit_code``); 69 when no desktop is running.
Every command takes ``--json`` for machine-readable output.
"""

from __future__ import annotations

# A shell agent pays this module's imports on every `aotui snapshot|exec|status`: at module level
# only argument parsing, output formatting and the JSON-RPC client (a socket and json). A command
# needing more (the ZeroMQ client, asyncio, the store's sqlite3, the MCP SDK, ...) imports it in
# its own function; tests/test_cli_fast.py checks.
import argparse
import gc
import json
import os
import sys
import time
from collections.abc import Callable, Sequence

from aotui.protocol import api
from aotui.protocol.api import Declared
from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.supervisor.interface import rpc_client
from aotui.supervisor.interface.reports import format_desktops, format_doctor, format_status
from aotui.supervisor.paths import DesktopPaths, app_log_dir, data_home, store_path

TYPE_CHECKING = False  # typing's, without importing typing (~2 ms of every call)
if TYPE_CHECKING:
    from typing import Any, NoReturn

    from aotui.supervisor.interface.client import Client

__all__ = ["main"]

EPILOG = """\
examples:
  aotui up --detach                 start the default desktop in the background
  aotui snapshot                    print what the agent reads
  aotui exec '<context>open --application app_2</context>'
  echo '<context app_id="app_2" view_id="view_0">execute add_note --title T --text hi</context>' \
      | aotui exec
  aotui say "Hello agent"           post a user message into the chat app
  aotui status                      apps, pids, memory, CPU, restarts
  aotui down                        stop the desktop and every worker
exit codes: 0 ok, 64 invalid command, 65 not found, 69 no desktop, 70 app/internal error,
            73 too many commands in flight (retry), 74 store I/O error,
            75 stale/locked/timeout (retry), 77 permission
"""


def _client(args: argparse.Namespace, timeout_s: float = 30.0) -> Client:
    from aotui.supervisor.interface.client import Client

    return Client(args.desktop, args.socket, timeout_s=timeout_s)


def _call(args: argparse.Namespace, method: str, timeout_s: float = 30.0, **params: Any) -> Any:
    """One call of ``snapshot|exec|status|ping``: on ``rpc.sock``, else the control socket.

    The JSON-RPC client imports no pyzmq, msgpack or message classes (a third of a call's
    start-up); a desktop without ``rpc.sock`` is asked through the ZeroMQ client, as before.
    """
    if getattr(args, "fleet", None):  # --fleet ADDRESS: the desktop of that name on Ray
        from aotui.supervisor.fleet.cli import on_fleet

        return on_fleet(args, "call", method, timeout_s=timeout_s, **params)
    paths = DesktopPaths.for_desktop(args.desktop, args.socket)
    try:
        return rpc_client.call(paths, method, params, timeout_s=timeout_s)
    except rpc_client.RpcUnreachable:
        pass
    with _client(args, timeout_s=timeout_s) as client:
        return client.call(method, **params)


def _emit(args: argparse.Namespace, result: Any, text: str | None = None) -> None:
    """A command's result: JSON with ``--json``, else ``text`` (``--quiet`` prints it too)."""
    if args.json:
        print(json.dumps(result, indent=2, ensure_ascii=False, default=_plain))
    elif text is not None:
        print(text)


def _plain(value: Any) -> Any:
    """What JSON cannot say itself: a declared record as its wire form, else its text."""
    return value.wire() if isinstance(value, Declared) else str(value)


def _done(args: argparse.Namespace, result: Any, text: str) -> None:
    """A command's word that it worked: JSON with ``--json``; ``--quiet`` leaves it to the exit
    status (``aotui exec -q …`` prints nothing when it worked)."""
    if args.json or not args.quiet:
        _emit(args, result, text)


def _note(args: argparse.Namespace, text: str) -> None:
    """A note for the person at the terminal, on stderr; ``--quiet`` drops it."""
    if not args.quiet:
        print(text, file=sys.stderr)


def _reader(args: argparse.Namespace) -> dict[str, Any]:
    """The session (``--session``/``AOTUI_SESSION``) and lease token a pull or execute speaks for.

    Without a session, the lease owner's (proved by ``--token``/``AOTUI_LEASE_TOKEN``) is used.
    """
    session = args.session or os.environ.get("AOTUI_SESSION") or None
    token = args.token or os.environ.get("AOTUI_LEASE_TOKEN") or None
    return {key: value for key, value in (("session", session), ("token", token)) if value}


#: What starts the last line of ``aotui snapshot --include-meta``'s output (docs/interfaces.md).
META_PREFIX = "[meta] "


def _no_session(args: argparse.Namespace) -> str:
    """The note for a pull or execute without a session (its acquire hint names the desktop)."""
    acquire = DesktopPaths.for_desktop(args.desktop, args.socket).command("acquire NAME")
    return (
        "aotui: no session: refs (list[i]) resolve against the desktop's latest snapshot, "
        "whoever pulled it; set AOTUI_SESSION=NAME (or --session NAME), or hold the lease "
        f"({acquire})"
    )


# --- commands -----------------------------------------------------------------------------------


def cmd_up(args: argparse.Namespace) -> int:
    """Start a desktop (foreground, or detached and wait until it answers)."""
    from aotui.supervisor.workers.zygote_start import prestart

    # The config's, the store's and the server's ~300 modules allocate much and free little:
    # the collections they would trigger cost ~8 ms of every start. Frozen once imported below.
    gc.disable()
    if not args.detach:
        # The zygote first, before the config's, the store's and the server's imports: its own
        # start (~150 ms of CPU) overlaps them; it gets its log when the launcher takes it over.
        # A check below that refuses exits us, and the zygote with us.
        prestart()
    from aotui.supervisor.config import load_config

    # --desktop wins over the config file's ``desktop =``, which wins over "default".
    config = load_config(args.config, desktop=args.desktop, store=args.store)
    paths = DesktopPaths.for_desktop(config.desktop, args.socket)
    running = _running(config.desktop, args.socket, args.fresh)
    if running is not None:  # `up` twice is `up` once: the desktop the user asked for runs
        gc.enable()
        running = {**running, "root": str(paths.root), "already_running": True}
        text = (
            f"desktop {config.desktop!r} is already running (pid {running['pid']}) at {paths.root}"
        )
        _emit(args, running, text)
        return 0
    _check_data_home(config.desktop)
    _claim_store(args, config.desktop, config.durability, config.store)
    if args.detach:
        gc.enable()  # this process only waits for its child now
        return _up_detached(args, config.desktop, paths)
    import asyncio
    import logging

    try:
        from aotui.supervisor.interface.serve import serve_desktop
    finally:
        gc.freeze()  # they live as long as we do: later collections need not walk them either
        gc.enable()

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    print(f"desktop {config.desktop!r} serving at {paths.root} (pid {os.getpid()})", flush=True)
    asyncio.run(serve_desktop(config, paths))
    return 0


def _running(desktop: str, socket: str | None, fresh: bool) -> dict[str, Any] | None:
    """The ping of ``desktop`` when it already answers, else ``None``; with ``--fresh``, a
    running desktop is refused (its store cannot be set aside under it)."""
    from aotui.supervisor.interface.client import Client, DesktopUnavailable

    with Client(desktop, socket) as probe:
        try:
            running: dict[str, Any] = probe.ping(timeout_s=1.0)
        except DesktopUnavailable:
            return None
    if fresh:
        down = DesktopPaths.for_desktop(desktop, socket).command("down")
        raise AotuiError(
            ErrorCode.E_INVALID_CMD,
            f"desktop {desktop!r} is already running (pid {running['pid']}); --fresh starts "
            f"a stopped desktop empty: stop it first (`{down}`)",
        )
    return running


def _claim_store(args: argparse.Namespace, desktop: str, durability: str, where: str) -> None:
    """Refuse a store another supervisor holds or that is damaged; in the foreground, lock it.

    ``where``: the config's ``store`` (``""``: the SQLite file; else a PostgreSQL URL).
    """
    from aotui.supervisor.store.base import is_server_store, open_store
    from aotui.supervisor.store.faults import StoreHeld
    from aotui.supervisor.store.lock import StoreLock, lock_holder
    from aotui.supervisor.store.repair import aside, is_damaged
    from aotui.supervisor.store.store import identity_path

    stored = store_path(desktop)
    holder = lock_holder(stored)
    if holder is not None:  # also when that supervisor is frozen and answers nothing
        raise StoreHeld(
            stored, holder, DesktopPaths.for_desktop(desktop, args.socket).command("down")
        )
    if not args.detach:
        # Held for this process's life; the detached parent leaves it to its child.
        StoreLock.acquire(stored)
    if args.fresh and is_server_store(where):
        raise AotuiError(
            ErrorCode.E_INVALID_CMD,
            "--fresh sets a SQLite store aside; a desktop stored in PostgreSQL starts empty "
            "under a new --desktop name",
        )
    if args.fresh and (stored.exists() or identity_path(stored).exists()):
        # Only a damaged store is named `.corrupt-…`: a healthy one was replaced on request.
        kept = aside(stored, why="corrupt" if is_damaged(stored) else "replaced")
        _note(args, f"kept the old store of {desktop!r} as {kept}")
    if durability != "off":
        open_store(where, desktop, stored).close()  # a damaged store fails here, clearly


def _up_detached(args: argparse.Namespace, desktop: str, paths: DesktopPaths) -> int:
    """Start the supervisor in a session of its own and wait until it answers."""
    from pathlib import Path

    from aotui.supervisor.interface.launch import DesktopExited, DesktopLaunch, spawn_desktop
    from aotui.supervisor.store.faults import StoreHeld
    from aotui.supervisor.store.lock import lock_holder

    paths.create()
    launch = DesktopLaunch(
        desktop,
        Path(args.config) if args.config else None,
        Path(args.socket) if args.socket else None,
        log=paths.log,
        new_session=True,
        store=args.store,
    )
    try:
        info = spawn_desktop(launch).wait_answering()
    except DesktopExited:
        holder = lock_holder(store_path(desktop))
        if holder is not None:  # another `up` won the race for this desktop
            raise StoreHeld(store_path(desktop), holder, paths.command("down")) from None
        raise
    _done(args, info, f"desktop {desktop!r} up (pid {info['pid']}) at {paths.root}")
    return 0


def _check_data_home(desktop: str) -> None:
    """Refuse to start, in one line, when the desktop's store and logs cannot be written."""
    home = data_home()
    for folder in (store_path(desktop).parent, app_log_dir(desktop)):
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            writable = os.access(folder, os.W_OK | os.X_OK)
        except OSError as exc:
            raise AotuiError(
                ErrorCode.E_IO,
                f"cannot create {folder} ({exc.strerror}); set AOTUI_HOME to a directory "
                f"you can write (now {home})",
            ) from None
        if not writable:
            raise AotuiError(
                ErrorCode.E_IO,
                f"cannot write in {folder}; set AOTUI_HOME to a directory you can write "
                f"(now {home})",
            )


def cmd_desktops(args: argparse.Namespace) -> int:
    """The stored desktops: created, last used, size, running or not; ``--repair NAME``."""
    from aotui.supervisor.store.repair import describe_store, repair, stored_desktops
    from aotui.supervisor.store.store import identity_path

    named = args.repair or args.delete
    if args.repair and args.delete:
        raise AotuiError(ErrorCode.E_INVALID_CMD, "give --repair NAME or --delete NAME, not both")
    if named:
        DesktopPaths.for_desktop(named)  # a name that is no desktop's name is refused, as by up
    if named and not (store_path(named).is_file() or identity_path(store_path(named)).exists()):
        # Repairing a name that was never a desktop must not create one.
        raise AotuiError(
            ErrorCode.E_NOT_FOUND,
            f"there is no desktop named {named!r} in {data_home() / 'desktops'}; "
            "`aotui desktops` lists them",
        )
    if args.delete:
        return _delete_desktop(args, args.delete)
    if args.repair:
        result = repair(store_path(args.repair))
        text = (
            f"repaired {result['path']}: salvaged {result['salvaged_apps']} app(s) "
            f"({result['quarantined_apps']} quarantined: damaged rows kept as they are); "
            f"the damaged file is kept as {result['kept'] or '(there was no file)'} "
            f"({result['detail']})"
            if result["repaired"]
            else f"{result['path']}: {result['detail']}"
        )
        _emit(args, result, text)
        return 0
    from aotui.supervisor.interface.client import Client

    folder = data_home() / "desktops"
    rows = [describe_store(path) for path in stored_desktops(folder)]
    for row in rows:
        with Client(row["desktop"], args.socket) as probe:
            try:
                row["running_pid"] = probe.ping(timeout_s=0.5)["pid"]
            except AotuiError:
                row["running_pid"] = None
    _emit(args, rows, format_desktops(folder, rows))
    return 0


def _delete_desktop(args: argparse.Namespace, name: str) -> int:
    """``aotui desktops --delete NAME``: the stored desktop's files, gone for good."""
    from aotui.supervisor.store.faults import StoreHeld
    from aotui.supervisor.store.repair import delete

    try:
        removed = delete(store_path(name))
    except StoreHeld as exc:  # exit 75: the lock of its store says a supervisor serves it
        down = DesktopPaths.for_desktop(name, args.socket).command("down")
        holder = f"pid {exc.pid}" if exc.pid else "another process"
        raise AotuiError(
            ErrorCode.E_LOCKED,
            f"desktop {name!r} is running ({holder} serves it); stop it first (`{down}`), "
            "then delete it",
            exc.data,
        ) from None
    result = {"desktop": name, "deleted": True, "removed": removed}
    _done(args, result, f"deleted desktop {name!r} ({', '.join(removed)})")
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    """An app's captured stdout/stderr (rotated files, oldest first); ``-f`` follows."""
    from aotui.supervisor.workers.app_logs import log_files

    folder = app_log_dir(args.desktop)
    app = args.app
    if not app.startswith("app_"):
        try:
            with _client(args, timeout_s=5) as client:
                app = next(r["app"] for r in client.status()["apps"] if r["id"] == app)
        except (AotuiError, StopIteration):
            raise AotuiError(
                ErrorCode.E_NOT_FOUND, f"no app {args.app!r} on a running desktop; use its app_N"
            ) from None
    files = log_files(folder, app)
    if not files and not args.follow:
        raise AotuiError(ErrorCode.E_NOT_FOUND, f"no output captured for {app} in {folder}")
    text = "".join(path.read_text(errors="replace") for path in files)
    if args.json and not args.follow:
        _emit(args, text.splitlines())  # a JSON array of lines, `[]` for an empty log
        return 0
    _write_log(args, text)
    if not args.follow:
        return 0
    current = folder / f"{app}.log"
    position = current.stat().st_size if current.exists() else 0
    while True:  # until Ctrl-C
        time.sleep(0.2)
        if not current.exists():
            continue
        size = current.stat().st_size
        if size < position:  # rotated
            position = 0
        if size > position:
            with open(current, "rb") as handle:
                handle.seek(position)
                _write_log(args, handle.read().decode(errors="replace"))
            position = size


def _write_log(args: argparse.Namespace, text: str) -> None:
    """Log text as it is, or with ``--json`` (following) one JSON string per line."""
    if args.json:
        text = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in text.splitlines())
    sys.stdout.write(text)
    sys.stdout.flush()


def cmd_down(args: argparse.Namespace) -> int:
    """Stop the desktop and wait until its process is gone."""
    with _client(args, timeout_s=10) as client:
        pid = client.ping()["pid"]
        client.shutdown()
    _wait_exit(pid, 15.0)
    _done(args, {"pid": pid, "stopped": True}, f"desktop stopped (pid {pid})")
    return 0


def _wait_exit(pid: int, timeout_s: float) -> None:
    """Return once process ``pid`` has exited (its pidfd reads ready then), or after the timeout."""
    import select

    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        select.select([pidfd], [], [], timeout_s)
    finally:
        os.close(pidfd)


def cmd_install(args: argparse.Namespace) -> int:
    """Install an app directory; prints the new app_N."""
    with _client(args) as client:
        result = client.install(args.app_dir, args.command_id)
    _emit(args, result, result["app"])
    return 0


def cmd_uninstall(args: argparse.Namespace) -> int:
    """Stop and remove an app."""
    with _client(args) as client:
        result = client.uninstall(args.app, args.command_id)
    _done(args, result, f"uninstalled {result['app']} ({result['id']})")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    """Supervisor and per-app status table."""
    status = _call(args, "status")
    _emit(args, status, format_status(status))
    return 0


def cmd_snapshot(args: argparse.Namespace) -> int:
    """Print the desktop snapshot."""
    reader = _reader(args)
    flagged = [n for n, p in api.METHODS["snapshot"].offered(api.Face.CLI).items() if p.flag]
    chosen = {name: getattr(args, name) for name in flagged if name != "include_meta"}
    pull = {name: value for name, value in chosen.items() if value is not None}
    if args.plain and args.include_meta:
        raise AotuiError(
            ErrorCode.E_INVALID_CMD,
            "--plain prints the Markdown alone; leave out --include-meta, or use it without "
            "--plain (the meta is then stdout's last line) or with --json",
        )
    result = _call(args, "snapshot", include_meta=bool(args.include_meta), **pull, **reader)
    if args.json:
        _emit(args, result)
        return 0
    sys.stdout.write(result["markdown"])
    if "meta" in result:  # the last line of stdout: `[meta] ` and the meta as one line of JSON
        text = json.dumps(result["meta"], ensure_ascii=False, separators=(",", ":"))
        end = "" if result["markdown"].endswith("\n") else "\n"
        sys.stdout.write(f"{end}{META_PREFIX}{text}\n")
    sys.stdout.flush()
    _note(args, f"[snapshot {result['snapshot_id']}]")
    if not reader:
        _note(args, _no_session(args))
    return 0


def cmd_exec(args: argparse.Namespace) -> int:
    """Run an agent message from the argument or stdin (refs resolve in the caller's session)."""
    text = args.text if args.text is not None else sys.stdin.read()
    reader = _reader(args)
    if not reader and "execute" in text and not args.snapshot_id:
        _note(args, _no_session(args))  # only operations take refs
    ids = {"command_id": args.command_id} if args.command_id else {}
    result = _call(args, "exec", text=text, snapshot_id=args.snapshot_id, **reader, **ids)
    waiting = result.get("waiting")
    if waiting is not None:  # seed 004: asked, not run; exit 0 (nothing failed)
        _emit(args, result, f"waiting for the user: {waiting['message']}")
        return 0
    _done(args, result, f"ok: {result['ran']} command(s) ran")
    return 0


def cmd_confirm(args: argparse.Namespace) -> int:
    """The user's answer to an operation waiting for them; without an id, list those waiting."""
    with _client(args) as client:
        if args.id is None:
            pending = client.call("confirmations")["pending"]
            lines = [
                f"{p['confirmation']}  {p['operation']} on {p['app']} ({p['app_name']}, "
                f"{p['view']})  args {json.dumps(p['args'], ensure_ascii=False)}  [{p['reason']}]"
                for p in pending
            ]
            _emit(args, pending, "\n".join(lines) or "nothing waits for confirmation")
            return 0
        result = client.call("confirm", confirmation=args.id, deny=args.deny, reason=args.reason)
    text = (
        f"{args.id} refused: it did not run"
        if args.deny
        else f"{args.id} confirmed: it ran, result {json.dumps(result['result'], default=str)}"
    )
    _emit(args, result, text)
    return 0


def cmd_ping(args: argparse.Namespace) -> int:
    """Whether the desktop answers: its pid (on ``rpc.sock``, as status asks)."""
    result = _call(args, "ping", timeout_s=5.0)
    _done(args, result, f"desktop {result['desktop']!r} answers (pid {result['pid']})")
    return 0


def cmd_capabilities(args: argparse.Namespace) -> int:
    """Version, JSON-RPC methods, formats and limits of the desktop; ``--rpc-path``: the path
    of its ``rpc.sock`` alone, as the desktop says it (``socat - UNIX-CONNECT:$(…)``)."""
    result = _call(args, "get_capabilities")
    if args.rpc_path:
        _emit(args, {"socket": result["socket"]}, result["socket"])
        return 0
    text = (
        f"aotui {result['version']} (protocol {result['protocol']}), desktop "
        f"{result['desktop']!r}\nJSON-RPC 2.0 at {result['socket']}: "
        f"{', '.join(result['methods'])}\nformats: {', '.join(result['formats'])}"
    )
    _emit(args, result, text)
    return 0


def cmd_wait(args: argparse.Namespace) -> int:
    """Block until a signal, a text in an app's views, or quiet; exit 75 on timeout."""
    condition = {
        "reason": args.reason,
        "text": args.text,
        "app": args.app,
        "view": args.view,
        "gone": args.gone or None,
        "quiet_ms": args.quiet_ms,
    }
    with _client(args) as client:
        if args.confirmation is not None:  # the outcome of an operation the user was asked for
            budget_s = args.timeout_ms / 1000 + 5
            outcome = client.call(
                "confirmation",
                timeout_s=budget_s,
                confirmation=args.confirmation,
                timeout_ms=args.timeout_ms,
            )
            text = f"{args.confirmation} ran: {json.dumps(outcome['result'], default=str)}"
            _emit(args, outcome, text)
            return 0
        result = client.wait(timeout_ms=args.timeout_ms, **condition)
    _done(args, result, f"ok: {result['until']} after {result['waited_ms']} ms")
    return 0


def cmd_acquire(args: argparse.Namespace) -> int:
    """Take the input lease for OWNER (or renew it with --token); prints its token."""
    token = _reader(args).get("token")
    with _client(args) as client:
        result = client.call("acquire", owner=args.owner, token=token, kind="cli")
    if args.quiet and not args.json:
        print(result["token"])  # export AOTUI_LEASE_TOKEN=$(aotui acquire me --quiet)
        return 0
    _emit(
        args,
        result,
        f"lease held by {result['owner']!r} for {result['lease_s']} s (renew by acquiring "
        f"again with the token)\nexport AOTUI_LEASE_TOKEN={result['token']}",
    )
    return 0


def cmd_release(args: argparse.Namespace) -> int:
    """Give the input lease up (presenting --token or AOTUI_LEASE_TOKEN)."""
    token = _reader(args).get("token")
    if token is None:
        raise AotuiError(
            ErrorCode.E_INVALID_CMD,
            "release needs the lease's token: --token TOKEN or AOTUI_LEASE_TOKEN",
        )
    with _client(args) as client:
        client.call("release", token=token)
    _done(args, {"released": True}, "lease released")
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    """Serve the desktop as an MCP server: stdio, or streamable HTTP with --http HOST:PORT."""
    import anyio  # the MCP SDK is imported here only: other commands do not pay for it

    from aotui.supervisor.interface.mcp_server import serve_stdio

    address = None
    if args.http is not None:
        from aotui.supervisor.interface.mcp_http import parse_address, serve_http

        address = parse_address(args.http)
    # Served whether or not the desktop is up: a client shown only "Connection closed" learns
    # nothing, so each tool call answers E_UNAVAILABLE with how to start it until it answers.
    connect = None
    if args.fleet:  # a fleet's desktop by name (Ray imported here only); it starts on demand
        if address is not None:
            raise AotuiError(ErrorCode.E_INVALID_CMD, "aotui mcp --fleet serves stdio only")
        import functools

        from aotui.supervisor.fleet.client import FleetClient

        fleet = FleetClient(args.fleet)
        connect = functools.partial(fleet.desktop, args.desktop)
    elif args.start:
        _start_for_mcp(args)
    per_operation = args.tools == "per-operation"
    if address is None:
        anyio.run(serve_stdio, args.desktop, args.socket, per_operation, connect)
        return 0
    anyio.run(serve_http, args.desktop, args.socket, address, per_operation)
    return 0


def _start_for_mcp(args: argparse.Namespace) -> None:
    """``mcp --start``: ``aotui up --detach`` for a desktop not up, its output on stderr (stdout
    is the MCP stream); a failure is reported there and the server serves all the same."""
    import subprocess

    from aotui.supervisor.paths import is_listening

    paths = DesktopPaths.for_desktop(args.desktop, args.socket)
    if is_listening(paths.control_file):
        return
    words = ["up", "--detach", "--desktop", args.desktop]
    if args.socket is not None:
        words += ["--socket", args.socket]
    command = [sys.executable, "-m", "aotui.supervisor", *words]
    started = subprocess.run(command, stdin=subprocess.DEVNULL, stdout=sys.stderr, check=False)
    if started.returncode != 0:
        failed = f"aotui mcp: starting the desktop failed (exit {started.returncode})"
        print(failed, file=sys.stderr)


def cmd_export(args: argparse.Namespace) -> int:
    """Print the desktop's state as JSON (``aotui export NAME > state.json``)."""
    args.desktop = args.name or args.desktop
    with _client(args) as client:
        state = client.export_state()
    print(json.dumps(state, indent=2, ensure_ascii=False))
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    """Give a desktop's apps the data of an exported state (``aotui import NAME < state.json``)."""
    args.desktop = args.name or args.desktop
    if args.file in (None, "-"):
        text = sys.stdin.read()
    else:
        with open(args.file) as handle:
            text = handle.read()
    try:
        state = json.loads(text)
    except ValueError as exc:
        raise AotuiError(
            ErrorCode.E_INVALID_CMD, f"the state to import is not JSON ({exc}); use aotui export"
        ) from None
    except RecursionError:  # json's parser recurses: ~1000 levels of [ are its limit
        from aotui.supervisor.interface.plain_data import DATA_MAX_DEPTH

        raise AotuiError(
            ErrorCode.E_INVALID_CMD,
            f"the state to import is nested too deep to read; an app's data nests at most "
            f"{DATA_MAX_DEPTH} levels. Use aotui export",
        ) from None
    with _client(args) as client:
        client.lease_token = _reader(args).get("token")
        result = client.import_state(state)
    skipped = (
        f"; skipped (not installed): {', '.join(result['skipped'])}" if result["skipped"] else ""
    )
    _done(args, result, f"imported {', '.join(result['imported']) or 'nothing'}{skipped}")
    return 0


def cmd_say(args: argparse.Namespace) -> int:
    """Post a user message into the chat app."""
    with _client(args) as client:
        result = client.say(args.text, args.app, args.command_id)
    _done(args, {"result": result}, "sent")
    return 0


def cmd_watch(args: argparse.Namespace) -> int:
    """Live inspector: redraw the snapshot on every signal, with the status table."""
    from aotui.supervisor.interface.watch import watch

    with _client(args) as client:
        return watch(client, args.max_updates, args.json)


def cmd_doctor(args: argparse.Namespace) -> int:
    """Which confinement layers this machine and user can apply (no desktop needed)."""
    import platform
    import subprocess

    probe = subprocess.run(
        [sys.executable, "-m", "aotui.sandbox.probe"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if probe.returncode != 0:
        raise AotuiError(ErrorCode.E_INTERNAL, f"the sandbox probe failed: {probe.stderr.strip()}")
    report = json.loads(probe.stdout)
    # Which Python runs aotui (and its workers) decides what a dropped uid can read.
    report["interpreter"] = {
        "path": sys.executable,
        "version": platform.python_version(),
        "implementation": platform.python_implementation(),
    }
    _emit(args, report, format_doctor(report))
    return 0 if report["this_user"].get("strict_ready") else 1


def cmd_demo(args: argparse.Namespace) -> int:
    """A scripted agent session on the bundled apps."""
    from aotui.supervisor.interface.demo import run_demo

    return run_demo(json_output=args.json)


COMMANDS: dict[str, tuple[Callable[[argparse.Namespace], int], str]] = {
    "up": (cmd_up, "start a desktop"),
    "down": (cmd_down, "stop the desktop and every worker"),
    "install": (cmd_install, "install an app directory (prints app_N)"),
    "uninstall": (cmd_uninstall, "stop and remove an app"),
    "status": (cmd_status, "supervisor and app status table"),
    "desktops": (
        cmd_desktops,
        "stored desktops (created, last used, size); --repair, --delete NAME",
    ),
    "snapshot": (cmd_snapshot, "print the Markdown desktop the agent reads"),
    "exec": (cmd_exec, "run <context> commands (argument or stdin)"),
    "say": (cmd_say, "post a user message into the chat app"),
    "confirm": (cmd_confirm, "answer an operation that waits for the user (no ID: list them)"),
    "ping": (cmd_ping, "whether the desktop answers (exit 69 if not)"),
    "capabilities": (cmd_capabilities, "version, JSON-RPC methods, formats, limits"),
    "wait": (cmd_wait, "block until a signal, a text in an app, or quiet (exit 75: timeout)"),
    "acquire": (cmd_acquire, "take the input lease (prints its token)"),
    "release": (cmd_release, "give the input lease up"),
    "export": (cmd_export, "print the desktop's state as JSON"),
    "import": (cmd_import, "give the apps the data of an exported state (stdin or --file)"),
    "mcp": (cmd_mcp, "serve the desktop as an MCP server (stdio, or --http with a bearer token)"),
    "watch": (cmd_watch, "live snapshot, signals and log"),
    "logs": (cmd_logs, "an app's captured stdout/stderr; -f follows"),
    "demo": (cmd_demo, "a scripted agent session on the bundled apps"),
    "doctor": (cmd_doctor, "which sandbox layers this machine and user can apply"),
}


def cmd_chaos(args: argparse.Namespace) -> int:
    """Resilience testing: ``aotui chaos run|app|check|report`` (supervisor/chaos/cli.py)."""
    from aotui.supervisor.chaos.cli import main as chaos_main

    return chaos_main(args)


COMMANDS["chaos"] = (cmd_chaos, "resilience testing: chaos run|app|check|report")


def cmd_browser(args: argparse.Namespace) -> int:
    """AWI-TTY: ``aotui browser navigate|send-key|snapshot|…`` (supervisor/interface/awi_cli.py)."""
    from aotui.supervisor.interface import awi_cli

    parser = _Parser(prog="aotui browser", formatter_class=_Formatter)
    awi_cli.add_arguments(parser)
    inner = parser.parse_args(list(args.browser_args))
    inner.plain = (inner.plain or args.plain) and not args.json
    paths = DesktopPaths.for_desktop(args.desktop, args.socket)
    return awi_cli.run(inner, str(paths.rpc_file))


COMMANDS["browser"] = (
    cmd_browser,
    "drive the Browser's active tab (AWI-TTY): navigate, send-key, snapshot, get-title, …",
)


def cmd_fleet(args: argparse.Namespace) -> int:
    """Desktops across machines, on Ray: ``aotui fleet up|status|drain`` (docs/fleet.md)."""
    from aotui.supervisor.fleet.cli import main as fleet_main

    return fleet_main(args)


COMMANDS["fleet"] = (cmd_fleet, "desktops across machines, on Ray: fleet up|status|drain")


class _Parser(argparse.ArgumentParser):
    """argparse with CONTRACT §7's exit code for usage errors (64, not argparse's 2)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(ErrorCode.E_INVALID_CMD.exit_code, f"{self.prog}: error: {message}\n")


def _terminal_width() -> int:
    """``shutil.get_terminal_size().columns``, as argparse asks it, without importing shutil."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    stdout = sys.__stdout__  # the process's own, as shutil asks it
    if columns <= 0 and stdout is not None:
        try:
            columns = os.get_terminal_size(stdout.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


class _Formatter(argparse.HelpFormatter):
    """argparse's help layout at the terminal's width, found without importing shutil (~2 ms)."""

    def __init__(
        self,
        prog: str,
        indent_increment: int = 2,
        max_help_position: int = 24,
        width: int | None = None,
    ) -> None:
        # argparse's own default: the terminal's columns less two.
        width = _terminal_width() - 2 if width is None else width
        super().__init__(prog, indent_increment, max_help_position, width)


class _TopFormatter(argparse.RawDescriptionHelpFormatter, _Formatter):
    """The top parser's: its description and epilog keep their own lines."""


class _Unbuilt:
    """Stands for the parser of a command this run does not take: its arguments go nowhere."""

    def add_argument(self, *args: Any, **kwargs: Any) -> None:
        """Nothing to build: this command is not the one being run."""


class _Listed(_Unbuilt):
    """A command the top parser only lists (its help line, a choice its errors name); should
    argparse take it after all, its parser is built then."""

    def __init__(self, name: str) -> None:
        self.name = name

    def parse_known_args(self, args: Sequence[str], namespace: Any = None) -> Any:
        """What the command's own parser makes of ``args``."""
        return _command_parsers(build_parser(self.name))[self.name].parse_known_args(
            args, namespace
        )


def _command_parser(listed: str | None = None, **kwargs: Any) -> Any:
    """The subparsers' parser class: a listed command's stand-in, or a :class:`_Parser`."""
    return _Listed(listed) if listed else _Parser(**kwargs)


def _command_parsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The command parsers of the top ``parser``, by command."""
    (commands,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(commands.choices)


def _common_options() -> _Parser:
    """The options every command takes (``--json``, ``--desktop``, ``--socket``, ...)."""
    common = _Parser(add_help=False, formatter_class=_Formatter)
    common.add_argument("--json", action="store_true", help="machine-readable output")
    common.add_argument(
        "--desktop",
        default=None,
        help="desktop name (default: the config's `desktop`, else default)",
    )
    common.add_argument(
        "--socket", default=None, help="runtime directory (default $AOTUI_SOCKET, XDG, /tmp)"
    )
    common.add_argument(
        "--session",
        default=None,
        help="the reader whose last snapshot refs resolve against (default $AOTUI_SESSION)",
    )
    common.add_argument(
        "--token", default=None, help="input-lease token to present (default $AOTUI_LEASE_TOKEN)"
    )
    common.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no notes on stderr and no 'ok' lines: results and errors only",
    )
    return common


def build_parser(command: str | None = None, listed: bool = False) -> argparse.ArgumentParser:
    """The argument parser of every command, or of ``command`` alone (the one being run).

    A command line whose first word is its command reaches no other subparser, and building all
    two dozen (argparse makes a help formatter for every argument) was ~7 ms of each call. With
    ``listed``, the other commands are only listed (their name and help: what ``aotui --help``
    and an unknown command's error print), not built: ``aotui --help`` took ~10 ms to build them.
    """
    common: _Parser | None = None  # built for the first command built
    parser = _Parser(
        prog="aotui",
        description="A text desktop for LLM agents: apps in sandboxed workers, one Markdown view.",
        epilog=EPILOG,
        formatter_class=_TopFormatter,
    )
    # A listed command costs its help line: no parser (argparse makes one, with translations
    # looked up on disk, for each), and no common options to copy when none is built.
    sub = parser.add_subparsers(
        dest="command",
        required=True,
        metavar="COMMAND",
        parser_class=_command_parser,  # type: ignore[call-overload]  # argparse only calls it
    )
    parsers: dict[str, argparse.ArgumentParser | _Unbuilt] = {}
    for name, (_, help_text) in COMMANDS.items():
        if command == name or (command is None and not listed):
            common = common or _common_options()
            parsers[name] = sub.add_parser(
                name,
                parents=[common],
                help=help_text,
                description=help_text,
                formatter_class=_Formatter,
            )
        else:
            if listed:  # a line of the top parser's help, and a choice its errors name
                sub.add_parser(name, help=help_text, listed=name)
            parsers[name] = _Unbuilt()
    parsers["up"].add_argument("--config", help="desktop TOML config (see configs/desktop.toml)")
    parsers["up"].add_argument("--detach", action="store_true", help="run in the background")
    parsers["up"].add_argument(
        "--fresh",
        action="store_true",
        help="start empty, keeping the old store beside the new one (<name>.db.replaced-<time>)",
    )
    parsers["up"].add_argument(
        "--store",
        metavar="URL",
        help="store the desktop in PostgreSQL (postgresql://…) instead of its SQLite file; "
        "the config's 'store' key otherwise",
    )
    parsers["desktops"].add_argument(
        "--repair", metavar="NAME", help="salvage a damaged store, keeping the damaged file"
    )
    parsers["desktops"].add_argument(
        "--delete", metavar="NAME", help="delete a stopped desktop's store for good"
    )
    parsers["install"].add_argument("app_dir", help="directory holding aoapp.json")
    parsers["uninstall"].add_argument("app", help="app_N or manifest id")
    parsers["snapshot"].add_argument(
        "--plain", action="store_true", help="stdout is the Markdown alone, nothing appended"
    )
    parsers["exec"].add_argument("text", nargs="?", help="agent message; stdin when omitted")
    parsers["logs"].add_argument("app", help="app_N (or manifest id, if the desktop runs)")
    parsers["logs"].add_argument("-f", "--follow", action="store_true", help="keep printing")
    parsers["confirm"].add_argument(
        "id", nargs="?", help="the confirmation (C1…); omitted: list pending"
    )
    parsers["acquire"].add_argument("owner", help=_declared("acquire", "owner").description)
    parsers["say"].add_argument("text", help=_declared("say", "text").description)
    # Each command's flags are its method's parameters, as protocol/api.py declares them.
    for method in api.METHODS.values():
        if method.cli_command:
            _add_flags(parsers[method.cli_command], method)
    for name in ("export", "import"):
        parsers[name].add_argument("name", nargs="?", help="the desktop (default: --desktop)")
    parsers["import"].add_argument("--file", help="the exported JSON (default: stdin)")
    parsers["mcp"].add_argument(
        "--http",
        metavar="ADDR",
        help="streamable HTTP on 127.0.0.1:PORT (0: a free port) or unix:PATH instead of stdio; "
        "every request needs 'Authorization: Bearer TOKEN', the token in the file named on stderr",
    )
    parsers["mcp"].add_argument(
        "--tools",
        choices=("fixed", "per-operation"),
        default="fixed",
        help="per-operation: also one tool per operation of the last snapshot",
    )
    parsers["mcp"].add_argument(
        "--start",
        action="store_true",
        help="start the desktop first if it is not up (as 'aotui up --detach' with the same "
        "--desktop and --socket); without it the server still serves and each tool answers "
        "E_UNAVAILABLE until the desktop is up",
    )
    parsers["capabilities"].add_argument(
        "--rpc-path", action="store_true", help="print only the path of the desktop's rpc.sock"
    )
    parsers["watch"].add_argument(
        "--max-updates", type=int, default=None, help="exit after this many redraws"
    )
    # The group's own parser is built when it runs (supervisor/chaos/cli.py), not for every command.
    parsers["chaos"].add_argument("chaos_args", nargs=argparse.REMAINDER, metavar="run|app|...")
    parsers["browser"].add_argument(
        "--plain", action="store_true", help="text only (a snapshot's lines, a title, a URL)"
    )
    parsers["fleet"].add_argument("fleet_args", nargs=argparse.REMAINDER, metavar="up|status|...")
    for name in ("snapshot", "exec", "status", "mcp"):
        parsers[name].add_argument(
            "--fleet", metavar="ADDRESS", help="the fleet on this Ray cluster (with --desktop NAME)"
        )
    parsers["browser"].add_argument(
        "browser_args", nargs=argparse.REMAINDER, metavar="navigate|send-key|snapshot|..."
    )
    return parser


def _declared(method: str, name: str) -> api.Param:
    """The declaration of parameter ``name`` of ``method``."""
    return api.METHODS[method].params.FIELDS[name]


def _add_flags(parser: argparse.ArgumentParser | _Unbuilt, method: api.Method) -> None:
    """A flag for each parameter of ``method`` the command line is offered, with its help."""
    for name, declared in method.offered(api.Face.CLI).items():
        if not declared.flag:
            continue
        options: dict[str, Any] = {"dest": name, "help": declared.description}
        choices = declared.enum
        if declared.kind == "bool":
            negated = declared.flag.startswith("--no-")
            options.update(action="store_const", const=not negated, default=None)
            if negated:
                options["help"] = f"do not {declared.description}"
        elif choices is not None:
            options["choices"] = [member.value for member in choices]
        elif declared.kind in ("int", "float"):
            options["type"] = int if declared.kind == "int" else float
            options["metavar"] = "N"
        if declared.default is not None and declared.kind != "bool" and choices is None:
            options["default"] = declared.default
            options["help"] += f" (default {declared.default})"
        parser.add_argument(declared.flag, **options)


#: Exit status of a command whose reader went away (``aotui status | head -1``), as for SIGPIPE
#: (signal 13 on Linux; the signal module is not imported for it).
EXIT_BROKEN_PIPE = 128 + 13


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``aotui`` script; returns the exit code."""
    if argv is None:
        # The process's own entry (the script, `python -m`): what is loaded by now lives until
        # exit, and the collector walking it again, at start-up and at exit, frees nothing and
        # cost a call ~9 ms. Callers that pass argv keep their collector as it was.
        gc.freeze()
    try:
        try:
            return _dispatch(argv)
        finally:
            sys.stdout.flush()  # a closed pipe fails here (after --help too), not at exit
    except BrokenPipeError:
        # The reader went away (`aotui status | head -1`): stop quietly, and keep the
        # interpreter's last flush of stdout from failing again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE


def _dispatch(argv: Sequence[str] | None) -> int:
    words = sys.argv[1:] if argv is None else argv
    # The top parser has no option but -h: its first word not an option is the command argparse
    # takes (the rest are that command's). The others are only listed, for help and errors.
    named = next((word for word in words if not word.startswith("-")), None)
    command = named if named in COMMANDS else None
    args = build_parser(command, listed=True).parse_args(argv)
    if args.command != "up" and args.desktop is None:
        args.desktop = "default"
    handler = COMMANDS[args.command][0]
    try:
        return handler(args)
    except AotuiError as exc:  # no desktop (E_UNAVAILABLE) exits 69, as CONTRACT §7 says
        _report(args, exc)
        return exc.code.exit_code
    except KeyboardInterrupt:
        return 130


def _report(args: argparse.Namespace, exc: AotuiError) -> None:
    if getattr(args, "json", False):
        print(json.dumps({"error": exc.to_dict()}, ensure_ascii=False))
    else:
        print(f"aotui: {exc.code.value}: {exc.message}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
