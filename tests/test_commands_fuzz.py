"""Fuzzing the command parsers: any input gives a result or a typed error, never a crash."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aotui.protocol.args import coerce_args, parse_arg_schema, parse_ref
from aotui.protocol.commands import Command
from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.grammar import parse_commands

FUZZ = settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# The argument and structured-form checks have smaller input spaces; fewer runs keep the file quick.
FUZZ_SMALL = settings(FUZZ, max_examples=200)

T = TypeVar("T")

FRAGMENTS = st.sampled_from(
    [
        "<context>", "</context>", "<context ", "</context", "<context/>", ">", "<", "/",
        'app_id="app_0"', "app_id='app_0'", 'view_id="view_3"', "app_id=", "view_id", "=",
        "open", "close", "collapse", "show", "mount", "dismount", "hide", "execute",
        "application", "view", "operation", "--application", "--view", "--id", "--content",
        "--flag", "--a=", "--", "-", "-k", "-5", "app_1", "view_3", "com.example.notes",
        "message_history[0]", "list[-1]", '"', "'", '\\"', "\\'", "\\", "\\\n", ";", "\n",
        "\r\n", " ", "\t", "  ", "\u00a0", "你好", "🎉", "?", "[", "]", "x", "\x00",
    ]
)  # fmt: skip
GRAMMARISH = st.lists(FRAGMENTS, max_size=40).map("".join)
IN_BLOCK = st.builds(
    lambda body: f'<context app_id="app_0" view_id="view_3">{body}</context>', GRAMMARISH
)


def attempt(action: Callable[[], T]) -> T | AotuiError:
    """The result of ``action``, or the ``AotuiError`` it raised; anything else propagates."""
    try:
        return action()
    except AotuiError as exc:
        return exc


def only_invalid_cmd(text: str) -> list[Command]:
    commands = attempt(lambda: parse_commands(text))
    if isinstance(commands, AotuiError):
        assert commands.code is ErrorCode.E_INVALID_CMD
        assert commands.message
        return []
    assert commands
    return commands


@FUZZ
@given(st.text(max_size=300))
def test_arbitrary_text(text: str) -> None:
    only_invalid_cmd(text)


@FUZZ
@given(st.one_of(GRAMMARISH, IN_BLOCK))
def test_grammar_fragments(text: str) -> None:
    for command in only_invalid_cmd(text):
        # Whatever parses is a well-formed command that survives the structured form.
        assert Command.from_structured(command.to_structured()) == command


@FUZZ_SMALL
@given(
    st.dictionaries(st.from_regex(r"[a-z_][a-z0-9_]{0,5}", fullmatch=True), st.text(), max_size=4)
)
def test_quoted_values_round_trip(values: dict[str, str]) -> None:
    def quote(value: str) -> str:
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        return f'"{escaped}"'

    body = " ".join(f"--{key} {quote(value)}" for key, value in values.items())
    text = f'<context app_id="a" view_id="v">execute op {body}</context>'
    if "<context" in text[9:] or "</context" in text[: -len("</context>")]:
        return  # a value may not hold a tag; covered by the unit tests
    # Line ends are normalized before parsing, even inside quotes.
    expected = {key: value.replace("\r\n", "\n") for key, value in values.items()}
    assert dict(parse_commands(text)[0].args) == expected


JSONISH: st.SearchStrategy[Any] = st.recursive(
    # 10**5000 is past the digit limit of int → str: its repr raises ValueError.
    st.none()
    | st.booleans()
    | st.integers()
    | st.builds(pow, st.just(10), st.just(5000))
    | st.floats()
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
TYPE_NAMES = st.sampled_from(["string", "number", "integer", "boolean", "message", "str", "x[]"])
RAW_VALUES = st.one_of(
    st.booleans(),
    st.text(max_size=20),
    st.from_regex(r"[+-]?[0-9]{0,6}(\.[0-9]*)?([eE][+-]?[0-9]{1,4})?", fullmatch=True),
    st.sampled_from(["true", "off", "nan", "inf", "m[0]", "m[-1]", "m[x]", "e_1", " 1 "]),
)


@FUZZ_SMALL
@given(
    st.one_of(
        JSONISH,
        st.text(max_size=60),
        st.dictionaries(st.text(max_size=8), st.one_of(TYPE_NAMES, JSONISH), max_size=5),
    )
)
def test_parse_arg_schema(spec: Any) -> None:
    schema = attempt(lambda: parse_arg_schema(spec))
    if isinstance(schema, AotuiError):
        assert schema.code is ErrorCode.E_APP_ERROR
        return
    assert parse_arg_schema(schema.to_dict()) == schema


@FUZZ_SMALL
@given(
    st.dictionaries(st.from_regex(r"[a-c]\??", fullmatch=True), TYPE_NAMES, max_size=3),
    st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), RAW_VALUES, max_size=4),
)
def test_coerce_args(spec: dict[str, str], raw: dict[str, str | bool]) -> None:
    try:
        schema = parse_arg_schema(spec)
    except AotuiError:
        return
    result = attempt(lambda: coerce_args(schema, raw))
    if isinstance(result, AotuiError):
        assert result.code is ErrorCode.E_INVALID_CMD
        return
    assert set(result.args) <= set(raw)
    assert result.stable_keys == {}


@FUZZ_SMALL
@given(
    st.one_of(st.text(max_size=30), st.from_regex(r"[a-z_]{1,8}\[[-0-9a ]{0,12}\]", fullmatch=True))
)
def test_parse_ref(text: str) -> None:
    ref = attempt(lambda: parse_ref(text))
    if isinstance(ref, AotuiError):
        assert ref.code is ErrorCode.E_INVALID_CMD
        return
    name, index = ref
    assert name
    assert index is None or index >= 0


@FUZZ_SMALL
@given(
    st.one_of(
        JSONISH,
        st.fixed_dictionaries(
            {},
            optional={
                "action": st.one_of(
                    st.sampled_from(["execute", "mount_view", "open_application"]), JSONISH
                ),
                "app": st.one_of(st.sampled_from(["app_0", ""]), JSONISH),
                "view": st.one_of(st.just("view_1"), JSONISH),
                "operation": st.one_of(st.just("op"), JSONISH),
                "args": st.one_of(
                    st.dictionaries(st.text(max_size=5), JSONISH, max_size=3), JSONISH
                ),
                "snapshot_id": st.one_of(st.just("T1"), JSONISH),
            },
        ),
    )
)
def test_from_structured(obj: Any) -> None:
    command = attempt(lambda: Command.from_structured(obj))
    if isinstance(command, AotuiError):
        assert command.code is ErrorCode.E_INVALID_CMD
        return
    assert Command.from_structured(command.to_structured()) == command
