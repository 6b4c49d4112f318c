"""What a manifest may ask of the desktop: limits within its ceilings, ``system`` only for its own.

A third-party manifest is untrusted: ``pids: 1000000000`` lifted the task cgroup and
``RLIMIT_NPROC`` above ``pid_max``, ``memory_mb: 1000000000`` asked for a petabyte, ``2**64``
passed install and failed at open with ``E_INTERNAL``, and ``"system": true`` made an app that
could be neither closed nor uninstalled. Unit tests of the rules, then the same refusals from a
real desktop's install (``tests/apps/usurper``) and restore.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.supervisor.config import load_config
from aotui.supervisor.manifest import BUNDLED_APPS_DIR, LimitCeilings, load_manifest
from tests.conftest import TEST_APPS, RunningDesktop, run_desktop, stop_desktop, write_config

Start = Callable[..., RunningDesktop]


def _app(tmp_path: Path, name: str = "app", **fields: Any) -> Path:
    app = tmp_path / name
    app.mkdir(exist_ok=True)
    (app / "app.py").write_text("")
    raw = {"id": "test.some", "name": "Some", "version": "1", "entry": "app.py", **fields}
    (app / "aoapp.json").write_text(json.dumps(raw))
    return app


def _refused(app: Path, **kwargs: Any) -> AotuiError:
    with pytest.raises(AotuiError) as refused:
        load_manifest(app, **kwargs)
    assert refused.value.code is ErrorCode.E_INVALID_CMD
    return refused.value


# --- limits ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("limit", "value", "most"),
    [
        ("pids", 10**9, "at most 4096"),
        ("pids", 4097, "at most 4096"),
        ("memory_mb", 10**9, "at most "),
        ("memory_mb", 10**30, "a 31-digit number"),
        ("memory_mb", 2**64, "at most "),
        ("cpu_percent", 10**6, "at most "),
        ("open_files", 10**9, "at most "),
        ("file_size_mb", 2**64, "at most 65536"),
    ],
)
def test_absurd_limits_are_refused_naming_the_field_and_the_maximum(
    tmp_path: Path, limit: str, value: int, most: str
) -> None:
    error = _refused(_app(tmp_path, limits={limit: value}))
    assert error.data["field"] == f"limits.{limit}"
    assert f"field 'limits.{limit}'" in error.message
    assert most in error.message
    assert "allowed here" in error.message


@pytest.mark.parametrize("value", [1e9, 64.0, 1.5, True, "64", None, [64], -1, 0])
def test_limits_that_are_not_positive_integers_are_refused(tmp_path: Path, value: object) -> None:
    # JSON's 1e9 is a float, true a bool: neither is an integer, whatever Python says of True.
    error = _refused(_app(tmp_path, limits={"pids": value}))
    assert error.data["field"] == "limits.pids"
    assert "must be a positive integer" in error.message


@pytest.mark.parametrize("value", [True, 1.5, "2", -1, 65, 10**9, None])
def test_view_in_flight_must_be_a_small_whole_number(tmp_path: Path, value: object) -> None:
    error = _refused(_app(tmp_path, view_in_flight=value))
    assert error.data["field"] == "view_in_flight"
    assert "must be a whole number from 1 to 64" in error.message
    assert load_manifest(_app(tmp_path, "two", view_in_flight=2)).view_in_flight == 2
    assert load_manifest(_app(tmp_path, "none")).view_in_flight == 0


def test_the_ceilings_follow_the_machine_and_the_config(tmp_path: Path) -> None:
    highest = LimitCeilings().on_this_machine()
    memory_mb = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") >> 20
    assert highest["memory_mb"][0] == min(65536, memory_mb)
    assert highest["cpu_percent"][0] == min(6400, 100 * (os.cpu_count() or 1))
    assert highest["pids"][0] <= int(Path("/proc/sys/kernel/pid_max").read_text())
    at_most = {name: most for name, (most, _why) in highest.items()}
    assert load_manifest(_app(tmp_path, limits=at_most)).limits == at_most  # the ceiling is in
    # Above the machine: refused naming the machine, whatever the config allows.
    plenty = LimitCeilings(memory_mb=1 << 40, cpu_percent=1 << 20)
    for limit, why in (("memory_mb", "memory"), ("cpu_percent", "per CPU core")):
        app = _app(tmp_path, limits={limit: plenty.on_this_machine()[limit][0] + 1})
        error = _refused(app, ceilings=plenty)
        assert why in error.message
    # Below it: the config's max_limits decide, and say so.
    error = _refused(_app(tmp_path, limits={"pids": 65}), ceilings=LimitCeilings(pids=64))
    assert "at most 64 is allowed here (max_limits.pids of the desktop config)" in error.message


def test_the_config_sets_the_ceilings_and_its_defaults_stay_under_them(tmp_path: Path) -> None:
    path = tmp_path / "desktop.toml"
    path.write_text("[max_limits]\npids = 64\nmemory_mb = 1024\n")
    config = load_config(path)
    assert config.max_limits == LimitCeilings(pids=64, memory_mb=1024)
    assert load_config().max_limits == LimitCeilings()
    for bad, says in (
        ("[max_limits]\nthreads = 4\n", "unknown limit 'threads'"),
        ("[max_limits]\npids = 0\n", "max_limits.pids must be positive"),
        ("[max_limits]\npids = 1.5\n", "'max_limits.pids' must be int"),
        ("[max_limits]\npids = 16\n", "'limits.pids' is 32, over its ceiling 16"),
        ("[limits]\nmemory_mb = 100000000\n", "'limits.memory_mb' is 100000000"),
    ):
        path.write_text(bad)
        with pytest.raises(AotuiError) as refused:
            load_config(path)
        assert refused.value.code is ErrorCode.E_INVALID_CMD
        assert says in refused.value.message


def test_the_shipped_config_documents_the_ceilings() -> None:
    shipped = Path(__file__).parent.parent / "configs" / "desktop.toml"
    assert load_config(shipped).max_limits == LimitCeilings()
    assert "[max_limits]" in shipped.read_text()


# --- "system": true -------------------------------------------------------------------------------


def test_only_the_desktops_own_apps_may_be_system_apps(tmp_path: Path) -> None:
    error = _refused(TEST_APPS / "usurper")
    assert error.data["field"] == "system"
    assert "field 'system'" in error.message
    assert "only the desktop's own apps" in error.message
    # Listed by the desktop's config, it may; so may the bundled system apps, wherever from.
    listed = load_manifest(TEST_APPS / "usurper", system_dirs={TEST_APPS / "usurper"})
    assert listed.system
    assert load_manifest(BUNDLED_APPS_DIR / "system" / "chat").system
    # A copy of a bundled system app elsewhere is somebody else's app.
    copy = shutil.copytree(BUNDLED_APPS_DIR / "system" / "chat", tmp_path / "system" / "chat")
    assert _refused(copy).data["field"] == "system"
    assert not load_manifest(_app(tmp_path, system=False)).system


@pytest.mark.timeout(60)
def test_a_third_party_system_app_is_refused_at_install(
    start_desktop: Start, tmp_path: Path
) -> None:
    desktop = start_desktop(["echo"])
    with pytest.raises(AotuiError) as refused:
        desktop.client.install(TEST_APPS / "usurper")
    assert refused.value.code is ErrorCode.E_INVALID_CMD
    assert "field 'system'" in refused.value.message
    assert [row["id"] for row in desktop.client.status()["apps"]] == ["test.echo"]
    # Absurd limits too: refused at install, not E_INTERNAL when the app is opened.
    for index, (limit, value) in enumerate((("pids", 10**9), ("memory_mb", 2**64))):
        hog = _app(tmp_path, f"hog{index}", limits={limit: value})
        with pytest.raises(AotuiError) as absurd:
            desktop.client.install(hog)
        assert absurd.value.code is ErrorCode.E_INVALID_CMD
        assert f"field 'limits.{limit}'" in absurd.value.message
    # Listed in the desktop's config, the same manifest is a system app of that desktop.
    own = start_desktop(["echo", "usurper"])
    rows = {row["id"]: row for row in own.client.status()["apps"]}
    assert rows["test.usurper"]["system"] is True


@pytest.mark.timeout(90)
def test_a_manifest_turned_system_after_install_is_not_restored(tmp_path: Path) -> None:
    from aotui.supervisor.interface.launch import DesktopLaunch

    app = Path(shutil.copytree(TEST_APPS / "echo", tmp_path / "turncoat"))
    config = write_config(tmp_path / "d.toml", [str(TEST_APPS / "echo")])
    launch = DesktopLaunch("turn", config, tmp_path / "run", log=tmp_path / "turn.out")
    first = run_desktop(launch)
    try:
        raw = json.loads((app / "aoapp.json").read_text())
        (app / "aoapp.json").write_text(json.dumps({**raw, "id": "test.turncoat", "name": "T"}))
        assert first.client.install(app)["app"] == "app_1"
    finally:
        stop_desktop(first)
    raw = json.loads((app / "aoapp.json").read_text())
    (app / "aoapp.json").write_text(json.dumps({**raw, "system": True}))
    again = run_desktop(launch)
    try:
        assert [row["app"] for row in again.client.status()["apps"]] == ["app_0"]
        logs = again.client.snapshot().split('name="System Logs">')[1].split("</view>")[0]
        assert "Could not restore app_1 (test.turncoat)" in logs
        assert "field 'system'" in logs
    finally:
        stop_desktop(again)
