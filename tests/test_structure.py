"""App text can never produce the snapshot's structural tags (CONTRACT §4)."""

from __future__ import annotations

import html
import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.structure import STRUCTURAL_TAGS, contains_structural, escape_structural
from aotui.sandbox.render import RenderedView, render_view

# Written independently of the implementation: what a reader could take for a structural tag.
FORGED = re.compile(r"<\s*/?\s*(desktop|application_info|application|view|context)\b", re.I)


@pytest.mark.parametrize(
    "text",
    [
        "<desktop>",
        "</desktop>",
        "<application>",
        '<application id="app_0" name="Chat">',
        "</application>",
        "<application_info>",
        "</application_info>",
        "<view>",
        '<view id="view_3" name="x">',
        "</view>",
        "<view/>",
        "<context>",
        '<context app_id="app_0">',
        "</context>",
        "<VIEW>",
        "</ViEw>",
        "< view>",
        "</ view>",
        "< / view >",
        "<\tview\n>",
        "<//view>",
        "<\u200bview>",
        "<view",
    ],
)
def test_structural_tags_are_escaped(text: str) -> None:
    escaped = escape_structural(text)
    assert escaped.startswith("&lt;")
    assert not FORGED.search(escaped)
    assert contains_structural(text)
    assert not contains_structural(escaped)


@pytest.mark.parametrize(
    "text",
    ["<div>", "<b>x</b>", "<viewer>", "<view_port>", "<contexts>", "a < b", "<3", "<", "", "x"],
)
def test_other_text_is_left_alone(text: str) -> None:
    assert escape_structural(text) == text
    assert not contains_structural(text)


def test_only_the_angle_bracket_changes() -> None:
    text = 'say <view id="v"> and </Application> but keep <b>bold</b>'
    assert escape_structural(text) == (
        'say &lt;view id="v"> and &lt;/Application> but keep <b>bold</b>'
    )


def test_escaping_is_idempotent() -> None:
    once = escape_structural("<view><desktop></context>")
    assert escape_structural(once) == once


def test_structural_tags_names() -> None:
    assert set(STRUCTURAL_TAGS) == {"desktop", "application", "application_info", "view", "context"}


# --- property tests: whatever an app writes, wherever it writes it ------------------------------

FRAGMENTS = [
    "<", "</", "/", ">", " ", "\n", "\t", "\u200b", "x", "'", '"',
    "view", "VIEW", "View", "application", "_info", "context", "desktop",
    'id="x"', "&lt;", "&LT;", "&#60;", "&#x3c;", "&gt;", "&amp;", "&",
    "<span>", "</span>", "<b>", "</b>", "<br>", "<p>", "<li>",
    "<!-- -->", "<!--", "-->", "<![CDATA[", "]]>", "<?x?>",
]  # fmt: skip

app_text = st.lists(st.sampled_from(FRAGMENTS), max_size=14).map("".join)

TEMPLATES = [
    "<p>{raw}</p>",
    "<h2>{raw}</h2>{raw}",
    "<div>{raw}<span></span>{raw}</div>",
    '<ul list="m[]:items" title="{attr}"><li key="k1">{raw}<div>{raw}</div></li></ul>',
    '<ol list="m[]:items" title="{raw}"><li key="{attr}">x</li></ol>',
    '<ul><li view-link="child" description="{attr}">{raw}<ul><li>{raw}</li></ul></li></ul>',
    '<a view-link="child" description="{raw}">{raw}</a>',
    '<button operation="op" description="{attr}">{raw}</button>',
    '<button operation="op" args=\'{{"{attr}": "string"}}\'>go</button>',
    '<form operation="op"><input name="x" value="{attr}"><button>{raw}</button></form>',
    '<ol list="m[]:items"><li key="k" data-value="{json}">{raw}</li></ol>',
    '<ol list="m[]:items"><li key="k" data-value="{raw}">x</li></ol>',
    '<span entity="t:e" data-value="{json}">{raw}</span>',
    '<a href="{attr}">{raw}</a> <img alt="{attr}">',
    "<pre>{raw}</pre><code>{raw}</code>",
    "<table><tr><th>{raw}</th></tr><tr><td>{raw}</td></tr></table>",
    '<input value="{attr}" placeholder="{raw}"><textarea>{raw}</textarea>',
    "<select><option>{raw}</option></select><dl><dt>{raw}</dt><dd>{raw}</dd></dl>",
    "<blockquote>{raw}</blockquote><custom-tag>{raw}</custom-tag>",
]


def _fill(template: str, text: str) -> str:
    value = html.escape(json.dumps({"t": text}), quote=True)
    return template.format(raw=text, attr=html.escape(text, quote=True), json=value)


def _assert_unforged(view: RenderedView) -> None:
    texts = [view.name, view.description, view.markdown]
    texts += [part for link in view.links for part in (link.label, link.description)]
    texts += [part for op in view.operations for part in (op.label, op.description)]
    for text in texts:
        assert not FORGED.search(text), text


def _render_or_app_error(document: str) -> RenderedView | None:
    try:
        return render_view(document)
    except AotuiError as exc:
        error = exc
    assert error.code is ErrorCode.E_APP_ERROR, error
    return None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(template=st.sampled_from(TEMPLATES), text=app_text)
def test_app_text_never_forges_structure(template: str, text: str) -> None:
    view = _render_or_app_error(f'<section view="V">{_fill(template, text)}</section>')
    if view is not None:
        _assert_unforged(view)


@settings(max_examples=300, deadline=None)
@given(name=app_text, description=app_text, body=app_text)
def test_view_name_and_description_never_forge_structure(
    name: str, description: str, body: str
) -> None:
    document = (
        f'<main view="{html.escape(name, quote=True)}" '
        f'description="{html.escape(description, quote=True)}">{body}</main>'
    )
    view = _render_or_app_error(document)
    if view is not None:
        _assert_unforged(view)


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=200))
def test_any_text_renders_or_fails_as_app_error(text: str) -> None:
    for document in (text, f'<div view="V">{text}</div>'):
        view = _render_or_app_error(document)
        if view is not None:
            _assert_unforged(view)
            assert view.markdown.endswith("\n")


@settings(max_examples=300, deadline=None)
@given(text=app_text)
def test_escape_structural_leaves_nothing_forged(text: str) -> None:
    for candidate in (text, html.unescape(text)):
        escaped = escape_structural(candidate)
        assert not FORGED.search(escaped)
        assert escaped.replace("&lt;", "<") == candidate.replace("&lt;", "<")
