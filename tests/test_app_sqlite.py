"""Apps can keep a SQLite database in their TMPDIR and in a granted directory, as root or not."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3  # imported here: a child dropped to nobody cannot reach a Python under /root
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from aotui.supervisor.workers.app_tmp import forget_base, make_base
from tests.confined import MODES, make_tree, mode_uid, run_confined
from tests.conftest import TEST_APPS, RunningDesktop

Start = Callable[..., RunningDesktop]
JOURNALS = ["DELETE", "WAL"]


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """A directory any uid can reach and write (a per-app uid is allocated at run time)."""
    base = Path(tempfile.mkdtemp(prefix="aotui-sqlite-", dir="/tmp"))
    try:
        base.chmod(0o755)
        data = base / "data"
        data.mkdir()
        data.chmod(0o777)
        yield data
    finally:
        shutil.rmtree(base, ignore_errors=True)


def granted_app(tmp_path: Path, data: Path) -> Path:
    """The sqlitey app with ``fs:write`` on ``data``."""
    copy = Path(shutil.copytree(TEST_APPS / "sqlitey", tmp_path / "sqlitey"))
    manifest = json.loads((copy / "aoapp.json").read_text())
    manifest["permissions"] = [f"fs:write:{data}"]
    (copy / "aoapp.json").write_text(json.dumps(manifest))
    return copy


def run(desktop: RunningDesktop, command: str) -> dict[str, object]:
    context = f'<context app_id="app_0" view_id="view_0">{command}</context>'
    return desktop.client.execute(context)["results"][0]  # type: ignore[no-any-return]


@pytest.mark.timeout(90)
def test_sqlite_in_the_private_tmpdir_and_a_granted_directory(
    start_desktop: Start, tmp_path: Path, data_dir: Path
) -> None:
    desktop = start_desktop([str(granted_app(tmp_path, data_dir))])
    desktop.client.execute("<context>open --application app_0</context>")
    granted = json.dumps(str(data_dir))
    for journal in JOURNALS:
        used = run(desktop, f"execute in_tmp --journal {journal}")
        assert used.get("rows") == 1, used
        used = run(desktop, f"execute in_dir --path {granted} --journal {journal}")
        assert used.get("rows") == 1, used
        assert (data_dir / f"app-{journal.lower()}.db").exists()


def _sqlite_both_places(data: str) -> dict[str, object]:
    """In the confined child: a database in TMPDIR and one in the write grant, each journal."""
    rows = {}
    for place in (tempfile.gettempdir(), data):
        for journal in JOURNALS:
            path = os.path.join(place, f"db-{journal}.db")
            with sqlite3.connect(path) as db:
                db.execute(f"PRAGMA journal_mode={journal}")
                db.execute("CREATE TABLE t (x)")
                db.execute("INSERT INTO t VALUES (1)")
            with sqlite3.connect(path) as db:
                rows[path] = db.execute("SELECT count(*) FROM t").fetchone()[0]
            db.close()
    return rows


@pytest.mark.parametrize("mode", MODES)
def test_sqlite_in_a_confined_worker(mode: str, tmp_path: Path) -> None:
    with make_tree(mode) as tree:
        # Like <runtime>/tmp: the supervisor's own, 0700 (root's, where a per-app uid is used).
        runtime_tmp = tree.base / "runtime-tmp"
        runtime_tmp.mkdir(mode=0o700)
        if mode != "root":
            os.chown(runtime_tmp, mode_uid(mode), mode_uid(mode))
        base = make_base(runtime_tmp) if mode == "root" else runtime_tmp
        try:
            private = base / "app_0-test"
            private.mkdir(mode=0o700)
            os.chown(private, mode_uid(mode), mode_uid(mode))
            policy = tree.policy(mode, tmp_dir=str(private))
            outcome = run_confined(mode, policy, lambda: _sqlite_both_places(str(tree.data)))
        finally:
            forget_base(runtime_tmp)
        assert outcome.error is None, outcome
        assert sorted(outcome.value.values()) == [1, 1, 1, 1], outcome.value
        if mode == "root":
            assert not base.exists()  # removed with the record


@pytest.mark.skipif(os.geteuid() != 0, reason="per-app uids (and their temp base) need root")
@pytest.mark.timeout(90)
def test_the_temp_base_is_removed_at_stop_and_after_a_kill(start_desktop: Start) -> None:
    desktop = start_desktop(["sqlitey"])
    record = desktop.runtime / desktop.name / "tmp" / "apps-tmp"
    first = Path(record.read_text())
    assert first.parent == Path(tempfile.gettempdir())
    assert oct(first.stat().st_mode & 0o777) == "0o711"
    os.kill(desktop.process.pid, signal.SIGKILL)
    desktop.process.wait(timeout=10)
    assert first.exists()  # a killed desktop could not clean up
    again = start_desktop(["sqlitey"], name=desktop.name)
    assert not first.exists()  # the next start did
    second = Path(record.read_text())
    assert second.exists()
    again.client.shutdown()
    again.process.wait(timeout=30)
    assert not second.exists()
