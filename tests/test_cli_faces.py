"""What the `aotui` command says and does where a user meets it (issue 21): `up` twice, hints
that name the desktop, `snapshot --include-meta` on stdout, `--plain` and `--quiet`, deleting."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import TEST_APPS, RunningDesktop
from tests.test_cli import aotui, on

Start = Callable[..., RunningDesktop]


def up_config(tmp_path: Path) -> Path:
    config = tmp_path / "d.toml"
    config.write_text(f'apps = ["{TEST_APPS / "echo"}"]\n')
    return config


@pytest.mark.timeout(90)
def test_up_on_a_running_desktop_is_up_once(tmp_path: Path) -> None:
    config = up_config(tmp_path)
    where = ["--socket", str(tmp_path / "run"), "--desktop", "twice"]
    first = aotui("up", "--detach", "--config", str(config), *where)
    assert first.returncode == 0, first.stderr
    try:
        pid = json.loads(aotui("ping", "--json", *where).stdout)["pid"]
        for again in (["--detach"], []):  # detached or in the foreground: it runs already
            second = aotui("up", *again, "--config", str(config), *where)
            assert second.returncode == 0, second.stderr
            assert f"desktop 'twice' is already running (pid {pid})" in second.stdout
        said = json.loads(aotui("up", "--detach", "--json", *where).stdout)
        assert (said["pid"], said["desktop"], said["already_running"]) == (pid, "twice", True)
        # --fresh cannot set the store of a running desktop aside: refused, naming `down`.
        fresh = aotui("up", "--detach", "--fresh", *where)
        assert fresh.returncode == 64
        assert f"aotui down --desktop twice --socket {tmp_path / 'run'}" in fresh.stderr
        assert json.loads(aotui("ping", "--json", *where).stdout)["pid"] == pid
        # Frozen, it answers nothing but holds its store: refused, naming how to stop it there.
        os.kill(pid, signal.SIGSTOP)
        try:
            frozen = aotui("up", "--detach", *where)
        finally:
            os.kill(pid, signal.SIGCONT)
        assert frozen.returncode == 75, frozen.stderr
        assert f"stop it with `aotui down --desktop twice --socket {tmp_path / 'run'}`" in (
            frozen.stderr
        )
    finally:
        assert aotui("down", *where).returncode == 0


def test_hints_name_the_desktop_and_its_socket(tmp_path: Path) -> None:
    run = tmp_path / "run"
    # Through rpc.sock (status) and through the control socket's client (install).
    for command in (["status"], ["install", str(TEST_APPS / "echo")]):
        missing = aotui(*command, "--desktop", "work", "--socket", str(run))
        assert missing.returncode == 69
        assert f"start one with `aotui up --desktop work --socket {run}`" in missing.stderr
    default = aotui("status", "--socket", str(run))
    assert f"start one with `aotui up --socket {run}`" in default.stderr


@pytest.mark.timeout(90)
def test_include_meta_is_the_last_line_of_stdout(start_desktop: Start) -> None:
    desktop = start_desktop(["echo"])
    where = [*on(desktop), "--session", "s1"]
    pulled = aotui("snapshot", "--include-meta", *where)
    assert pulled.returncode == 0, pulled.stderr
    text, last = pulled.stdout.rstrip("\n").rsplit("\n", 1)
    assert text.startswith("<desktop>")
    assert text.endswith("</desktop>")
    assert last.startswith("[meta] ")
    meta = json.loads(last.removeprefix("[meta] "))
    assert meta["session"] == "s1"
    assert meta["snapshot_id"].startswith("T")
    assert pulled.stderr == f"[snapshot {meta['snapshot_id']}]\n"  # a note, not the meta
    refused = aotui("snapshot", "--include-meta", "--plain", *where)
    assert refused.returncode == 64
    assert "--plain prints the Markdown alone" in refused.stderr


@pytest.mark.timeout(90)
def test_plain_shapes_stdout_and_quiet_silences_notes(start_desktop: Start) -> None:
    desktop = start_desktop(["echo"])
    where = on(desktop)
    plain = aotui("snapshot", "--plain", *where)
    assert plain.stdout.startswith("<desktop>")
    assert plain.stdout.endswith("</desktop>\n")
    # --plain is stdout's format; the notes (the id, no session) are still on stderr.
    assert plain.stderr.startswith("[snapshot T")
    assert "no session" in plain.stderr
    assert f"(aotui acquire NAME --desktop {desktop.name} --socket {desktop.runtime})" in (
        plain.stderr
    )
    quiet = aotui("snapshot", "--quiet", *where)
    assert quiet.stderr == ""
    assert quiet.stdout.startswith("<desktop>")
    # --quiet drops notes and 'ok' lines, never a result: status still prints its table.
    table = aotui("status", "--quiet", *where)
    assert table.returncode == 0
    # The two calls may straddle a second of the uptime they show, and the supervisor's memory
    # and descriptors move between them (a 0.1 MB step of rss failed CI once).
    def steady(text: str) -> str:
        text = re.sub(r"uptime \d+s", "uptime Ns", text)
        return re.sub(r"rss [\d.]+[KMG]?  fds \d+", "rss N  fds N", text)

    assert steady(table.stdout) == steady(aotui("status", *where).stdout)
    assert "app_0" in table.stdout
    ran = aotui("exec", "-q", "<context>open --application app_0</context>", *where)
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, "", "")
    assert aotui("ping", "-q", *where).stdout == ""


@pytest.mark.timeout(120)
def test_desktops_delete_removes_a_stopped_desktop(tmp_path: Path, private_home: Path) -> None:
    config = up_config(tmp_path)
    where = ["--socket", str(tmp_path / "run"), "--desktop", "gone"]
    assert aotui("up", "--detach", "--config", str(config), *where).returncode == 0
    stored = private_home / "desktops"
    try:
        assert (stored / "gone.db").exists()
        held = aotui("desktops", "--delete", "gone", *where)
        assert held.returncode == 75  # E_LOCKED: its store's lock says it runs
        assert "desktop 'gone' is running" in held.stderr
        assert f"aotui down --desktop gone --socket {tmp_path / 'run'}" in held.stderr
        assert (stored / "gone.db").exists()
    finally:
        assert aotui("down", *where).returncode == 0
    deleted = aotui("desktops", "--delete", "gone", "--json", *where)
    assert deleted.returncode == 0, deleted.stderr
    assert json.loads(deleted.stdout)["deleted"] is True
    left = [p.name for p in stored.iterdir()]
    assert not [name for name in left if name.startswith("gone.")], left
    listed = json.loads(aotui("desktops", "--json", *where).stdout)
    assert "gone" not in [row["desktop"] for row in listed]
    again = aotui("desktops", "--delete", "gone")
    assert again.returncode == 65
    assert "there is no desktop named 'gone'" in again.stderr
    # A desktop deleted is a new one when started again.
    assert aotui("up", "--detach", "--config", str(config), *where).returncode == 0
    assert aotui("down", *where).returncode == 0


@pytest.mark.timeout(60)
@pytest.mark.skipif(shutil.which("socat") is None, reason="needs socat")
def test_rpc_path_is_what_socat_connects_to(start_desktop: Start) -> None:
    # docs/interfaces.md's socat example, with no XDG_RUNTIME_DIR to build the path from.
    desktop = start_desktop(["echo"])
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    env["AOTUI_SOCKET"] = str(desktop.runtime)
    where = ["--desktop", desktop.name]
    printed = subprocess.run(
        [sys.executable, "-m", "aotui.supervisor", "capabilities", "--rpc-path", *where],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
        check=False,
    )
    assert printed.returncode == 0, printed.stderr
    path = printed.stdout.strip()
    assert path == str(desktop.runtime / desktop.name / "rpc.sock")
    talked = subprocess.run(
        ["socat", "-t", "5", "-", f"UNIX-CONNECT:{path}"],
        input='{"jsonrpc":"2.0","id":1,"method":"ping"}\n',
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert json.loads(talked.stdout)["result"]["desktop"] == desktop.name


@pytest.mark.timeout(60)
def test_a_traceback_names_the_logs_command_of_its_desktop(start_desktop: Start) -> None:
    desktop = start_desktop(["brokenimport"], name="crashy")
    opened = aotui("exec", "<context>open --application app_0</context>", *on(desktop))
    assert opened.returncode == 70
    logs = aotui("snapshot", "--plain", *on(desktop)).stdout
    hint = f"the whole traceback: aotui logs app_0 --desktop crashy --socket {desktop.runtime}"
    assert hint in logs
