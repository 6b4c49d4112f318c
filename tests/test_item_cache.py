"""An operation costs the items it changes: list items are rendered once and reused (issue 16).

The renderer's :class:`ItemCache` reuses an unchanged item's Markdown and ``view.cached`` its
HTML; both must give exactly what a render without them gives. The Notes tests drive a real
:class:`WorkerLoop` over a real ZeroMQ pair.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
import zmq

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.messages import Operation
from aotui.sandbox.render import ItemCache, RenderedView, render_view
from aotui.sandbox.sdk import App, View
from aotui.sandbox.worker import WorkerLoop, load_app
from tests.conftest import BUNDLED_APPS

pytestmark = pytest.mark.timeout(60)


def both(document: str, cache: ItemCache) -> RenderedView:
    """The document rendered with the cache, checked against a render without it."""
    cached = render_view(document, cache)
    assert cached == render_view(document)
    return cached


def doc(items: list[str], tag: str = "ul", before: str = "") -> str:
    return (
        f'<section view="V">{before}<{tag} list="thing[]:things">{"".join(items)}</{tag}></section>'
    )


def plain(i: int, text: str = "") -> str:
    return (
        f'<li key="k{i}" data-value=\'{{"n": {i}}}\'>Item {i}{text}'
        f"<ul><li>Detail {i}</li></ul>"
        f'<a view-link="child:{i}" description="Child {i}">Open {i}</a></li>'
    )


# --- the renderer ------------------------------------------------------------------------------


@pytest.mark.parametrize("tag", ["ul", "ol"])
def test_a_sliding_window_of_items_renders_as_without_the_cache(tag: str) -> None:
    cache = ItemCache()
    # A window over 20 items moves by one each time: every item changes position (its ref and,
    # in an ordered list, its number, whose width changes at 10), and one is edited.
    for start in range(12):
        items = [plain(i, " (edited)" if i == start + 3 else "") for i in range(start, start + 11)]
        rendered = both(doc(items, tag), cache)
        assert rendered.keys["things[0]"] == f"k{start}"
        assert rendered.refs["things[10]"] == {"n": start + 10}
        assert [link.key for link in rendered.links] == [
            f"child:{i}" for i in range(start, start + 11)
        ]
    # After the first render, each window renders the item entering it and the edited ones only.
    assert cache.misses <= 11 + 3 * 11, (cache.hits, cache.misses)
    assert cache.hits >= 11 * 8
    assert len(cache) == 11  # what the last render used


def test_items_that_are_view_links_and_their_descriptions_are_reused() -> None:
    cache = ItemCache()
    items = [
        f'<li key="c{i}" view-link="conv:{i}" description="Chat {i}">Chat {i}<ul><li>Unread: {i}'
        "</li></ul></li>"
        for i in range(5)
    ]
    first = both(doc(items), cache)
    again = both(doc(items[1:] + items[:1]), cache)
    assert cache.hits == 5
    assert "[Chat 0](view:@conv:0)" in again.markdown
    assert [link.key for link in again.links] == ["conv:1", "conv:2", "conv:3", "conv:4", "conv:0"]
    assert {link.key: link.description for link in first.links}["conv:3"] == "Chat 3"


def test_a_reused_item_still_claims_its_view_link_once_per_view() -> None:
    cache = ItemCache()
    both(doc([plain(1), plain(2)]), cache)
    clash = '<li key="other"><a view-link="child:1">Again</a></li>'
    for items in ([plain(1), clash], [clash, plain(1)]):  # the reused item second, then first
        with pytest.raises(AotuiError) as caught:
            render_view(doc(items), cache)
        assert caught.value.code is ErrorCode.E_APP_ERROR
        assert 'view-link="child:1" appears twice' in caught.value.message


def test_items_holding_entities_operations_or_lists_render_every_time() -> None:
    cache = ItemCache()
    items = [
        '<li key="a">A <span entity="user:u1">Ann</span></li>',
        '<li key="b">B <button operation="poke">Poke</button></li>',
        '<li key="c">C<ol list="sub[]:subs"><li key="s">S</li></ol></li>',
    ]
    for _ in range(2):
        rendered = both(doc(items), cache)
    assert cache.hits == 1  # the nested list's own item, which holds no claims
    assert rendered.ref_types == {"things[0]": "thing", "u1": "user", "things[1]": "thing",
                                  "things[2]": "thing", "subs[0]": "sub"}  # fmt: skip
    # The entity's id is still claimed at every render: a list reusing it is refused.
    with pytest.raises(AotuiError, match='the id "u1" is already used'):
        render_view(doc(items, before='<ul list="x[]:u1"></ul>'), cache)


def test_an_item_whose_value_was_dropped_keeps_saying_why() -> None:
    cache = ItemCache()
    items = [plain(1), '<li key="bad" data-value="{nope">Bad</li>']
    for _ in range(2):
        rendered = both(doc(items), cache)
    assert "⚠ Value dropped:" in rendered.markdown
    assert rendered.refs["things[1]"] is None
    assert cache.hits == 1


def test_a_failed_render_keeps_the_items_of_the_last_good_one() -> None:
    cache = ItemCache()
    items = [plain(i) for i in range(4)]
    both(doc(items), cache)
    with pytest.raises(AotuiError, match="duplicate key"):
        render_view(doc([*items, plain(0)]), cache)
    both(doc(items), cache)
    assert cache.hits == 4 + 4  # the failed render's reuses, then all of them again


# --- view.cached --------------------------------------------------------------------------------


class Shelf(App):
    """Books with a title each; every render of a book's block is counted."""

    def __init__(self) -> None:
        super().__init__()
        self.books = {f"b{i}": f"Book {i}" for i in range(5)}
        self.rendered: list[str] = []
        #: A book whose block raises when it renders.
        self.broken = ""
        self.root = ShelfView("shelf")

    def roots(self) -> list[View[Any]]:
        return [self.root]

    def resolve_view(self, key: str) -> View[Any] | None:
        return BookView(key) if key.startswith("book:") else None

    def seen(self, book: str) -> str:
        if book == self.broken:
            raise ValueError(f"cannot show {book}")
        self.rendered.append(book)
        return ""


class ShelfView(View[Shelf]):
    template = """<section view="Shelf"><ul list="book[]:books">
{%- for id, title in app.books.items() -%}
{%- call view.cached(id, title if cache else none) -%}
<li {{ view.item(id, {"title": title}) }}>{{ title }}{{ app.seen(id) }}
{{ view.link("book:" ~ id, title, "The book") }}</li>
{%- endcall -%}
{%- endfor -%}
</ul></section>"""

    cache = True

    def context(self) -> Mapping[str, Any]:
        return {"cache": self.cache}


class BookView(View[Shelf]):
    template = '<section view="Book"><p>{{ view.key }}</p></section>'


def shelf() -> tuple[Shelf, ShelfView]:
    app = Shelf()
    return app, app.add_view(app.root)


def test_view_cached_renders_a_block_again_only_when_its_inputs_change() -> None:
    app, view = shelf()
    first = view.render()
    assert app.rendered == ["b0", "b1", "b2", "b3", "b4"]
    app.rendered.clear()
    app.books["b2"] = "Book two"
    second = view.render()
    assert app.rendered == ["b2"]
    assert second == first.replace("Book 2", "Book two")
    # What the block's calls registered stays registered while the block is reused.
    assert app.view("book:b4") is not None


def test_view_cached_output_equals_the_block_rendered_every_time() -> None:
    app, view = shelf()
    view.render()
    del app.books["b1"]
    app.books["b9"] = "Book 9"
    cached = view.render()
    type(view).cache = False
    try:
        assert view.render() == cached
    finally:
        type(view).cache = True


def test_view_cached_forgets_blocks_no_longer_shown_and_none_means_always() -> None:
    app, view = shelf()
    view.render()
    gone = app.books.pop("b3")
    view.render()
    app.rendered.clear()
    app.books["b3"] = gone  # back with the same inputs: its block was forgotten, so it renders
    view.render()
    assert app.rendered == ["b3"]
    type(view).cache = False  # inputs None: every block renders at every render
    try:
        app.rendered.clear()
        view.render()
        assert sorted(app.rendered) == ["b0", "b1", "b2", "b3", "b4"]
    finally:
        type(view).cache = True


def test_a_render_that_fails_keeps_the_blocks_of_the_last_good_one() -> None:
    app, view = shelf()
    view.render()
    app.books["b1"] = "Book one"
    app.books["b3"] = "Book three"
    app.broken = "b3"
    with pytest.raises(ValueError, match="cannot show b3"):
        view.render()
    app.broken = ""
    app.books["b1"] = "Book 1"  # as the last good render showed it
    app.rendered.clear()
    view.render()
    assert app.rendered == ["b3"]


# --- Notes in a worker ---------------------------------------------------------------------------


def drain(sock: zmq.Socket[bytes]) -> None:
    while sock.poll(0):
        sock.recv()


def test_a_notes_operation_renders_the_items_it_changed_not_the_page(channel: Any) -> None:
    sock, supervisor = channel
    app: Any = load_app(str(BUNDLED_APPS / "notes"), "app.py", "notes_items")
    loop = WorkerLoop(app, sock, -1)
    for root in app.roots():
        app.add_view(root)
        loop.mount(root.key, root=True)
    for i in range(300):
        app.add(f"Note {i}", f"text {i}")
    loop.flush(force=True)
    cache = loop.item_caches["notes"]
    steps = [
        ("add_note", {"title": "New", "text": "new"}, {}),
        ("edit_note", {"note": "note_299", "text": "edited"}, {"note": "note_299"}),
        ("delete_note", {"note": "note_280"}, {"note": "note_280"}),
    ]
    for op, args, keys in steps:
        hits, misses = cache.hits, cache.misses
        loop.handle(Operation(1, "notes", op, args, keys, 5000))
        drain(supervisor)
        # One item changed (or entered the page); the other 49 were reused.
        assert cache.misses - misses == 1, op
        assert cache.hits - hits == 49, op
        fresh = render_view(app.view("notes").render()).markdown
        assert loop.sent["notes"].markdown == fresh


def test_a_note_views_inputs_change_with_its_note_only() -> None:
    app: Any = load_app(str(BUNDLED_APPS / "notes"), "app.py", "notes_views")
    app.add("One", "1")
    view = app.view("note:note_1")
    assert view.inputs() is None  # not rendered yet: it is
    view.render()  # its inputs are what it read of the app's stored data
    before = view.inputs()
    assert before is not None
    app.add("Two", "2")
    app.edit("note_2", "two")
    assert view.inputs() == before  # so the worker does not render it again
    app.edit("note_1", "one")
    edited = view.inputs()
    assert edited != before
    app.delete("note_1")
    assert view.inputs() not in (before, edited)


# --- operations ----------------------------------------------------------------------------------


def test_a_checked_argument_schema_is_reused_and_a_bad_one_refused_every_time() -> None:
    good = '<section view="V"><button operation="go" args=\'{"n": "number"}\'>Go</button></section>'
    first = render_view(good)
    first.operations[0].args["n"] = "string"  # what one render returned is its own
    assert render_view(good).operations[0].args == {"n": "number"}
    bad = '<section view="V"><button operation="go" args=\'{"n": 1}\'>Go</button></section>'
    for _ in range(2):
        with pytest.raises(AotuiError) as caught:
            render_view(bad)
        assert caught.value.code is ErrorCode.E_APP_ERROR


def test_a_renderer_subclass_dispatches_to_its_own_handlers() -> None:
    from lxml import etree

    from aotui.sandbox.flow import Flow
    from aotui.sandbox.markdown import MarkdownRenderer

    class Ruled(MarkdownRenderer):
        def _hr(self, el: Any, flow: Flow) -> None:
            flow.add(("hr", 0, ["* * *"]))

    def rendered(renderer: MarkdownRenderer) -> list[Any]:
        flow = Flow()
        renderer.children(etree.fromstring("<div><p>a</p><hr/></div>"), flow)
        return flow.blocks

    # The tag tables are built once per class: each class keeps its own.
    for _ in range(2):
        assert rendered(Ruled())[-1] == ("hr", 0, ["* * *"])
        assert rendered(MarkdownRenderer())[-1] == ("hr", 0, ["---"])


def test_the_cache_keeps_at_most_max_items_of_a_huge_list() -> None:
    from aotui.sandbox.item_cache import MAX_ITEMS

    cache = ItemCache()
    items = [f'<li key="k{i}">Item {i}</li>' for i in range(MAX_ITEMS + 50)]
    for _ in range(2):
        both(doc(items), cache)
    assert len(cache) == MAX_ITEMS
    assert cache.hits == MAX_ITEMS
