"""The snapshot's per-app parts are reused while an app is unchanged, and never shown stale."""

from __future__ import annotations

import pytest

from aotui.protocol.messages import ChildLink, FragmentUpdate, ViewFragment
from aotui.supervisor.desktop.app_record import AppRecord, AppStatus
from aotui.supervisor.desktop.snapshot import Snapshot, SnapshotBudget, build_snapshot
from aotui.supervisor.desktop.snapshot_cache import SnapshotCache
from aotui.supervisor.manifest import load_manifest
from tests.conftest import TEST_APPS

pytestmark = pytest.mark.timeout(30)


def _fragment(
    key: str, markdown: str, links: tuple[str, ...] = (), mounted: bool = True
) -> ViewFragment:
    parent = None if key == "root" else "root"
    children = [ChildLink(k, f"{k} label", "") for k in links]
    return ViewFragment(key, key.title(), parent, mounted, markdown, {}, {}, {}, [], children)


def _app(app_id: str, markdown: str) -> AppRecord:
    app = AppRecord(app_id, load_manifest(TEST_APPS / "lister"), status=AppStatus.RUNNING)
    app.views.apply(FragmentUpdate([_fragment("root", markdown, ("child",))]))
    return app


def _pull(
    apps: list[AppRecord], cache: SnapshotCache, budget: SnapshotBudget | None = None
) -> Snapshot:
    snap = build_snapshot(apps, [], budget, None, cache)
    fresh = build_snapshot(apps, [], budget)  # the same desktop assembled with nothing cached
    assert snap.markdown == fresh.markdown
    assert snap.refs == fresh.refs
    assert snap.blocks == fresh.blocks
    assert snap.over_budget == fresh.over_budget
    return snap


def test_an_unchanged_desktop_reuses_every_part() -> None:
    apps = [_app(f"app_{i}", f"- item {i}") for i in range(3)]
    cache = SnapshotCache()
    first = _pull(apps, cache)
    assert cache.built == 3
    again = _pull(apps, cache)
    assert cache.built == 3
    assert again.markdown == first.markdown


def test_a_changed_apps_part_is_built_again_and_only_its() -> None:
    apps = [_app(f"app_{i}", f"- item {i}") for i in range(3)]
    cache = SnapshotCache()
    _pull(apps, cache)
    apps[1].views.apply(FragmentUpdate([_fragment("root", "- item one, renamed", ("child",))]))
    snap = _pull(apps, cache)
    assert "- item one, renamed" in snap.markdown
    assert "- item 1\n" not in snap.markdown
    assert cache.built == 4  # app_1 alone
    assert snap.refs[("app_1", "view_0")] is apps[1].views.rendered["root"]  # refs resolve anew


@pytest.mark.parametrize("change", ["mount", "hide", "log", "status", "rename"])
def test_every_input_of_a_part_invalidates_it(change: str) -> None:
    apps = [_app("app_0", "- root item"), _app("app_1", "- other")]
    cache = SnapshotCache()
    before = _pull(apps, cache).markdown
    app = apps[0]
    if change == "mount":
        app.views.apply(FragmentUpdate([_fragment("child", "- child item", mounted=True)]))
    elif change == "hide":
        app.views.hidden.add("root")
    elif change == "log":
        app.log_operation("bumped the counter")
    elif change == "status":
        app.transition(AppStatus.COLLAPSED)
    else:
        app.app_id = "app_7"
    after = _pull(apps, cache).markdown  # _pull checks it equals a pull with nothing cached
    assert after != before


def test_a_budget_change_rebuilds_and_the_desktop_total_is_applied_per_pull() -> None:
    apps = [_app(f"app_{i}", "z" * 30_000) for i in range(4)]
    cache = SnapshotCache()
    _pull(apps, cache)
    tight = _pull(apps, cache, SnapshotBudget(total_bytes=80_000))
    assert tight.over_budget == ("app_2", "app_3")
    roomy = _pull(apps, cache)
    assert roomy.over_budget == ()
    assert roomy.markdown.count("z" * 30_000) == 4


def test_a_closed_app_is_forgotten() -> None:
    apps = [_app(f"app_{i}", f"- item {i}") for i in range(2)]
    cache = SnapshotCache()
    _pull(apps, cache)
    snap = _pull(apps[:1], cache)
    assert "app_1" not in snap.app_tags
    _pull(apps, cache)
    assert cache.built == 3  # app_1 built again: its part was dropped, not kept forever


def test_an_app_whose_inputs_cannot_be_read_is_a_marker_and_not_cached() -> None:
    apps = [_app("app_0", "- fine"), _app("app_1", "- broken soon")]
    cache = SnapshotCache()
    _pull(apps, cache)
    apps[1].views.rendered = None  # type: ignore[assignment]  # a fault we cannot cause for real
    heard: list[str] = []
    snap = build_snapshot(apps, [], None, lambda app, exc: heard.append(app.app_id), cache)
    assert heard == ["app_1"]
    assert "its views could not be assembled" in snap.markdown
    assert "- fine" in snap.markdown
    build_snapshot(apps, [], None, lambda app, exc: heard.append(app.app_id), cache)
    assert heard == ["app_1", "app_1"]  # tried again, not served from the cache
