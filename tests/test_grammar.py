"""The command language of CONTRACT §5: every form, every rule, every error message."""

from __future__ import annotations

import pickle
import re

import pytest

from aotui.protocol.commands import Action, ArgValues, Command
from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.grammar import COMMAND_FORMS, parse_commands

EXEC = '<context app_id="app_0" view_id="view_3">{}</context>'
VIEW = '<context app_id="app_0">{}</context>'


def one(text: str) -> Command:
    commands = parse_commands(text)
    assert len(commands) == 1
    return commands[0]


def args_of(body: str) -> dict[str, str | bool]:
    return dict(one(EXEC.format(f"execute op {body}")).args)


def fail(text: object) -> AotuiError:
    with pytest.raises(AotuiError) as info:
        parse_commands(text)  # type: ignore[arg-type]
    assert info.value.code is ErrorCode.E_INVALID_CMD
    return info.value


# --- the three kinds of command, both dialects ----------------------------------------------------


@pytest.mark.parametrize(
    ("verb", "action"),
    [
        ("open", Action.OPEN_APPLICATION),
        ("close", Action.CLOSE_APPLICATION),
        ("collapse", Action.COLLAPSE_APPLICATION),
        ("show", Action.SHOW_APPLICATION),
    ],
)
@pytest.mark.parametrize("form", ["{} --application app_1", "{} application --id app_1"])
def test_app_commands(verb: str, action: Action, form: str) -> None:
    assert one(f"<context>{form.format(verb)}</context>") == Command(
        action, "app_1", "app_1", None, {}
    )


@pytest.mark.parametrize(
    ("verb", "action"),
    [
        ("mount", Action.MOUNT_VIEW),
        ("dismount", Action.DISMOUNT_VIEW),
        ("hide", Action.HIDE_VIEW),
        ("show", Action.SHOW_VIEW),
    ],
)
@pytest.mark.parametrize("form", ["{} --view view_3", "{} view --id view_3"])
def test_view_commands(verb: str, action: Action, form: str) -> None:
    assert one(VIEW.format(form.format(verb))) == Command(action, "view_3", "app_0", "view_3", {})


@pytest.mark.parametrize(
    "body",
    [
        'execute reply_message --message_to_be_replied message_history[0] --content "Hi, Johnny"',
        "execute operation --id reply_message --message_to_be_replied message_history[0] "
        "--content 'Hi, Johnny'",
        "execute operation --message_to_be_replied message_history[0] --id=reply_message "
        '--content="Hi, Johnny"',
    ],
)
def test_execute_both_dialects(body: str) -> None:
    assert one(EXEC.format(body)) == Command(
        Action.EXECUTE,
        "reply_message",
        "app_0",
        "view_3",
        {"message_to_be_replied": "message_history[0]", "content": "Hi, Johnny"},
    )


def test_execute_of_an_operation_called_operation() -> None:
    command = one(EXEC.format("execute operation --content hi"))
    assert (command.target, dict(command.args)) == ("operation", {"content": "hi"})


def test_app_command_takes_its_app_from_the_argument_not_the_context() -> None:
    assert one(EXEC.format("open --application=com.example.notes")) == Command(
        Action.OPEN_APPLICATION, "com.example.notes", "com.example.notes", None, {}
    )


def test_view_command_in_a_context_with_view_id_targets_its_argument() -> None:
    command = one(EXEC.format("mount --view view_7"))
    assert (command.app_id, command.view_id, command.target) == ("app_0", "view_7", "view_7")


@pytest.mark.parametrize("app_id", ["app_0", "com.example.notes", "urn:x-1"])
def test_app_ids_may_be_manifest_ids(app_id: str) -> None:
    assert one(f'<context app_id="{app_id}">mount --view view_1</context>').app_id == app_id


# --- blocks, separators, prose --------------------------------------------------------------------


def test_contract_example_runs_in_order() -> None:
    text = (
        "<context>open --application app_1</context>\n"
        '<context app_id="app_0">mount --view view_3; mount --view view_4</context>\n'
        '<context app_id="app_0" view_id="view_3">\n'
        "  execute reply_message --message_to_be_replied message_history[0]"
        ' --content "Hi, Johnny"\n'
        "</context>"
    )
    assert [(c.action, c.target) for c in parse_commands(text)] == [
        (Action.OPEN_APPLICATION, "app_1"),
        (Action.MOUNT_VIEW, "view_3"),
        (Action.MOUNT_VIEW, "view_4"),
        (Action.EXECUTE, "reply_message"),
    ]


def test_prose_around_and_between_blocks_is_ignored() -> None:
    text = (
        "Let's open it, shan't we? <b>bold</b> \"quoted\" a<b a < b <contexts> </contexts>\n"
        "<context>open --application app_1</context> then, after that's done:\n"
        "<context app_id='app_1'>mount --view view_2</context> and that's all; really."
    )
    assert [c.target for c in parse_commands(text)] == ["app_1", "view_2"]


def test_seed_003_block_with_semicolons_and_newlines() -> None:
    text = (
        '<context app_id="app_0">\n    mount view --id view_3;\n    mount view --id view_4;\n'
        "</context>"
    )
    assert [c.target for c in parse_commands(text)] == ["view_3", "view_4"]


@pytest.mark.parametrize(
    "body",
    [
        "mount --view a; mount --view b",
        "mount --view a\nmount --view b",
        ";; mount --view a ;\n\n  ;mount --view b;",
        "\n\n  mount --view a  \n\t\n mount --view b\n\n",
        "mount --view a;\r\nmount --view b\r\n",
    ],
)
def test_separators_and_empty_commands(body: str) -> None:
    assert [c.target for c in parse_commands(VIEW.format(body))] == ["a", "b"]


@pytest.mark.parametrize(
    "body",
    [
        "execute op --a 1\n    --b 2\n--c",
        "execute op \\\n  --a 1 \\\n  --b 2 --c",
        "execute op --a 1 \\\n--b 2\n\t --c",
        "execute op\n  --a 1\r\n  --b 2 \\\r\n --c",
    ],
)
def test_continuation_lines(body: str) -> None:
    assert dict(one(EXEC.format(body)).args) == {"a": "1", "b": "2", "c": True}


def test_a_semicolon_ends_a_command_even_before_a_dash_line() -> None:
    error = fail(VIEW.format("mount --view a;\n--view b"))
    assert error.data["command"] == 2
    assert "'--view'" in error.message


@pytest.mark.parametrize(
    "tag",
    [
        "<context app_id=\"app_0\" view_id='view_3'>",
        "<context   app_id = 'app_0'\n   view_id =\"view_3\"  >",
        '<context app_id="app_0"view_id="view_3">',
        "<context app_id=app_0 view_id=view_3>",
        '<context view_id="view_3" app_id="app_0">',
    ],
)
def test_attribute_spellings(tag: str) -> None:
    command = one(f"{tag}execute op</context>")
    assert (command.app_id, command.view_id) == ("app_0", "view_3")


def test_context_tag_tolerates_space_before_close() -> None:
    assert one("<context >open --application a</context >").target == "a"


# --- arguments ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("--key value", {"key": "value"}),
        ("--key=value", {"key": "value"}),
        ("--key=", {"key": ""}),
        ('--key ""', {"key": ""}),
        ('--key "with spaces"', {"key": "with spaces"}),
        ("--key 'single quoted'", {"key": "single quoted"}),
        ('--key="a b"', {"key": "a b"}),
        ("--a \"x\"'y'z", {"a": "xyz"}),
        ('--a pre"mid dle"post', {"a": "premid dlepost"}),
        ("--flag", {"flag": True}),
        ("--flag --other x", {"flag": True, "other": "x"}),
        ("--n -5 --m -x --o -", {"n": "-5", "m": "-x", "o": "-"}),
        ('--text "--not-an-option"', {"text": "--not-an-option"}),
        ("--text=--x", {"text": "--x"}),
        ("--a=b=c", {"a": "b=c"}),
        ("--title? hello", {"title": "hello"}),
        ("--snake_case-and-dash x", {"snake_case-and-dash": "x"}),
        ("--ref message_history[0]", {"ref": "message_history[0]"}),
        ("--cmp a<b --html '<b>x</b>'", {"cmp": "a<b", "html": "<b>x</b>"}),
        ("--u 你好，世界 --e '🎉 ok' --z Zürich", {"u": "你好，世界", "e": "🎉 ok", "z": "Zürich"}),
        ('--multi "line one\nline two"', {"multi": "line one\nline two"}),
        ("--a x\u00a0--b\u2003y", {"a": "x", "b": "y"}),  # any Unicode space separates words
    ],
)
def test_argument_forms(body: str, expected: dict[str, str | bool]) -> None:
    assert args_of(body) == expected


def test_argument_order_is_kept() -> None:
    assert list(args_of("--z 1 --a 2 --m 3")) == ["z", "a", "m"]


@pytest.mark.parametrize(
    ("quoted", "value"),
    [
        (r'"say \"hi\""', 'say "hi"'),
        (r'"back\\slash"', "back\\slash"),
        (r'"tab\there"', "tab\there"),
        (r'"new\nline"', "new\nline"),
        (r'"it\'s"', "it's"),
        (r'"C:\Users\d"', r"C:\Users\d"),
        ('"joined \\\nline"', "joined line"),
        (r"'it\'s'", "it's"),
        (r"'back\\slash'", "back\\slash"),
        (r"'raw\n\t\"'", r"raw\n\t\""),
        (r"un\ quoted", "un quoted"),
        (r"\"lit\"", '"lit"'),
        (r"semi\;colon", "semi;colon"),
        (r"\-\-x", "--x"),
        (r"\n", "n"),
    ],
)
def test_escapes(quoted: str, value: str) -> None:
    assert args_of(f"--v {quoted}") == {"v": value}


def test_separators_inside_quotes_do_not_split() -> None:
    assert args_of("--a 'x; y\nz' --b \"p;q\"") == {"a": "x; y\nz", "b": "p;q"}


def test_escaped_context_tag_in_an_unquoted_value() -> None:
    assert args_of(r"--v \</context>") == {"v": "</context>"}


# --- the command value ----------------------------------------------------------------------------


def test_command_is_frozen_hashable_and_picklable() -> None:
    command = one(EXEC.format("execute op --a 1 --b"))
    assert isinstance(command.args, ArgValues)
    with pytest.raises(TypeError):
        command.args["a"] = "2"  # type: ignore[index]
    assert hash(command) == hash(one(EXEC.format("execute op --b --a 1")))
    assert pickle.loads(pickle.dumps(command)) == command


# --- errors: where, what, and the correct form ----------------------------------------------------


@pytest.mark.parametrize("text", ["", "just prose", "open --application app_1", "<contexts>x"])
def test_no_context_block(text: str) -> None:
    error = fail(text)
    assert "no <context> block" in error.message
    assert COMMAND_FORMS["open"] in error.message


def test_non_text_is_rejected() -> None:
    assert "must be text" in fail(b"<context>open --application a</context>").message


def test_unclosed_block() -> None:
    error = fail("hi <context>open --application app_1")
    assert "never closed" in error.message
    assert "</context>" in error.message
    assert error.data == {"line": 1, "column": 4, "block": 1, "token": "<context"}


@pytest.mark.parametrize(
    "text", ["</context>", "<context>open --application a</context> done </context>"]
)
def test_stray_closing_tag(text: str) -> None:
    error = fail(text)
    assert "without an opening <context>" in error.message
    assert error.data["token"] == "</context>"
    assert error.data["column"] == text.rindex("</context>") + 1


def test_nested_block() -> None:
    error = fail("<context>open --application a\n  <context>open --application b</context>")
    assert "cannot open inside another" in error.message
    assert (error.data["line"], error.data["column"]) == (2, 3)


@pytest.mark.parametrize(
    ("tag", "words"),
    [
        ('<context app="app_0">', ["unknown <context> attribute 'app'", "app_id"]),
        ('<context app_id="a" app_id="b">', ["app_id given twice"]),
        ("<context app_id>", ["app_id needs a value"]),
        ('<context app_id="">', ["app_id is empty"]),
        ('<context view_id="view 3">', ["view_id 'view 3' is not an id"]),
        ('<context "app_0">', ["malformed <context> attribute"]),
        ('<context app_id="app_0"/>', ["holds no command"]),
    ],
)
def test_bad_attributes(tag: str, words: list[str]) -> None:
    error = fail(f"{tag}open --application a</context>")
    for word in words:
        assert word in error.message
    assert error.data["block"] == 1


@pytest.mark.parametrize("text", ['<context app_id="app_0 >x</context>', "<context app_id='a"])
def test_malformed_open_tag(text: str) -> None:
    assert "malformed <context> tag" in fail(text).message


@pytest.mark.parametrize("body", ["", "  \n ", ";;", "\n;\n"])
def test_block_without_command(body: str) -> None:
    error = fail(f"<context>open --application a</context><context>{body}</context>")
    assert "no command" in error.message
    assert error.data["block"] == 2


@pytest.mark.parametrize("verb", ["launch", "Open", "--open", "-o", "'exec'"])
def test_unknown_verb_lists_every_form(verb: str) -> None:
    error = fail(f"<context>{verb} --application a</context>")
    assert "unknown command" in error.message
    for word in ("open|close|collapse|show --application", "mount|dismount|hide|show --view"):
        assert word in error.message
    assert "execute <operation_id>" in error.message


@pytest.mark.parametrize("verb", ["mount", "dismount", "hide", "show"])
def test_view_command_needs_app_id(verb: str) -> None:
    error = fail(f"<context>\n  {verb} --view view_3</context>")
    assert f'{verb} needs app_id on its context: <context app_id="app_0">{verb} --view view_3' in (
        error.message
    )
    assert error.data == {"line": 2, "column": 3, "block": 1, "command": 1, "token": verb}


@pytest.mark.parametrize(
    ("tag", "missing", "form"),
    [
        ("<context>", "app_id and view_id", '<context app_id="app_0" view_id="view_3">'),
        ('<context app_id="app_5">', "view_id", '<context app_id="app_5" view_id="view_3">'),
        ('<context view_id="view_9">', "app_id", '<context app_id="app_0" view_id="view_9">'),
    ],
)
def test_execute_needs_app_and_view(tag: str, missing: str, form: str) -> None:
    error = fail(f"{tag}execute send --content hi</context>")
    assert f"execute needs {missing} on its context: {form}execute send" in error.message


@pytest.mark.parametrize("body", ["execute", "execute --content hi", "execute\n--content hi"])
def test_execute_needs_an_operation(body: str) -> None:
    error = fail(EXEC.format(body))
    assert "execute needs an operation id" in error.message
    assert COMMAND_FORMS["execute"] in error.message


def test_execute_operation_dialect_needs_an_id_value() -> None:
    assert "--id needs a value" in fail(EXEC.format("execute operation --id --x 1")).message


def test_short_option() -> None:
    error = fail(EXEC.format("execute op -k v"))
    assert "short options are not supported, write --k" in error.message
    assert error.data["token"] == "-k"


def test_duplicate_key() -> None:
    error = fail(EXEC.format("execute op --a 1 --b 2 --a=3"))
    assert "--a is given twice" in error.message
    assert error.data["column"] == len('<context app_id="app_0" view_id="view_3">execute op') + 14


@pytest.mark.parametrize(
    ("body", "token"),
    [
        ("execute op stray", "stray"),
        ("execute op --a 1 two", "two"),
        ("execute op --a 1 'quoted stray'", "quoted stray"),
    ],
)
def test_stray_positional(body: str, token: str) -> None:
    error = fail(EXEC.format(body))
    assert f"unexpected {token!r}" in error.message
    assert error.data["token"] == token


@pytest.mark.parametrize("key", ["--", "--1abc", "--a.b", "--=x", "--é"])
def test_bad_option_names(key: str) -> None:
    error = fail(EXEC.format(f"execute op {key} v"))
    assert "is not an option name" in error.message
    assert error.data["token"] == key


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ('execute op --a "x', ['unterminated " quote']),
        ("execute op --a 'x", ["unterminated ' quote", "double quotes"]),
        ("execute op --a it's", ["unterminated ' quote"]),
        ('execute op --a "x</context>"', ['unterminated " quote', "cannot contain"]),
    ],
)
def test_unterminated_quotes(body: str, words: list[str]) -> None:
    error = fail(EXEC.format(body))
    for word in words:
        assert word in error.message
    assert error.data["column"] == EXEC.index("{") + body.index(error.data["token"]) + 1


def test_trailing_backslash() -> None:
    assert "backslash" in fail("<context>open --application a \\").message


def test_malformed_closing_tag() -> None:
    error = fail("<context>open --application a</context foo>")
    assert "malformed closing tag" in error.message


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("<context>open --application</context>", ["--application needs a value"]),
        ("<context>open --application --x</context>", ["--application needs a value"]),
        ('<context>open --application ""</context>', ["--application is empty"]),
        ('<context>open --application "a b"</context>', ["'a b' is not an id"]),
        ("<context>open app_1</context>", ["unexpected 'app_1'", "open --application app_1"]),
        ("<context>open application app_1</context>", ["unexpected 'app_1'"]),
        ("<context>open --id app_1</context>", ["open takes --application"]),
        ("<context>open --view v</context>", ["open takes an application, not a view"]),
        ("<context>open --application a --force</context>", ["open takes no --force"]),
        ("<context>open application --id a --application b</context>", ["no --application"]),
        ("<context>show</context>", ["show takes --application or --view", "show --view"]),
        ("<context>show --application a --view b</context>", ["not both"]),
        (VIEW.format("mount --application a"), ["mount takes a view, not an application"]),
        (VIEW.format("mount application --id a"), ["mount takes a view, not an application"]),
        (VIEW.format("hide"), ["hide takes --view"]),
        (VIEW.format("dismount --view v --now"), ["dismount takes no --now"]),
    ],
)
def test_app_and_view_command_errors(text: str, words: list[str]) -> None:
    error = fail(text)
    for word in words:
        assert word in error.message
    assert error.data["command"] == 1


def test_error_locates_block_command_line_and_column() -> None:
    text = (
        "Plan:\n<context>open --application a</context>\n"
        '<context app_id="app_0">\n  mount --view v1\n  mount --view v2 --x\n</context>'
    )
    error = fail(text)
    assert error.data == {"line": 5, "column": 3, "block": 2, "command": 2, "token": "x"}
    assert error.message.startswith("context block 2, command 2, line 5 column 3: ")


def test_an_error_anywhere_rejects_the_whole_message() -> None:
    with pytest.raises(AotuiError):
        parse_commands("<context>open --application a</context><context>bogus</context>")


def test_error_codes_are_recoverable_invalid_cmd() -> None:
    error = fail("<context>nope</context>")
    assert error.recoverable
    assert error.to_dict()["data"]["token"] == "nope"


def test_no_possessive_or_atomic_regex() -> None:
    # CPython 3.11.0-3.11.4 (Debian 12 ships 3.11.2) match `*+`, `++`, `?+` and `(?>…)` wrongly
    # beside a lookahead: every command failed as "never closed". Keep the grammar to plain
    # quantifiers so it means the same on every supported interpreter.
    import aotui.protocol.grammar as grammar

    for name, value in vars(grammar).items():
        if isinstance(value, re.Pattern):
            pattern = re.sub(r"\\.|\[[^\]]*\]", "", value.pattern)  # escapes and classes
            assert not re.search(r"[*+?}]\+|\(\?>", pattern), f"{name} uses a possessive form"


def test_tag_right_after_bare_word() -> None:
    # The shape 3.11.2 got wrong: a bare word running straight into the closing tag.
    (command,) = parse_commands("<context>open --application app_2</context>")
    assert (command.action, command.target) == (Action.OPEN_APPLICATION, "app_2")
