"""What the zygote runs once before forking, so that every worker shares what it builds.

A forked worker's memory of its own (its USS) is the pages it writes: the zygote's pages it copies
and the few it allocates. Code the interpreter has not specialized yet is rewritten in place on
its first calls, and types, regular-expression caches and lxml's parser are filled on first use:
done here, in the zygote, those writes happen once per desktop instead of once per worker.
"""

from __future__ import annotations

from aotui.protocol import codec
from aotui.protocol.messages import Ack, ChildLink, FragmentUpdate, ViewFragment
from aotui.sandbox.item_cache import ItemCache
from aotui.sandbox.render import render_view

__all__ = ["WARM_UP_RENDERS", "WARM_UP_VIEW", "warm_up"]

#: A view using each mark and the common HTML, rendered by :func:`warm_up`.
WARM_UP_VIEW = """<section view="Warm-up" description="rendered in the zygote">
<h2>Items</h2><p>Some <b>bold</b>, <i>italic</i>, <code>code</code> and a <a href="#x">link</a>;
<span entity="note:n_1" data-value='{{"id": "n_1"}}'>an entity</span>.</p>
<ol list="item[]:items" title="Items">{items}</ol>
<ul><li view-link="child" description="a child view">Child</li></ul>
<table><tr><th>Name</th><th>Value</th></tr><tr><td>a</td><td>1</td></tr></table>
<form operation="add" args='{{"title": "string"}}' description="Add one">
<input name="title" value="t"><input type="checkbox" name="done" checked>
<select name="kind"><option selected>one</option></select><button>Add</button></form>
<button operation="pick" args='{{"item": "item"}}' confirm>Pick</button></section>"""
#: Renders of :data:`WARM_UP_VIEW`: the interpreter specializes a function's code after a few
#: calls; one render saves a worker ~0.4 MB, three ~0.55 MB, more hardly anything (1 ms each).
WARM_UP_RENDERS = 3


def warm_up() -> None:
    """Render a view and encode its update as a worker does, so workers share what that builds.

    A worker's first render otherwise writes to ~150 more of the pages it shares with the zygote
    (code the interpreter specializes on first use, type and regular-expression caches, lxml's
    parser), and each page written is copied: 0.6 MB of a worker serving one 100-item list.
    """
    items = "".join(
        f'<li key="k{i}" data-value=\'{{"id": "k{i}"}}\'>Item {i}<ul><li>At {i}</li></ul></li>'
        for i in range(20)
    )
    cache = ItemCache()
    for _ in range(WARM_UP_RENDERS):
        rendered = render_view(WARM_UP_VIEW.format(items=items), cache)
        links = [ChildLink(link.key, link.label, link.description) for link in rendered.links]
        fragment = ViewFragment(
            key="warm-up",
            name=rendered.name,
            parent=None,
            mounted=True,
            markdown=rendered.markdown,
            refs=dict(rendered.refs),
            keys=dict(rendered.keys),
            ref_types=dict(rendered.ref_types),
            operations=list(rendered.operations),
            links=links,
        )
        codec.decode(codec.encode(FragmentUpdate(views=[fragment])))
        codec.decode(codec.encode(Ack(1, {"value": "k1"}, {"items": ["k1", "k2"]})))
