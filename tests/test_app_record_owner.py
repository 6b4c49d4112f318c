"""One owner per app record: only ``supervisor/desktop/app_record.py`` writes an AppRecord's fields.

Other modules call its named methods (``attach``, ``restarting``, ``closed``…). The check reads
the supervisor's source: an assignment (plain, augmented or in a tuple) to one of the record's
fields on anything but ``self`` outside that module fails, naming the file and line.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from aotui.supervisor.desktop.app_record import AppRecord, AppStatus
from aotui.supervisor.manifest import load_manifest
from aotui.supervisor.store.state import AppEntry
from aotui.supervisor.workers.exits import ExitReason

SUPERVISOR = Path(__file__).resolve().parent.parent / "supervisor"
OWNER = SUPERVISOR / "desktop" / "app_record.py"
TEST_APPS = Path(__file__).resolve().parent / "apps"

#: The record's state: what only its own methods may change.
FIELDS = {f.name for f in dataclasses.fields(AppRecord) if f.name not in ("app_id", "manifest")} - {
    "on_transition",
    "log_entries",
}


def _targets(node: ast.stmt) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        return list(node.targets)
    if isinstance(node, ast.AugAssign | ast.AnnAssign):
        return [node.target]
    return []


def _flatten(target: ast.expr) -> list[ast.expr]:
    if isinstance(target, ast.Tuple | ast.List):
        return [leaf for element in target.elts for leaf in _flatten(element)]
    return [target]


def writes_outside_owner(root: Path) -> list[str]:
    """``file:line field`` of each assignment to a record field outside the owner module."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if path == OWNER:
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in (n for n in ast.walk(tree) if isinstance(n, ast.stmt)):
            for target in (leaf for t in _targets(node) for leaf in _flatten(t)):
                if (
                    isinstance(target, ast.Attribute)
                    and target.attr in FIELDS
                    and not (isinstance(target.value, ast.Name) and target.value.id == "self")
                ):
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno} {target.attr}")
    return found


@pytest.mark.timeout(30)
def test_only_the_owner_writes_app_record_fields() -> None:
    assert {"status", "worker", "saved_state", "restarts", "last_exit", "views"} <= FIELDS
    assert writes_outside_owner(SUPERVISOR) == []


@pytest.mark.timeout(30)
def test_the_check_sees_a_write_from_another_module(tmp_path: Path) -> None:
    module = tmp_path / "pkg" / "elsewhere.py"
    module.parent.mkdir()
    module.write_text("def f(app):\n    app.restarts += 1\n    app.worker, x = None, 1\n")
    assert writes_outside_owner(tmp_path / "pkg") == [
        "pkg/elsewhere.py:2 restarts",
        "pkg/elsewhere.py:3 worker",
    ]


@pytest.mark.timeout(30)
def test_the_record_methods_make_each_change() -> None:
    app = AppRecord("app_1", load_manifest(TEST_APPS / "blinder"))
    app.restore(
        AppEntry("app_1", "x", "/x", "failed", ["root"], ["child"], {"root": "view_3"}, {"a": 1}, 2)
    )
    assert (app.status, app.saved_state, app.restore_views) == (
        AppStatus.FAILED,
        {"a": 1},
        ["root"],
    )
    assert (app.restarts, app.views.ids, app.views.hidden) == (2, {"root": "view_3"}, {"child"})
    app.blame(ExitReason.TIMEOUT)
    app.blame(ExitReason.MEMORY_LIMIT)  # the first reason stands…
    assert app.kill_reason == "timeout"
    app.blame(ExitReason.LAUNCHER_EXITED, overrule=True)  # …unless the zygote died
    assert app.kill_reason == "launcher exited"
    app.forget_state()
    assert (app.saved_state, app.restore_views) == (None, [])
    app.transition(AppStatus.STARTING)
    app.transition(AppStatus.RUNNING)
    app.restarting(["root"])
    assert (app.status, app.restarts, app.restore_views) == (AppStatus.RESTARTING, 3, ["root"])
    app.start_failed("start timeout (300 ms)")
    assert (app.status, app.last_exit) == (AppStatus.FAILED, "start timeout (300 ms)")
