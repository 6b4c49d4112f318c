"""View ids are bounded by what an app shows, not by what it ever showed (issue 16).

An app honestly listing 10,000 notes a page at a time names 10,000 distinct views over its life;
the supervisor keeps ids for the views in the tree and forgets the longest-known of those that
left it, so the app is never killed for it and a worker naming fresh keys cannot grow the
supervisor. The unit tests drive a real :class:`ViewTree`; the end-to-end ones a real supervisor,
sandboxed worker and client.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.messages import ChildLink, FragmentUpdate, ViewFragment
from aotui.supervisor.desktop import view_tree
from aotui.supervisor.desktop.view_tree import MAX_VIEW_IDS, ViewTree
from tests.conftest import RunningDesktop

Start = Callable[..., RunningDesktop]

pytestmark = pytest.mark.timeout(60)


def _page(links: list[str]) -> FragmentUpdate:
    root = ViewFragment(
        "root", "Root", None, True, "r", {}, {}, {}, [], [ChildLink(k, k, "") for k in links]
    )
    return FragmentUpdate([root])


def test_ten_thousand_views_shown_a_page_at_a_time_fit_and_stay_bounded() -> None:
    tree = ViewTree()
    pinned_ids = set()
    for page in range(10_000 // 50):
        items = [f"item:{n}" for n in range(page * 50, page * 50 + 50)]
        tree.apply(_page(["pinned", *items]))
        pinned_ids.add(tree.ids["pinned"])
        assert len(tree.ids) <= MAX_VIEW_IDS
    # A view that stayed in the tree kept its id all along; the newest views have theirs.
    assert pinned_ids == {"view_1"}
    shown = {node.label: node.view_id for node in tree.nodes()}
    assert shown["item:9999"] == "view_10001"
    assert len(shown) == 52
    # Ids are never handed out twice, even after the old ones were forgotten.
    assert len(set(tree.ids.values())) == len(tree.ids)
    assert tree.next_id == 10_002


def test_a_forgotten_id_is_not_found_and_its_view_comes_back_under_a_new_one() -> None:
    tree = ViewTree()
    tree.apply(_page(["first"]))
    assert tree.ids["first"] == "view_1"
    for page in range(1, MAX_VIEW_IDS // 50 + 2):
        tree.apply(_page([f"item:{n}" for n in range(page * 50, page * 50 + 50)]))
    with pytest.raises(AotuiError) as gone:
        tree.key_for("view_1")
    assert gone.value.code is ErrorCode.E_NOT_FOUND
    assert "pull a new snapshot" in gone.value.message
    tree.apply(_page(["first"]))
    assert tree.ids["first"] == f"view_{tree.next_id - 1}" != "view_1"


def test_restored_ids_number_on_after_the_newest() -> None:
    tree = ViewTree()
    for page in range(MAX_VIEW_IDS // 50 + 5):
        tree.apply(_page([f"item:{n}" for n in range(page * 50, page * 50 + 50)]))
    restored = ViewTree()
    restored.restore_ids(dict(reversed(list(tree.ids.items()))))  # whatever order they come in
    assert restored.next_id == tree.next_id
    restored.apply(_page(["fresh"]))
    assert restored.ids["fresh"] == f"view_{tree.next_id}"


def test_fresh_keys_cannot_grow_the_supervisor() -> None:
    tree = ViewTree()
    for page in range(300):  # 60,000 keys never seen before
        tree.apply(_page([f"{page}-{n}" for n in range(200)]))
        assert len(tree.ids) <= MAX_VIEW_IDS
        assert len(tree.keys) <= MAX_VIEW_IDS


def test_more_views_than_the_budget_at_once_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    tree = ViewTree()
    with pytest.raises(AotuiError) as refused:
        tree.apply(_page([f"c{n}" for n in range(MAX_VIEW_IDS)]))
    assert refused.value.code is ErrorCode.E_INVALID_CMD
    assert f"{MAX_VIEW_IDS + 1} distinct views at once" in refused.value.message
    assert "link fewer" in refused.value.message
    monkeypatch.setattr(view_tree, "MAX_VIEW_IDS", 8)
    ViewTree().apply(_page([f"c{n}" for n in range(7)]))  # the budget counts the root too


# --- a real desktop ------------------------------------------------------------------------------


def _pages_view(client: Any) -> str:
    text = client.snapshot()
    match = re.search(r'<view id="(view_\d+)" name="Pages">', text[text.index('id="app_0"') :])
    assert match, text
    return match.group(1)


def _pid(client: Any) -> int:
    return next(row["pid"] for row in client.status()["apps"] if row["app"] == "app_0")


def test_an_app_naming_5000_views_is_served_not_killed(start_desktop: Start) -> None:
    desktop = start_desktop(["pager"])
    client = desktop.client
    client.execute("<context>open --application app_0</context>")
    view = _pages_view(client)
    pid = _pid(client)
    text = client.snapshot()
    first_item = re.search(r"\[Item 0\]\(view:(view_\d+)\)", text)
    pinned = re.search(r"\[Pinned\]\(view:(view_\d+)\)", text)
    assert first_item, text
    assert pinned, text
    for _ in range(100):
        client.execute(f'<context app_id="app_0" view_id="{view}">execute turn</context>')
    text = client.snapshot()
    assert _pid(client) == pid
    assert "Page 100" in text
    assert f"[Pinned](view:{pinned.group(1)})" in text  # still in the tree: the same id
    assert "[Item 5049](view:view_" in text
    with pytest.raises(AotuiError) as gone:
        client.execute(f'<context app_id="app_0">mount --view {first_item.group(1)}</context>')
    assert gone.value.code is ErrorCode.E_NOT_FOUND
    client.execute(f'<context app_id="app_0">mount --view {pinned.group(1)}</context>')
    assert f'<view id="{pinned.group(1)}" name="Item">\npinned' in client.snapshot()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_ten_thousand_consecutive_add_note_none_killed(start_desktop: Start) -> None:
    desktop = start_desktop(["notes"])
    client = desktop.client
    client.execute("<context>open --application app_0</context>")
    text = client.snapshot()
    match = re.search(r'<view id="(view_\d+)" name="Notes">', text[text.index('id="app_0"') :])
    assert match, text
    add = f'<context app_id="app_0" view_id="{match.group(1)}">'
    add += "execute add_note --title N{} --text t"
    pid = _pid(client)
    for n in range(10_000):
        client.execute(add.format(n) + "</context>")
    assert _pid(client) == pid
    status = next(row for row in client.status()["apps"] if row["app"] == "app_0")
    assert status["state"] == "running", status
    assert status["restarts"] == 0, status
    assert "[N9999](view:view_" in client.snapshot()
