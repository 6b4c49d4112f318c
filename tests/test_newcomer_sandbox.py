"""End to end: apps run from private directories, import everything, and get a private temp dir.

As root a worker drops to a per-app uid; these tests put the Python installation, the checkout
or the app where that uid cannot search (a 0700 directory) and check the app still starts,
imports the standard library (C extensions too) and installed packages, reads its own files, and
that each app has a temporary directory of its own that is gone once the app closes.
"""

from __future__ import annotations

import importlib
import importlib.resources
import json
import os
import shutil
import stat
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.sandbox import probe as probe_module
from aotui.supervisor.interface.client import Client
from aotui.supervisor.interface.launch import DesktopLaunch
from aotui.supervisor.workers.uids import UID_BASE, UidAllocator
from tests.confined import APP, APP_UID, run_confined
from tests.conftest import (
    BUNDLED_APPS,
    TEST_APPS,
    RunningDesktop,
    run_desktop,
    stop_desktops,
    write_config,
)

Start = Callable[..., RunningDesktop]
ROOT = os.geteuid() == 0


def run(desktop: RunningDesktop, app_id: str, command: str) -> object:
    """Execute one operation on ``app_id``'s root view and return its result."""
    context = f'<context app_id="{app_id}" view_id="view_0">{command}</context>'
    result = desktop.client.execute(context)
    return result["results"][0]  # type: ignore[index]


def private_copy(tmp_path: Path, app: str) -> Path:
    """``app`` copied into a fresh 0700 directory only its owner can search."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    private.chmod(0o700)
    target = shutil.copytree(TEST_APPS / app, private / "nested" / app)
    return Path(target)


def test_the_app_imports_the_standard_library_and_installed_packages(start_desktop: Start) -> None:
    desktop = start_desktop(["importer"])
    desktop.client.execute("<context>open --application app_0</context>")
    result = run(desktop, "app_0", "execute imports")
    assert result == {
        "failed": {},
        "sqlite": 42,
        "paris": "1:00:00",
        "relative": "data next to the app",
    }
    assert "Imports: ok" in desktop.client.snapshot()
    assert "hello from helper; data next to the app" in desktop.client.snapshot()


def test_an_app_in_a_private_directory_opens(start_desktop: Start, tmp_path: Path) -> None:
    app_dir = private_copy(tmp_path, "importer")
    assert not stat.S_IMODE((tmp_path / "private").stat().st_mode) & 0o077
    desktop = start_desktop([str(app_dir)])
    desktop.client.execute("<context>open --application app_0</context>")
    result = run(desktop, "app_0", "execute imports")
    assert result["failed"] == {}  # type: ignore[index]
    assert "hello from helper; data next to the app" in desktop.client.snapshot()


#: A uid that owns nothing on the machine: a file of its own that the per-app uid cannot read
#: and an idmapped mount of the directory's owner does not make readable.
STRANGER = 64999


def as_with_umask_077(app_dir: Path) -> None:
    """Modes as a checkout made with umask 077 has them: directories 0700, files 0600."""
    for path in [app_dir, *app_dir.rglob("*")]:
        path.chmod(0o700 if path.is_dir() else 0o600)


def test_an_app_whose_own_files_are_unreadable_reads_them_through_an_idmapped_mount(
    start_desktop: Start, tmp_path: Path
) -> None:
    if not ROOT:
        pytest.skip("unprivileged, a worker keeps the user's uid, which reads the user's files")
    app_dir = private_copy(tmp_path, "importer")  # as a checkout made with umask 077 would be
    as_with_umask_077(app_dir)
    desktop = start_desktop([str(app_dir)])
    desktop.client.execute("<context>open --application app_0</context>")
    result = run(desktop, "app_0", "execute imports")
    assert result["failed"] == {}  # type: ignore[index]
    text = desktop.client.snapshot()
    assert "hello from helper; data next to the app" in text
    assert f"cannot read {app_dir} (mode drwx------); the app reads its files through" in text
    assert "an idmapped mount (uid 0 shown as" in text
    assert not list((desktop.runtime / desktop.name / "tmp").glob("app_0-*-app"))  # no copy
    assert stat.S_IMODE((app_dir / "helper.py").stat().st_mode) == 0o600  # nothing changed


def test_an_app_an_idmapped_mount_cannot_open_runs_from_a_private_copy(
    start_desktop: Start, tmp_path: Path
) -> None:
    if not ROOT:
        pytest.skip("unprivileged, a worker keeps the user's uid, which reads the user's files")
    app_dir = private_copy(tmp_path, "importer")
    as_with_umask_077(app_dir)
    os.chown(app_dir / "helper.py", STRANGER, STRANGER)  # neither root's nor the uid's
    desktop = start_desktop([str(app_dir)])
    desktop.client.execute("<context>open --application app_0</context>")
    result = run(desktop, "app_0", "execute imports")
    assert result["failed"] == {}  # type: ignore[index]
    text = desktop.client.snapshot()
    assert "hello from helper; data next to the app" in text
    assert f"cannot read {app_dir} (mode drwx------); it runs from a private copy" in text
    (copy,) = (desktop.runtime / desktop.name / "tmp").glob("app_0-*-app")
    assert copy.stat().st_uid == psutil.Process(desktop.app_pid("app_0")).uids().real
    assert stat.S_IMODE((copy / "helper.py").stat().st_mode) == 0o400
    desktop.client.execute("<context>close --application app_0</context>")
    assert not copy.exists()
    assert (app_dir / "helper.py").exists()  # the original is left as it was


def sparse_big_file(app_dir: Path) -> None:
    """A 100 MiB file that takes no disk space: the app is too big to copy."""
    with open(app_dir / "big.bin", "wb") as big:
        big.truncate(100 * 2**20)


def test_an_unreadable_app_too_big_to_copy_is_refused_with_the_cause(
    start_desktop: Start, tmp_path: Path
) -> None:
    if not ROOT:
        pytest.skip("unprivileged, a worker keeps the user's uid, which reads the user's files")
    app_dir = private_copy(tmp_path, "importer")
    (app_dir / "helper.py").chmod(0o600)
    os.chown(app_dir / "helper.py", STRANGER, STRANGER)
    sparse_big_file(app_dir)
    desktop = start_desktop([str(app_dir)])
    with pytest.raises(AotuiError) as refused:
        desktop.client.execute("<context>open --application app_0</context>")
    assert refused.value.code is ErrorCode.E_PERMISSION
    message = refused.value.message
    assert f"which cannot read {app_dir / 'helper.py'} (mode -rw-------)" in message
    assert "cannot be copied for it: it is larger than 64 MiB" in message
    assert f"chmod -R o+rX {app_dir}" in message


def test_a_system_app_that_cannot_start_logs_the_real_cause(
    start_desktop: Start, tmp_path: Path
) -> None:
    if not ROOT:
        pytest.skip("unprivileged, a worker keeps the user's uid, which reads the user's files")
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    chat = Path(shutil.copytree(BUNDLED_APPS / "system" / "chat", private / "chat"))
    (chat / "app.py").chmod(0o600)
    os.chown(chat / "app.py", STRANGER, STRANGER)
    sparse_big_file(chat)
    desktop = start_desktop([str(chat)])
    logs = desktop.client.snapshot()
    assert f"which cannot read {chat / 'app.py'} (mode -rw-------)" in logs, logs


def test_a_system_app_in_a_private_directory_starts_with_the_desktop(
    start_desktop: Start, tmp_path: Path
) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    chat = shutil.copytree(BUNDLED_APPS / "system" / "chat", private / "chat")
    desktop = start_desktop([str(chat)])
    text = desktop.client.snapshot()
    assert '<application id="app_0" name="ChatWithUser">' in text, text
    assert "Could not open" not in text


# --- item 7: a private temporary directory per app ----------------------------------------------


def second_importer(tmp_path: Path) -> Path:
    """A copy of the importer app under another manifest id, so both can be installed."""
    copy = Path(shutil.copytree(TEST_APPS / "importer", tmp_path / "importer2"))
    manifest = json.loads((copy / "aoapp.json").read_text())
    manifest.update(id="test.importer2", name="Importer2")
    (copy / "aoapp.json").write_text(json.dumps(manifest))
    return copy


def test_each_app_has_a_private_temp_dir_removed_on_close(
    start_desktop: Start, tmp_path: Path
) -> None:
    desktop = start_desktop(["importer", str(second_importer(tmp_path))])
    client = desktop.client
    client.execute("<context>open --application app_0; open --application app_1</context>")
    first = run(desktop, "app_0", "execute temp")
    second = run(desktop, "app_1", "execute temp")
    for used in (first, second):
        assert used["text"] == "scratch"  # type: ignore[index]
        assert used["tmpdir"] == used["gettempdir"]  # type: ignore[index]
        made = Path(used["made"])  # type: ignore[index]
        assert made.parent == Path(used["real"])  # type: ignore[index]
        assert used["entries"] == [made.name]  # type: ignore[index]  # NamedTemporaryFile is gone
    mine, theirs = Path(first["real"]), Path(second["real"])  # type: ignore[index]
    assert mine != theirs
    runtime_tmp = desktop.runtime / desktop.name / "tmp"
    # As root, in a base per-app uids can search by name, recorded there (workers/app_tmp.py).
    base = Path((runtime_tmp / "apps-tmp").read_text()) if ROOT else runtime_tmp
    assert mine.parent == theirs.parent == base
    if ROOT:  # owned by the app's own uid, so DAC keeps the other app out too
        assert mine.stat().st_uid == psutil.Process(desktop.app_pid("app_0")).uids().real
    # The other app's directory is not even in this app's filesystem view.
    assert run(desktop, "app_0", f"execute peek --path {json.dumps(str(theirs))}") == (
        "refused: FileNotFoundError"
    )
    own = json.dumps(first["gettempdir"])  # type: ignore[index]
    assert str(run(desktop, "app_0", f"execute peek --path {own}")).startswith("listed")
    client.execute("<context>close --application app_0</context>")
    assert not mine.exists()
    assert theirs.exists()


def test_stale_temp_dirs_are_removed_when_the_desktop_starts(
    start_desktop: Start, tmp_path: Path
) -> None:
    stale = tmp_path / "run" / "t0" / "tmp" / "app_0-dead"
    stale.mkdir(parents=True)
    for directory in (tmp_path / "run", tmp_path / "run" / "t0"):
        directory.chmod(0o700)
    (stale / "left.txt").write_text("from a desktop that was killed")
    start_desktop(["importer"])
    assert not stale.exists()
    assert (tmp_path / "run" / "t0" / "tmp").is_dir()


# --- item 9: per-app uids unique on the machine --------------------------------------------------


@pytest.fixture
def default_desktops(tmp_path: Path) -> Iterator[Callable[[str], Client]]:
    """Start desktops all named ``default``, each with its own AOTUI_HOME and runtime dir."""
    started: list[RunningDesktop] = []

    def start(label: str) -> Client:
        root = tmp_path / f"{label}-files"
        root.mkdir()
        launch = DesktopLaunch(
            config=write_config(root / "desktop.toml", [str(TEST_APPS / "echo")]),
            socket=tmp_path / label,  # short: worker sockets live below it
            env={**os.environ, "AOTUI_HOME": str(root / "home")},
            log=root / "supervisor.out",
        )
        started.append(run_desktop(launch))
        return started[-1].client

    yield start
    stop_desktops(started)


def worker_uid(client: Client, app: str) -> int:
    """The real uid of ``app``'s worker."""
    (pid,) = [row["pid"] for row in client.status()["apps"] if row["app"] == app]
    return psutil.Process(pid).uids().real  # type: ignore[no-any-return]


def test_two_default_desktops_run_their_apps_as_different_uids(
    default_desktops: Callable[[str], Client],
) -> None:
    if not ROOT:
        pytest.skip("unprivileged, every worker keeps the user's uid (in a user namespace)")
    first, second = default_desktops("a"), default_desktops("b")
    for client in (first, second):
        client.execute("<context>open --application app_0</context>")
    mine, theirs = worker_uid(first, "app_0"), worker_uid(second, "app_0")
    assert mine != theirs
    assert min(mine, theirs) >= UID_BASE
    # Closing gives the uid back; reopening takes the same one (its key still hashes there).
    first.execute("<context>close --application app_0</context>")
    assert mine not in {lease.uid for lease in UidAllocator().leases()}
    first.execute("<context>open --application app_0</context>")
    assert worker_uid(first, "app_0") == mine


# --- the mechanism alone, in a really confined child ---------------------------------------------

#: Imported afresh in the confined child (forgotten first if this process has them).
FRESH_MODULES = ("sqlite3", "zoneinfo", "email.mime.text", "xml.dom.minidom", "mailbox", "curses")


def private_app(tmp_path: Path) -> tuple[Path, Path]:
    """An app directory below a 0700 directory, and a secret beside it that nothing grants."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    app = private / "app"
    app.mkdir()
    (app / "data.txt").write_text("app data\n")
    secret = private / "secret.txt"
    secret.write_text("not granted\n")
    return app, secret


def test_the_view_carries_imports_and_the_app_dir_by_name_across_the_uid_drop(
    tmp_path: Path,
) -> None:
    if not ROOT:
        pytest.skip("unprivileged, there is no uid drop: the user reads its own trees by name")
    app, secret = private_app(tmp_path)

    def attempt() -> dict[str, object]:
        for name in FRESH_MODULES:
            for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
                del sys.modules[loaded]  # so the import reads the files again, as the app uid
            importlib.import_module(name)
        import sqlite3

        try:
            Path(app, "..", secret.name).read_text()
            escaped = "read"
        except OSError as exc:
            escaped = type(exc).__name__
        # json was imported before the drop: its loader must find its files again.
        resource = importlib.resources.files("json").joinpath("__init__.py").read_text()
        return {
            "resources": "JSONDecoder" in resource,
            "via": os.path.dirname(os.path.dirname(sqlite3.__file__ or "")),
            "sqlite": sqlite3.connect(":memory:").execute("select 6 * 7").fetchone()[0],
            "data": Path(app, "data.txt").read_text(),
            "by_name": os.access(app, os.R_OK),
            "escape": escaped,
        }

    outcome = run_confined("root", {"app": APP, "app_dir": str(app), "uid": APP_UID}, attempt)
    # Every tree keeps its own name, even below 0700 parents (pyenv in /root, tmp_path's).
    assert outcome.value is not None, outcome
    assert outcome.value.pop("via") == os.path.dirname(os.__file__)
    assert outcome.value == {
        "resources": True,
        "sqlite": 42,
        "data": "app data\n",
        "by_name": True,  # the app directory by its own name, whatever its parents' modes…
        "escape": "FileNotFoundError",  # …and what lies beside it is not in the view at all
    }, outcome
    assert {"uid-drop", "landlock", "mntns"} <= set(outcome.layers)


def test_the_probe_names_a_granted_tree_a_per_app_uid_cannot_list(tmp_path: Path) -> None:
    if not ROOT:
        pytest.skip("unprivileged, there is no per-app uid whose reach the probe could check")
    app, _secret = private_app(tmp_path)
    app.chmod(0o700)  # its own mode, which the view does not get around
    policy = {"app": APP, "app_dir": str(app), "uid": APP_UID}
    outcome = run_confined("root", policy, lambda: probe_module._what_stops_apps([str(app)]))
    assert outcome.value == [f"{app} (Permission denied)"], outcome


def test_the_probe_does_not_warn_about_the_interpreter_s_trees() -> None:
    # A Python under /root (pyenv) used to warn here: its parents are no obstacle any more.
    report = probe_module.probe()
    assert "warning" not in report["this_user"], report["this_user"]["warning"]
