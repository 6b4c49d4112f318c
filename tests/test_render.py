"""render_view: every markup rule of CONTRACT §3–4 and docs/markup.md, and every error."""

from __future__ import annotations

import json

import pytest

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.messages import OperationSpec
from aotui.sandbox.render import VALUE_DROPPED, RenderedView, ViewLink, render_view


def view(body: str, **attrs: str) -> RenderedView:
    extra = "".join(f' {name.replace("_", "-")}="{value}"' for name, value in attrs.items())
    return render_view(f'<section view="Test"{extra}>{body}</section>')


def md(body: str) -> str:
    return view(body).markdown


def app_error(document: str) -> str:
    with pytest.raises(AotuiError) as caught:
        render_view(document)
    assert caught.value.code is ErrorCode.E_APP_ERROR
    return caught.value.message


def body_error(body: str) -> str:
    return app_error(f'<section view="Test">{body}</section>')


def test_exports() -> None:
    import aotui.sandbox.render

    assert sorted(aotui.sandbox.render.__all__) == [
        "ItemCache",
        "RenderedView",
        "VALUE_DROPPED",
        "ViewLink",
        "render_view",
    ]


# --- the view root --------------------------------------------------------------------------


def test_root_name_description_and_body() -> None:
    result = render_view('<section view=" Inbox " description="All  mail"><p>Hi</p></section>')
    assert (result.name, result.description, result.markdown) == ("Inbox", "All mail", "Hi\n")


@pytest.mark.parametrize(
    "document",
    [
        '<html><body><div view="V"><p>Hi</p></div></body></html>',
        '<!DOCTYPE html><html view="V"><head><title>T</title></head><body><p>Hi</p></body></html>',
        '<body view="V"><p>Hi</p></body>',
        '<div>outside</div><div view="V"><p>Hi</p></div><p>also outside</p>',
    ],
)
def test_root_may_be_wrapped_or_be_the_document(document: str) -> None:
    result = render_view(document)
    assert (result.name, result.markdown) == ("V", "Hi\n")


def test_bytes_input_is_utf8() -> None:
    result = render_view('\ufeff<div view="V">Grüße</div>'.encode())
    assert result.markdown == "Grüße\n"


@pytest.mark.parametrize("document", ["", "   \n", "<p>no root</p>", "<!-- -->", "\x00"])
def test_missing_root_is_an_app_error(document: str) -> None:
    assert 'view="Name"' in app_error(document)


def test_non_text_input_is_an_app_error() -> None:
    with pytest.raises(AotuiError) as caught:
        render_view(42)  # type: ignore[arg-type]
    assert caught.value.code is ErrorCode.E_APP_ERROR
    assert "int" in caught.value.message


def test_nested_view_is_an_error() -> None:
    message = app_error('<div view="Outer"><div view="Inner">x</div></div>')
    assert 'view="Inner"' in message
    assert "inside" in message
    assert '"Outer"' in message


def test_second_view_beside_the_first_is_an_error() -> None:
    message = app_error('<div view="A">a</div><div view="B">b</div>')
    assert 'view="B"' in message
    assert "beside" in message


@pytest.mark.parametrize("name", ["", "   ", 'a"b', "a&lt;b", "x" * 201])
def test_unusable_view_name_is_an_error(name: str) -> None:
    assert "view name" in app_error(f"<div view='{name}'>x</div>")


def test_root_cannot_carry_another_mark() -> None:
    message = app_error('<ol view="V" list="m[]:items"><li key="a">x</li></ol>')
    assert 'list="' in message
    assert "root" in message


# --- entities ----------------------------------------------------------------------------------


def test_entity_inline_and_in_heading() -> None:
    result = view(
        '<h1 entity="title:conversation_title">Project TUI</h1>'
        '<p>From <span entity="user:peer" data-value=\'{"id": 7}\'>Johnny</span> today</p>'
    )
    assert result.markdown == (
        "# [Project TUI](title:conversation_title)\n\nFrom [Johnny](user:peer) today\n"
    )
    assert result.refs == {"conversation_title": None, "peer": {"id": 7}}
    assert result.keys == {"conversation_title": "conversation_title", "peer": "peer"}
    assert result.ref_types == {"conversation_title": "title", "peer": "user"}


def test_entity_without_text_is_labelled_by_its_id() -> None:
    assert md('<span entity="user:peer"></span>') == "[peer](user:peer)\n"


def test_entity_on_a_block_links_its_first_paragraph() -> None:
    assert md('<div entity="card:c1"><p>Title <b>bold</b></p><ul><li>detail</li></ul></div>') == (
        "[Title bold](card:c1)\n\n- detail\n"
    )


def test_entity_on_a_list_gets_a_link_line_before_it() -> None:
    assert md('<ul entity="set:s"><li>a</li></ul>') == "[s](set:s)\n\n- a\n"


def test_entity_on_an_ordinary_list_item() -> None:
    assert md('<ul><li entity="user:bob">Bob<ul><li>Admin</li></ul></li></ul>') == (
        "- [Bob](user:bob)\n    - Admin\n"
    )


def test_entity_inside_a_link_label_is_recorded_but_not_nested() -> None:
    result = view('<a href="/u">by <b entity="user:ann">Ann</b></a>')
    assert result.markdown == "[by Ann](/u)\n"
    assert "ann" in result.refs


@pytest.mark.parametrize("spec", ["title", "title:", ":id", "a b:c", "t:id[]", "t[]:id", "1t:x"])
def test_bad_entity_syntax_is_an_error(spec: str) -> None:
    message = body_error(f'<span entity="{spec}">x</span>')
    assert f'entity="{spec.strip()}"' in message
    assert 'entity="type:entity_id"' in message


def test_duplicate_entity_id_is_an_error() -> None:
    message = body_error('<b entity="a:dup">1</b><b entity="b:dup">2</b>')
    assert '"dup"' in message
    assert "unique" in message


def test_entity_and_list_share_one_id_space() -> None:
    message = body_error('<b entity="a:x">1</b><ul list="m[]:x"><li key="k">i</li></ul>')
    assert '"x"' in message


def test_bad_entity_data_value_degrades_only_the_entity() -> None:
    result = view("<p>Hi <b entity=\"user:peer\" data-value='{oops}'>Jo</b> there</p>")
    assert result.markdown.startswith(
        f"Hi [Jo](user:peer) ({VALUE_DROPPED} data-value of entity peer is not valid JSON"
    )
    assert result.refs == {"peer": None}
    assert result.keys == {"peer": "peer"}


# --- semantic lists ------------------------------------------------------------------------------

HISTORY = """
<ol list="message[]:message_history" title="Message History">
  <li key="msg_1" data-value='{"id": 1}'>Hello<ul><li>Sender: John</li></ul></li>
  <li key="msg_2">Who owns <em>this</em> project?<div>Sender: Jane</div><p>Seen</p></li>
</ol>
"""


def test_semantic_list_renders_heading_items_and_tables() -> None:
    result = view(HISTORY)
    assert result.markdown == (
        "### [Message History](message[]:message_history)\n"
        "1. [Hello](message:message_history[0])\n"
        "    - Sender: John\n"
        "2. [Who owns this project?](message:message_history[1])\n"
        "    - Sender: Jane\n"
        "    - Seen\n"
    )
    assert result.refs == {"message_history[0]": {"id": 1}, "message_history[1]": None}
    assert result.keys == {"message_history[0]": "msg_1", "message_history[1]": "msg_2"}
    assert result.ref_types == {
        "message_history[0]": "message",
        "message_history[1]": "message",
    }
    assert result.lists == {"message_history": "message"}


def test_unordered_semantic_list_on_any_element_uses_dashes_and_list_id_title() -> None:
    assert md('<div list="user[]:members"><p key="a">Ann</p><p key="b">Bob</p></div>') == (
        "### [members](user[]:members)\n- [Ann](user:members[0])\n- [Bob](user:members[1])\n"
    )


@pytest.mark.parametrize(
    ("before", "level"),
    [
        ("", 3),
        ("<h2>A</h2>", 3),
        ("<h1>A</h1>", 3),
        ("<h2>A</h2><h1>B</h1>", 3),
        ("<h3>A</h3>", 4),
        ("<h4>A</h4>", 5),
        ("<h6>A</h6>", 6),
        ("<h2>A</h2><section><h4>Inside</h4></section>", 3),
        ("<h2>A</h2><div><h4>Wrapped</h4></div>", 5),
    ],
)
def test_list_heading_goes_one_below_the_heading_in_scope(before: str, level: int) -> None:
    lines = md(before + '<ul list="m[]:items"><li key="k">x</li></ul>').splitlines()
    assert "#" * level + " [items](m[]:items)" in lines


def test_item_label_comes_from_its_first_block_or_its_key() -> None:
    assert md(
        '<ul list="m[]:items"><li key="k1"><p>First</p><p>Second</p></li><li key="k2"></li></ul>'
    ) == ("### [items](m[]:items)\n- [First](m:items[0])\n    - Second\n- [k2](m:items[1])\n")


def test_item_label_is_plain_text_with_unbalanced_brackets_escaped() -> None:
    assert (
        md(
            '<ul list="m[]:items"><li key="a"><a href="/x">link</a> <code>c</code> a]b</li></ul>'
        ).splitlines()[1]
        == r"- [link c a\]b](m:items[0])"
    )


def test_items_skip_scripts_and_loose_text() -> None:
    result = view('<ul list="m[]:items">loose<script>x</script><li key="a">A</li>tail</ul>')
    assert result.markdown == "### [items](m[]:items)\n- [A](m:items[0])\n"


def test_empty_semantic_list_keeps_its_heading() -> None:
    result = view('<ul list="m[]:items"></ul>')
    assert (result.markdown, result.lists) == ("### [items](m[]:items)\n", {"items": "m"})


def test_semantic_list_as_an_ordinary_list_item() -> None:
    assert md('<ul><li list="user[]:team" title="Team"><p key="a">Ann</p></li></ul>') == (
        "- [Team](user[]:team)\n    - [Ann](user:team[0])\n"
    )


def test_semantic_list_over_table_rows() -> None:
    assert md(
        '<table><thead><tr><th>Name</th><th>Size</th></tr></thead><tbody list="file[]:files">'
        '<tr key="f1"><td>a.txt</td><td>1 KB</td></tr></tbody></table>'
    ) == ("Name | Size\n\n### [files](file[]:files)\n- [a.txt](file:files[0])\n    - 1 KB\n")


@pytest.mark.parametrize("key", ["", "  "])
def test_item_without_key_is_an_error(key: str) -> None:
    message = body_error(
        f'<ol list="message[]:message_history"><li key="a">x</li><li key="{key}">y</li></ol>'
    )
    assert "message_history[1]" in message
    assert "message_history" in message
    assert 'key="' in message


def test_duplicate_key_is_an_error() -> None:
    message = body_error('<ul list="m[]:items"><li key="a">x</li><li key="a">y</li></ul>')
    assert '"a"' in message
    assert "items" in message
    assert "0 and 1" in message


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("{oops}", "is not valid JSON"),
        ("", "is not valid JSON"),
        ('{"a": 1} x', "is not valid JSON"),
        ('{"a": NaN}', "is not valid JSON"),
        ("[Infinity]", "is not valid JSON"),
        ("1e400", "is not valid JSON"),
        ("1" * 5000, "is not valid JSON"),
        ('"\\ud800"', "lone surrogate"),
        ("[" * 33 + "]" * 33, "nested deeper than 32"),
        ("[" * 3000 + "]" * 3000, "nested deeper than 32"),
        (json.dumps("é" * 5200), "bytes; the limit is 10240"),
    ],
)
def test_bad_item_data_value_degrades_only_that_item(value: str, reason: str) -> None:
    # It used to blank the whole view, operations included.
    escaped = value.replace("&", "&amp;").replace("'", "&#39;")
    result = view(
        '<ol list="message[]:message_history"><li key="msg_1">a</li>'
        '<li key="msg_2" data-value=\'{"id": 2}\'>b</li>'
        f"<li key=\"msg_3\" data-value='{escaped}'>c<ul><li>Sender: Jo</li></ul></li></ol>"
        '<button operation="send" args=\'{"m": "message"}\'>Send</button>'
    )
    lines = result.markdown.splitlines()
    assert lines[1:4] == [
        "1. [a](message:message_history[0])",
        "2. [b](message:message_history[1])",
        "3. [c](message:message_history[2])",
    ]
    marker = f"    - {VALUE_DROPPED} data-value of message_history[2] (key msg_3) "
    assert lines[4].startswith(marker)
    assert reason in lines[4]
    assert lines[5] == "    - Sender: Jo"
    assert "- [Send](operation:send)" in lines
    assert result.refs["message_history[1]"] == {"id": 2}
    assert result.refs["message_history[2]"] is None
    assert result.keys["message_history[2]"] == "msg_3"


@pytest.mark.parametrize(
    "value",
    ["[" * 32 + "]" * 32, json.dumps("x" * 10238), '"\\ud83d\\ude00"', "-0.5", "null", " [1] "],
)
def test_data_value_at_the_limits_is_accepted(value: str) -> None:
    result = view(f'<ul list="m[]:items"><li key="a" data-value=\'{value}\'>x</li></ul>')
    assert result.refs["items[0]"] == json.loads(value)


@pytest.mark.parametrize(
    "spec", ["messages", "message[]", "message:history", "message[]:", "[]:h", "m[] : h", "m[]:h-1"]
)
def test_bad_list_syntax_is_an_error(spec: str) -> None:
    message = body_error(f'<ul list="{spec}"><li key="a">x</li></ul>')
    assert f'list="{spec.strip()}"' in message
    assert 'list="type[]:list_id"' in message


def test_duplicate_list_id_is_an_error() -> None:
    message = body_error('<ul list="a[]:x"></ul><ol list="b[]:x"></ol>')
    assert '"x"' in message
    assert "unique" in message


@pytest.mark.parametrize(
    "attrs", ['entity="a:b"', 'operation="op"', 'list="a[]:inner"', 'view="Inner"']
)
def test_item_cannot_carry_another_mark(attrs: str) -> None:
    message = body_error(f'<ul list="m[]:items"><li key="a">x</li><li key="b" {attrs}>y</li></ul>')
    assert attrs.split("=")[0] in message


def test_html_input_list_attribute_is_not_a_mark() -> None:
    assert md('<input list="browsers" name="b">') == '[input name="b"]\n'


def test_error_messages_cannot_forge_structure_and_stay_short() -> None:
    message = body_error(f'<ul list="</view><desktop>{"x" * 2000}"></ul>')
    assert "</view>" not in message
    assert "&lt;/view>&lt;desktop>" in message
    assert len(message) <= 600


def test_two_marks_on_one_element_is_an_error() -> None:
    message = body_error('<div list="a[]:x" entity="b:y"></div>')
    assert 'list="a[]:x"' in message
    assert 'entity="b:y"' in message


# --- operations --------------------------------------------------------------------------------


def test_operations_are_collected_in_order_and_rendered_at_the_end() -> None:
    result = view(
        "<p>Before</p>"
        '<button operation="send_message" description="Send  a message" '
        'args=\'{"content": "string", "silent?": "boolean"}\'>Send <b>Message</b></button>'
        "<p>After</p>"
        '<a operation="refresh" href="#"></a>'
    )
    assert result.markdown == (
        "Before\n\nAfter\n\n"
        "#### Operations\n"
        "- [Send Message](operation:send_message)\n"
        "    - Description: Send a message\n"
        "    - Parameters:\n"
        "        - content: string\n"
        "        - silent?: boolean\n"
        "- [refresh](operation:refresh)\n"
    )
    assert result.operations == (
        OperationSpec(
            "send_message",
            "Send Message",
            "Send a message",
            {"content": "string", "silent?": "boolean"},
        ),
        OperationSpec("refresh", "refresh", "", {}),
    )


def test_form_operation_takes_its_submit_button_as_label_and_hides_its_fields() -> None:
    result = view(
        '<form operation="post" args=\'{"content": "string"}\'><label>Text <textarea name="c">'
        "draft</textarea></label><select><option>x</option></select><button>Post it</button></form>"
    )
    assert result.operations[0].label == "Post it"
    assert result.markdown.startswith("#### Operations\n- [Post it](operation:post)\n")


def test_operation_label_falls_back_to_title_then_value() -> None:
    result = view(
        '<button operation="a" title="Delete"><img alt="x"></button>'
        '<input type="submit" operation="b" value="Go">'
    )
    assert [op.label for op in result.operations] == ["Delete", "Go"]


def test_operation_inside_list_items_is_allowed_once() -> None:
    result = view(
        '<ul list="m[]:items"><li key="a">A <button operation="open">Open</button></li></ul>'
    )
    assert result.markdown.splitlines()[1] == "- [A](m:items[0])"
    assert [op.op_id for op in result.operations] == ["open"]


def test_operation_on_an_ordinary_list_item_is_not_an_item() -> None:
    assert md('<ul><li>a</li><li operation="more">More</li></ul>').startswith("- a\n#### Oper")


def test_duplicate_operation_is_an_error() -> None:
    message = body_error('<button operation="send">a</button><a operation="send">b</a>')
    assert "operation send" in message
    assert "twice" in message


@pytest.mark.parametrize("op_id", ["", "send-message", "1send", "send message", "a.b"])
def test_bad_operation_id_is_an_error(op_id: str) -> None:
    assert f'operation="{op_id}"' in body_error(f'<button operation="{op_id}">x</button>')


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        ("{content}", "not valid JSON"),
        ('["content"]', "JSON object"),
        ('{"content": 1}', "has type 1"),
        ('{"bad name": "string"}', "args name 'bad name'"),
        ('{"x": "string", "x?": "string"}', "declares 'x' twice"),
        ('{"x": "list of string"}', "type 'list of string'"),
        ('{"x": ""}', "type ''"),
        ('{"x": "str"}', "did you mean string?"),
    ],
)
def test_bad_args_are_an_error_naming_the_operation(args: str, reason: str) -> None:
    message = body_error(f"<button operation=\"send_message\" args='{args}'>x</button>")
    assert message.startswith("operation 'send_message': ")
    assert reason in message


@pytest.mark.parametrize(
    "operation",
    [
        '<button operation="go"><b entity="a:b">x</b></button>',
        '<form operation="go"><p><b entity="a:b">x</b></p><button>Go</button></form>',
    ],
)
def test_marks_inside_an_operation_are_an_error(operation: str) -> None:
    message = body_error(operation)
    assert 'entity="a:b"' in message
    assert "operation go" in message


# --- child views -------------------------------------------------------------------------------


def test_view_links_on_list_items() -> None:
    result = view(
        "<ul>"
        '<li view-link="conversation:johnny">Johnny<ul><li>Last Message: Hello</li></ul></li>'
        '<li view-link="conversation:tui" description="Tech  support">TUI Group</li>'
        "</ul>"
    )
    assert result.markdown == (
        "- [Johnny](view:@conversation:johnny)\n"
        "    - Last Message: Hello\n"
        "- [TUI Group](view:@conversation:tui)\n"
        "    - Description: Tech support\n"
    )
    assert result.links == (
        ViewLink("conversation:johnny", "Johnny", ""),
        ViewLink("conversation:tui", "TUI Group", "Tech support"),
    )


def test_view_link_outside_a_list_is_a_bullet_of_its_own() -> None:
    assert md(
        '<h2>Navigation</h2><a view-link="conversations" description="会话列表">Conversations</a>'
        '<a view-link="contacts">Contacts</a><p>Text</p>'
    ) == (
        "## Navigation\n"
        "- [Conversations](view:@conversations)\n"
        "    - Description: 会话列表\n"
        "- [Contacts](view:@contacts)\n\nText\n"
    )


def test_view_link_on_a_semantic_item_keeps_the_ref() -> None:
    result = view(
        '<ul list="chat[]:chats"><li key="c1" view-link="conversation:c1" data-value="1">'
        "Ann</li></ul>"
    )
    assert result.markdown.splitlines()[1] == "- [Ann](view:@conversation:c1)"
    assert (result.refs, result.keys) == ({"chats[0]": 1}, {"chats[0]": "c1"})
    assert result.links == (ViewLink("conversation:c1", "Ann", ""),)


def test_view_links_are_listed_in_document_order_and_labelled_by_key_when_empty() -> None:
    result = view('<ul><li view-link="outer">Out<ul><li view-link="inner"></li></ul></li></ul>')
    assert [link.key for link in result.links] == ["outer", "inner"]
    assert result.markdown == "- [Out](view:@outer)\n    - [inner](view:@inner)\n"


@pytest.mark.parametrize("key", ["", "a b", "a/b", "a<b", "é"])
def test_bad_view_link_key_is_an_error(key: str) -> None:
    assert 'view-link="' in body_error(f'<a view-link="{key}">x</a>')


def test_duplicate_view_link_is_an_error() -> None:
    message = body_error('<a view-link="x">1</a><a view-link="x">2</a>')
    assert 'view-link="x"' in message
    assert "twice" in message


# --- ordinary HTML -----------------------------------------------------------------------------


@pytest.mark.parametrize("level", range(1, 7))
def test_headings(level: int) -> None:
    assert md(f"<h{level}> Title  <i>x</i> </h{level}>") == "#" * level + " Title *x*\n"


def test_blocks_spacing_paragraphs_and_breaks() -> None:
    assert (
        md(
            "<h2>H</h2><ul><li>a</li></ul><p>one\n  two<br>three</p><p>four</p><ol><li>b</li></ol>"
            "<ul><li>c</li></ul>"
        )
        == "## H\n- a\n\none two\nthree\n\nfour\n\n1. b\n\n- c\n"
    )


def test_whitespace_collapses_like_a_browser_and_nbsp_counts_as_space() -> None:
    assert md("<p>  a \t\n b&nbsp;&nbsp;c <span> d </span>e</p>") == "a b c d e\n"


def test_nested_lists_indent_four_spaces_and_ol_start() -> None:
    assert md('<ol start="3"><li>a<ul><li>b<ol><li>c</li></ol></li></ul></li><li>d</li></ol>') == (
        "3. a\n    - b\n        1. c\n4. d\n"
    )


def test_list_item_blocks_become_sub_bullets_and_stray_lists_nest() -> None:
    assert md("<ul><li><p>a</p><p>b</p><pre>x</pre></li><li>c</li><ul><li>d</li></ul></ul>") == (
        "- a\n    - b\n    ```\n    x\n    ```\n- c\n    - d\n"
    )


def test_table() -> None:
    assert md(
        "<table><caption>Cap</caption><tr><th>A</th><th>B|C</th></tr>"
        '<tr><td colspan="2">wide</td></tr><tr><td>1</td></tr><tr></tr></table>'
    ) == ("Cap\n\n| A | B\\|C |\n| --- | --- |\n| wide |  |\n| 1 |  |\n")


def test_empty_table_is_dropped() -> None:
    assert md("<table><tr><td> </td></tr></table><p>x</p>") == "x\n"


@pytest.mark.parametrize(
    ("html", "expected"),
    [
        ('<a href="https://e.com/a?b=1&amp;c=2">site</a>', "[site](https://e.com/a?b=1&c=2)"),
        ('<a href="javascript:alert(1)">js</a>', "js"),
        ('<a href=" Java\tScript:x">js</a>', "js"),
        ('<a href="data:text/html,x">data</a>', "data"),
        ('<a href="/a b(1)">sp</a>', "[sp](/a%20b%281%29)"),
        ('<a href="/x"></a>', ""),
        ("<a>no href</a>", "no href"),
        ('<a href="/x"><b>bold</b> [1]</a>', "[bold [1]](/x)"),
        ('<a href="/x"><div>Card</div><p>text</p></a>', "[Card](/x)\n\ntext"),
    ],
)
def test_links(html: str, expected: str) -> None:
    assert md(html) == (expected + "\n" if expected else "\n")


@pytest.mark.parametrize(
    ("html", "expected"),
    [
        ("<code>x = 1</code>", "`x = 1`"),
        ("<code>a `b` c</code>", "``a `b` c``"),
        ("<code>`x`</code>", "`` `x` ``"),
        ("a<code> b </code>c", "a `b` c"),
        ("<em>e</em> <strong>s</strong> <b> b </b>. <del>d</del>", "*e* **s** **b** . ~~d~~"),
        ("<b><i>both</i></b>", "***both***"),
        ("<b></b>x<i> </i>y", "x y"),
        ("<b>a<br>b</b>", "**a**\n**b**"),
        ('<img src="a.png" alt="Logo"> <img alt="">', "[image: Logo]"),
    ],
)
def test_inline_markup(html: str, expected: str) -> None:
    assert md(f"<p>{html}</p>") == expected + "\n"


def test_pre_keeps_whitespace_and_picks_a_longer_fence() -> None:
    assert md('<pre><code class="language-python">\n  a  b\n\tc\n</code></pre>') == (
        "```python\n  a  b\n\tc\n```\n"
    )
    assert md("<pre>x ``` y<br>z</pre>") == "````\nx ``` y\nz\n````\n"


def test_marks_inside_pre_are_an_error() -> None:
    assert "<pre>" in body_error('<pre><b entity="a:b">x</b></pre>')


@pytest.mark.parametrize(
    ("html", "expected"),
    [
        ('<input name="q" value="a  b">', '[input name="q" value="a b"]'),
        ('<input type="email" placeholder="@x">', '[input type="email" placeholder="@x"]'),
        ('<input type="password" name="p" value="secret">', '[input type="password" name="p"]'),
        ('<input type="hidden" name="h" value="v">x', "x"),
        ('<input type="checkbox" checked> a <input type="checkbox"> b', "[x] a [ ] b"),
        ('<input type="radio" checked> a <input type="radio"> b', "(x) a ( ) b"),
        ('<input type="submit" value="Save">', "Save"),
        ('<input value="say &quot;hi&quot;">', '[input value="say \\"hi\\""]'),
        ('<textarea name="t">a\n  b</textarea>', '[textarea name="t" value="a b"]'),
        ('<textarea placeholder="Type"></textarea>', '[textarea placeholder="Type"]'),
        (
            "<select name='s'><option>A</option><option selected>B</option></select>",
            '[select name="s": A | B (selected)]',
        ),
        (
            "<select><optgroup><option>A</option><option>B</option></optgroup></select>",
            "[select: A (selected) | B]",
        ),
        (
            "<select multiple><option>A</option><option label='Bee'>B</option></select>",
            "[select: A | Bee]",
        ),
        ("<select></select>", "[select]"),
        ("<label>Name <input name='n'></label>", 'Name [input name="n"]'),
        ("<button>Plain button</button>", "Plain button"),
    ],
)
def test_form_controls(html: str, expected: str) -> None:
    assert md(f"<p>{html}</p>") == expected + "\n"


def test_blockquote_hr_and_definitions() -> None:
    assert md(
        "<blockquote><p>a</p><p>b</p></blockquote><hr><dl><dd>loose</dd><dt>T</dt><dd>D</dd>"
        "<div><dt>M</dt><dd>1</dd><dd>2</dd></div><dt>Empty</dt></dl>"
    ) == ("> a\n>\n> b\n\n---\n\n- loose\n- T: D\n- M\n    - 1\n    - 2\n- Empty\n")


def test_dropped_elements_keep_their_tails() -> None:
    assert (
        md(
            "a<script>x</script>b<style>s</style>c<template>t</template>d<noscript>n</noscript>e"
            "<!-- c -->f<?pi x?>g<svg><title>icon</title></svg>h"
        )
        == "abcdefgh\n"
    )


def test_unknown_tags_render_their_content() -> None:
    assert md("<x-card><x-title>T</x-title> body</x-card>") == "T body\n"


def test_malformed_html_is_recovered() -> None:
    assert md("<p>a<b>b<i>c</b>d</i><ul><li>x<li>y</ul></div></span>") == (
        "a**b*c***d\n\n- x\n- y\n"
    )


def test_control_characters_and_line_separators_never_break_lines() -> None:
    result = md("<p>a\x01b\x0cc\rd\u2028e\u2029f\x85g &#1;h&#x2028;i&#133;j</p><pre>k\r\nl</pre>")
    assert result == "ab c d e f g h i…j\n\n```\nk\nl\n```\n"
    assert result.splitlines() == result.split("\n")[:-1]


def test_structural_text_is_escaped_even_when_split_across_nodes() -> None:
    result = view(
        '<p>&lt;<span></span>view id="v"&gt; &lt;/APPLICATION&gt;</p>'
        '<a view-link="k" description="&lt;/view&gt;">&lt;context&gt;</a>'
        '<button operation="o" description="&lt;desktop&gt;">&lt;view&gt;</button>'
    )
    assert "<view" not in result.markdown
    assert "</APPLICATION" not in result.markdown
    assert "&lt;view id=" in result.markdown
    assert result.links[0] == ViewLink("k", "&lt;context>", "&lt;/view>")
    assert (result.operations[0].label, result.operations[0].description) == (
        "&lt;view>",
        "&lt;desktop>",
    )


def test_output_invariants_and_determinism() -> None:
    document = (
        '<main view="V"><h1>T</h1>\n\n<p> a </p><p></p><div>  </div><br><br><br>'
        "<p>b<br><br><br><br>c</p><pre>x   \n\n\n\ny</pre></main>"
    )
    first = render_view(document).markdown
    assert first == render_view(document).markdown
    assert first.endswith("\n")
    assert not first.endswith("\n\n")
    assert "\n\n\n" not in first
    assert all(line == line.rstrip() for line in first.split("\n"))


@pytest.mark.parametrize(
    ("opening", "closing"),
    [
        ("<div>", "</div>"),
        ("<b>", "</b>"),
        ("<blockquote>", "</blockquote>"),
        ("<ul><li>", "</li></ul>"),
        ("<table><tr><td>", "</td></tr></table>"),
    ],
)
def test_nesting_up_to_the_parser_limit_renders(opening: str, closing: str) -> None:
    depth = 250 // opening.count("<")
    result = render_view(f'<div view="V">{opening * depth}deep{closing * depth}</div>')
    assert "deep" in result.markdown


def test_nesting_past_the_parser_limit_is_an_app_error() -> None:
    message = app_error('<div view="V">' + "<div>" * 300 + "x" + "</div>" * 300 + "</div>")
    assert "deeper than 255" in message


def test_empty_view_is_one_newline() -> None:
    assert md("") == "\n"
