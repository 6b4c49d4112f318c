"""Each app's filesystem view (sandbox/fsview.py), and the copy an unreadable app may need.

Real confined children (tests/confined.py), real desktops, real files: a grant under a directory
only root can search is reachable by its name, nothing else of the host is there, and the copy
made for an app its uid cannot read never follows what its author swaps in, never copies a
device node or a FIFO, stays within its bounds and runs off the supervisor's event loop.
"""

from __future__ import annotations

import os
import shutil
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from aotui.supervisor.workers.app_copy import COPY_LIMIT_ENTRIES, CopyRefused, copy_app
from tests.confined import APP, APP_UID, MODES, ROOT, make_tree, run_confined
from tests.conftest import TEST_APPS, RunningDesktop

pytestmark = pytest.mark.timeout(120)

ROOT_ONLY = pytest.mark.skipif(not ROOT, reason="unprivileged, there is no per-app uid")
#: A uid that owns nothing here (see test_newcomer_sandbox.py).
STRANGER = 64999


def _private(tmp_path: Path) -> Path:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    private.chmod(0o700)
    return private


@ROOT_ONLY
def test_a_grant_under_a_private_ancestor_is_reachable_by_its_own_name(tmp_path: Path) -> None:
    # fs:write:/root/data and grants below mktemp -d's 0700 directories: the app opens its
    # granted path by the name in its manifest.
    private = _private(tmp_path)
    data = private / "deeper" / "data"
    data.mkdir(parents=True)
    os.chown(data, APP_UID, APP_UID)
    notes = private / "notes.txt"
    notes.write_text("read me\n")
    app = private / "app"
    app.mkdir()
    policy = {
        "app": APP, "app_dir": str(app), "uid": APP_UID,
        "fs_write": [str(data)], "fs_read": [str(notes)],
    }  # fmt: skip

    def attempt() -> list[str]:
        (data / "out.txt").write_text("written")
        return [(data / "out.txt").read_text(), notes.read_text(), str(os.getcwd())]

    outcome = run_confined("root", policy, attempt)
    assert outcome.value == ["written", "read me\n", str(app)], outcome
    assert (data / "out.txt").read_text() == "written"


@pytest.mark.parametrize("mode", MODES)
def test_nothing_else_of_the_host_is_in_the_view(mode: str) -> None:
    with make_tree(mode) as tree:

        def attempt() -> dict[str, str]:
            found = {}
            for path in ("/etc/passwd", "/home", "/proc/self/status", "/run", str(tree.secret)):
                try:
                    os.stat(path)
                    found[path] = "there"
                except OSError as exc:
                    found[path] = os.strerror(exc.errno or 0)
            return found

        outcome = run_confined(mode, tree.policy(mode), attempt)
    assert outcome.value is not None, outcome
    assert set(outcome.value.values()) == {"No such file or directory"}, outcome.value
    assert "mntns" in outcome.layers


def _tree(source: Path) -> None:
    (source / "sub").mkdir(parents=True)
    (source / "sub" / "ok.txt").write_text("the app's own")
    (source / "top.py").write_text("app = None\n")


def test_the_copy_keeps_symlinks_as_symlinks(tmp_path: Path) -> None:
    secret = _private(tmp_path) / "secret.txt"
    secret.write_text("root only")
    source = tmp_path / "app"
    _tree(source)
    (source / "link").symlink_to(secret)
    (source / "dirlink").symlink_to(secret.parent)
    copy = tmp_path / "copy"
    copy_app(source, copy, os.getuid(), os.getgid())
    assert (copy / "link").is_symlink()
    assert os.readlink(copy / "link") == str(secret)
    assert (copy / "dirlink").is_symlink()
    assert (copy / "sub" / "ok.txt").read_text() == "the app's own"
    assert stat.S_IMODE((copy / "top.py").stat().st_mode) == 0o400
    assert stat.S_IMODE((copy / "sub").stat().st_mode) == 0o500


def test_a_directory_swapped_for_a_symlink_during_the_copy_is_never_followed(
    tmp_path: Path,
) -> None:
    # The app's author owns the directory and swaps sub/ for a symlink to a directory only
    # root may read, again and again, while root copies the app.
    secrets_dir = _private(tmp_path) / "vault"
    secrets_dir.mkdir()
    (secrets_dir / "ok.txt").write_text("SECRET")
    source = tmp_path / "app"
    _tree(source)
    for index in range(40):
        (source / "sub" / f"f{index}.txt").write_text("x")
    stop = threading.Event()

    def swap() -> None:
        while not stop.is_set():
            os.rename(source / "sub", source / "sub.real")
            (source / "sub").symlink_to(secrets_dir)
            time.sleep(0.0005)  # long enough for a path walk to step through it
            os.unlink(source / "sub")
            os.rename(source / "sub.real", source / "sub")

    swapper = threading.Thread(target=swap, daemon=True)
    swapper.start()
    leaked, copied = [], 0
    try:
        for attempt in range(80):
            copy = tmp_path / f"copy{attempt}"
            try:
                copy_app(source, copy, os.getuid(), os.getgid())
                copied += 1
            except (CopyRefused, OSError):
                pass  # refused halfway: what it made is the caller's to remove
            for found in copy.rglob("*") if copy.exists() else []:
                if found.is_file() and not found.is_symlink() and found.read_text() == "SECRET":
                    leaked.append(found)
            for directory in [copy, *copy.rglob("*")] if copy.exists() else []:
                if directory.is_dir() and not directory.is_symlink():
                    directory.chmod(0o700)
            shutil.rmtree(copy, ignore_errors=True)
    finally:
        stop.set()
        swapper.join(timeout=10)
    assert not leaked, f"the copy followed a swapped-in symlink: {leaked}"
    assert copied, "no attempt completed: the test proves nothing"


@ROOT_ONLY
def test_device_nodes_and_fifos_are_never_copied(tmp_path: Path) -> None:
    source = tmp_path / "app"
    _tree(source)
    os.mknod(source / "zero", 0o666 | stat.S_IFCHR, os.makedev(1, 5))
    with pytest.raises(CopyRefused, match="a device node, which is never copied"):
        copy_app(source, tmp_path / "copy", APP_UID, APP_UID)
    assert not (tmp_path / "copy" / "zero").exists()
    os.unlink(source / "zero")
    os.mkfifo(source / "pipe")  # opening it to read would block the copy forever
    with pytest.raises(CopyRefused, match="a FIFO or a socket"):
        copy_app(source, tmp_path / "copy2", APP_UID, APP_UID)


def test_the_copy_is_bounded_in_entries(tmp_path: Path) -> None:
    source = tmp_path / "app"
    source.mkdir()
    for index in range(COPY_LIMIT_ENTRIES + 1):
        (source / f"{index}").touch()
    with pytest.raises(CopyRefused, match="more than 10,000 files"):
        copy_app(source, tmp_path / "copy", os.getuid(), os.getgid())


@ROOT_ONLY
def test_a_large_copy_runs_off_the_event_loop(
    start_desktop: Callable[..., RunningDesktop], tmp_path: Path
) -> None:
    # An app of 9,000 files its uid cannot read, and which no idmapped mount makes readable,
    # is copied when it opens; meanwhile another client's requests keep being answered.
    app_dir = Path(shutil.copytree(TEST_APPS / "echo", _private(tmp_path) / "echo"))
    many = app_dir / "many"
    many.mkdir()
    for index in range(9000):
        (many / f"{index}.txt").write_text("x" * 4096)
    for path in [app_dir, *app_dir.iterdir()]:
        path.chmod(0o700 if path.is_dir() else 0o600)
    os.chown(app_dir / "aoapp.json", STRANGER, STRANGER)
    desktop = start_desktop([str(app_dir)])
    watcher = desktop.new_client()
    gaps: list[float] = []
    done = threading.Event()

    def opener() -> None:
        try:
            desktop.client.execute("<context>open --application app_0</context>")
        finally:
            done.set()

    thread = threading.Thread(target=opener)
    began = last = time.monotonic()
    thread.start()
    while not done.is_set():
        watcher.ping(timeout_s=10)
        now = time.monotonic()
        gaps.append(now - last)
        last = now
    thread.join()
    took = time.monotonic() - began
    text = desktop.client.snapshot()
    assert "it runs from a private copy" in text, text
    print(f"open took {took:.2f} s; {len(gaps)} pings, the longest {max(gaps):.3f} s")
    # On the loop, the copy held every client for its whole length (4 s for 50,000 files).
    assert max(gaps) < took / 3, f"a request waited {max(gaps):.2f} s of the open's {took:.2f} s"
