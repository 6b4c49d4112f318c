"""View templates: Jinja2 with autoescape, so every value is escaped unless it is markup already.

A view's ``template`` is compiled once per source text. Inside it, ``{{ text }}`` is escaped;
what the SDK's helpers return (``view.item(…)``, ``view.button(…)``, …) is
:class:`markupsafe.Markup` and goes in as it is. Two filters keep line structure:
``{{ text | lines }}`` joins lines with ``<br>``; ``{{ text | paragraphs }}`` makes a ``<p>`` per
blank-line-separated block, its line breaks kept.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from typing import Any

import jinja2
from jinja2.utils import concat
from markupsafe import Markup, escape

__all__ = [
    "Markup",
    "attributes",
    "compile_template",
    "json_value",
    "lines",
    "paragraphs",
    "render_template",
]

_BR = Markup("<br>")


def lines(text: str) -> Markup:
    """``text`` escaped, its line breaks kept as ``<br>``."""
    # Escaping never adds or removes a line break, so escape once and split after.
    return Markup("<br>".join(str(escape(text)).splitlines()))


def paragraphs(text: str) -> Markup:
    """``text`` as escaped paragraphs: blank lines separate them, line breaks are kept."""
    blocks = [b for b in str(text).replace("\r\n", "\n").split("\n\n") if b.strip()]
    return Markup("").join(
        Markup("<p>") + _BR.join(escape(line) for line in block.strip("\n").split("\n"))
        + Markup("</p>")
        for block in blocks
    )  # fmt: skip


# One encoder for every value: json.dumps() with an option builds a new one per call.
_JSON = json.JSONEncoder(ensure_ascii=False)


def json_value(value: Any) -> str:
    """``value`` as the JSON text of a ``data-value`` (not yet escaped)."""
    return _JSON.encode(value)


def attributes(pairs: Iterable[tuple[str, Any]]) -> Markup:
    """``name="value"`` pairs, each value escaped; pairs whose value is ``None`` are left out."""
    return Markup(" ").join(
        Markup(f'{name}="{escape(value)}"') for name, value in pairs if value is not None
    )


_ENV = jinja2.Environment(
    autoescape=True,
    # A misspelt name is an error the view shows, not an empty string the agent reads.
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    auto_reload=False,
)
_ENV.filters["lines"] = lines
_ENV.filters["paragraphs"] = paragraphs


_GLOBALS = dict(_ENV.globals)


@functools.lru_cache(maxsize=256)
def compile_template(source: str) -> jinja2.Template:
    """The compiled template of ``source`` (compiled once, then reused)."""
    return _ENV.from_string(source)


def render_template(source: str, names: Mapping[str, Any]) -> str:
    """Render ``source`` with ``names`` (and Jinja2's globals such as ``range``)."""
    template = compile_template(source)
    # What Template.render() does, less its per-call merge of the globals into a new chain:
    # a third of the fixed cost of rendering a small view.
    context = template.new_context({**_GLOBALS, **names}, shared=True)
    try:
        return concat(template.root_render_func(context))
    except Exception:  # noqa: BLE001 - jinja2 rewrites the traceback of whatever a template raised
        _ENV.handle_exception()
