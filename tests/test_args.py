"""Argument schemas, coercion and refs (CONTRACT §3, §5), and the structured command form."""

from __future__ import annotations

from typing import Any

import pytest

from aotui.protocol.args import (
    ArgSchema,
    CoercedArgs,
    Param,
    ResolvedRef,
    coerce_args,
    parse_arg_schema,
    parse_ref,
)
from aotui.protocol.commands import Action, ArgValues, Command
from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.grammar import parse_commands

REPLY = parse_arg_schema('{"message_to_be_replied": "message", "content": "string"}')


def invalid(schema: ArgSchema, raw: dict[str, str | bool]) -> AotuiError:
    with pytest.raises(AotuiError) as info:
        coerce_args(schema, raw)
    assert info.value.code is ErrorCode.E_INVALID_CMD
    return info.value


def schema_error(spec: Any) -> AotuiError:
    with pytest.raises(AotuiError) as info:
        parse_arg_schema(spec, operation="send")
    assert info.value.code is ErrorCode.E_APP_ERROR
    assert info.value.message.startswith("operation 'send': ")
    return info.value


def one(type_name: str, value: str | bool) -> Any:
    return coerce_args(parse_arg_schema({"v": type_name}), {"v": value}).args["v"]


# --- schemas --------------------------------------------------------------------------------------


def test_schema_from_json_and_back() -> None:
    spec = '{"message_to_be_replied": "message", "count?": "integer", "loud?": "boolean"}'
    schema = parse_arg_schema(spec)
    assert schema.params == (
        Param("message_to_be_replied", "message", False),
        Param("count", "integer", True),
        Param("loud", "boolean", True),
    )
    assert schema.to_dict() == {
        "message_to_be_replied": "message",
        "count?": "integer",
        "loud?": "boolean",
    }
    assert parse_arg_schema(schema.to_dict()) == schema
    assert (
        schema.usage == "--message_to_be_replied <message> [--count <integer>] [--loud <boolean>]"
    )
    assert schema.get("count") == Param("count", "integer", True)
    assert schema.get("count?") is None


def test_empty_schema() -> None:
    assert parse_arg_schema("{}") == ArgSchema()
    assert ArgSchema().usage == "(no arguments)"


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("{not json", ["not valid JSON"]),
        ("[1, 2]", ["must be a JSON object", "list"]),
        ('"string"', ["must be a JSON object", "str"]),
        (42, ["must be a JSON object", "int"]),
        ('{"a": "string", "a": "number"}', ["'a' twice"]),
        ('{"a": "string", "a?": "number"}', ["'a' twice"]),
        ('{"a": 3}', ["'a' has type 3", "string, number, integer, boolean"]),
        ('{"a": "message[]"}', ["'message[]'"]),
        ('{"a": ""}', ["has type ''"]),
        ('{"a": "str"}', ["did you mean string"]),
        ('{"a": "int"}', ["did you mean integer"]),
        ('{"1a": "string"}', ["'1a' is not a name"]),
        ('{"a b": "string"}', ["'a b' is not a name"]),
        ('{"a??": "string"}', ["'a??' is not a name"]),
        ({1: "string"}, ["1 is not a name"]),
        ({10**5000: "string"}, ["<int> is not a name"]),
        ({"a": 10**5000}, ["'a' has type <int>"]),
        ("[" * 100_000, ["not valid JSON"]),
    ],
)
def test_bad_schemas_are_app_errors(spec: Any, words: list[str]) -> None:
    error = schema_error(spec)
    for word in words:
        assert word in error.message


# --- coercion -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("type_name", "value", "expected"),
    [
        ("string", "Hi, Johnny", "Hi, Johnny"),
        ("string", "", ""),
        ("string", " padded ", " padded "),
        ("integer", "42", 42),
        ("integer", "-5", -5),
        ("integer", "+7", 7),
        ("integer", " 8 ", 8),
        ("number", "3", 3),
        ("number", "-2.5", -2.5),
        ("number", ".5", 0.5),
        ("number", "1e3", 1000.0),
        ("number", "1.", 1.0),
        ("boolean", True, True),
        ("boolean", False, False),
        ("boolean", "TRUE", True),
        ("boolean", "yes", True),
        ("boolean", "On", True),
        ("boolean", "1", True),
        ("boolean", "false", False),
        ("boolean", "No", False),
        ("boolean", "off", False),
        ("boolean", "0", False),
    ],
)
def test_scalar_coercion(type_name: str, value: str | bool, expected: Any) -> None:
    result = one(type_name, value)
    assert result == expected
    assert type(result) is type(expected)


@pytest.mark.parametrize(
    ("type_name", "value", "message"),
    [
        ("integer", "abc", '--v expects an integer, got "abc"'),
        ("integer", "1.5", '--v expects an integer, got "1.5"'),
        ("integer", "1_000", "expects an integer"),
        ("integer", "١٢", "expects an integer"),
        ("integer", "", 'expects an integer, got ""'),
        ("integer", "9" * 5000, "expects an integer"),
        ("integer", True, "--v needs a value (integer)"),
        ("number", "nan", "expects a number"),
        ("number", "inf", "expects a number"),
        ("number", "1e999", "expects a number"),
        ("number", "0x10", "expects a number"),
        ("number", "9" * 5000, "expects a number"),
        ("number", True, "--v needs a value (number)"),
        ("boolean", "maybe", "expects a boolean (true/false, yes/no, on/off, 1/0)"),
        ("string", True, "--v needs a value (string)"),
        ("string", False, "--v needs a value (string)"),
        ("message", True, "--v needs a value (message)"),
        ("message", "hello world", "--v expects a message ref like list_id[0]"),
        ("message", "list[-1]", "an index is a whole number from 0"),
    ],
)
def test_uncoercible_values_name_the_argument_and_type(
    type_name: str, value: str | bool, message: str
) -> None:
    error = invalid(parse_arg_schema({"v": type_name}), {"v": value})
    assert message in error.message
    assert error.data == {"arg": "v", "expected": type_name}


def test_long_values_are_shortened_in_messages() -> None:
    error = invalid(parse_arg_schema({"v": "integer"}), {"v": "x" * 500})
    assert len(error.message) < 200


def test_unknown_argument_lists_accepted_names() -> None:
    error = invalid(REPLY, {"content": "hi", "contnet": "hi"})
    assert "unknown argument --contnet" in error.message
    assert "accepted: --message_to_be_replied, --content" in error.message
    assert error.data["arg"] == "contnet"
    assert error.data["accepted"] == ["message_to_be_replied", "content"]


def test_unknown_argument_of_an_operation_without_arguments() -> None:
    assert "accepted: none" in invalid(ArgSchema(), {"x": True}).message


def test_missing_required_arguments_are_named_with_types() -> None:
    error = invalid(REPLY, {})
    assert (
        "missing required arguments --message_to_be_replied (message), --content (string)"
        in error.message
    )
    assert error.data["arg"] == "message_to_be_replied"
    assert error.data["missing"] == ["message_to_be_replied", "content"]
    single = invalid(REPLY, {"message_to_be_replied": "m[0]"})
    assert "missing required argument --content (string)" in single.message


def test_optional_arguments_may_be_left_out() -> None:
    schema = parse_arg_schema({"title?": "string", "n": "integer"})
    assert coerce_args(schema, {"n": "1"}) == CoercedArgs({"n": 1}, {})


def test_refs_without_a_resolver_stay_raw() -> None:
    result = coerce_args(REPLY, {"content": "hi", "message_to_be_replied": " message_history[0] "})
    assert result == CoercedArgs(
        {"message_to_be_replied": "message_history[0]", "content": "hi"}, {}
    )


def test_refs_resolve_to_recorded_values_and_stable_keys() -> None:
    calls: list[tuple[str, str]] = []

    def resolve(ref: str, expected_type: str) -> ResolvedRef:
        calls.append((ref, expected_type))
        return ResolvedRef({"id": "msg_101", "text": "Hello"}, "msg_101")

    command = parse_commands(
        '<context app_id="app_0" view_id="view_3">execute reply_message '
        '--message_to_be_replied message_history[0] --content "Hi, Johnny"</context>'
    )[0]
    result = coerce_args(REPLY, command.args, resolve)
    assert calls == [("message_history[0]", "message")]
    assert result.args == {
        "message_to_be_replied": {"id": "msg_101", "text": "Hello"},
        "content": "Hi, Johnny",
    }
    assert result.stable_keys == {"message_to_be_replied": "msg_101"}


@pytest.mark.parametrize("code", [ErrorCode.E_NOT_FOUND, ErrorCode.E_STALE_STATE])
def test_resolver_errors_pass_through_unchanged(code: ErrorCode) -> None:
    raised = AotuiError(code, "no such ref", {"ref": "m[9]"})

    def resolve(ref: str, expected_type: str) -> ResolvedRef:
        raise raised

    with pytest.raises(AotuiError) as info:
        coerce_args(REPLY, {"message_to_be_replied": "m[9]", "content": "x"}, resolve)
    assert info.value is raised


def test_malformed_ref_is_rejected_before_the_resolver() -> None:
    def resolve(ref: str, expected_type: str) -> ResolvedRef:
        raise AssertionError("not called")

    with pytest.raises(AotuiError) as info:
        coerce_args(REPLY, {"message_to_be_replied": "m[x]", "content": "x"}, resolve)
    assert info.value.code is ErrorCode.E_INVALID_CMD
    assert "--message_to_be_replied expects a message ref" in info.value.message


# --- refs -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("message_history[3]", ("message_history", 3)),
        ("list[0]", ("list", 0)),
        ("m[ 12 ]", ("m", 12)),
        ("  conversation_title ", ("conversation_title", None)),
        ("msg_101", ("msg_101", None)),
        ("com.example:x-1", ("com.example:x-1", None)),
    ],
)
def test_parse_ref(text: str, expected: tuple[str, int | None]) -> None:
    assert parse_ref(text) == expected


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", ["is not a ref"]),
        ("a b", ["is not a ref"]),
        ("[0]", ["is not a ref"]),
        ("m[0][1]", ["is not a ref"]),
        ("m[0", ["is not a ref"]),
        ("m[-1]", ["index [-1]", "m[0]"]),
        ("m[1.5]", ["index [1.5]"]),
        ("m[]", ["index []"]),
        ("m[٣]", ["index [٣]"]),
        ("m[12345678901]", ["too large"]),
    ],
)
def test_malformed_refs(text: str, words: list[str]) -> None:
    with pytest.raises(AotuiError) as info:
        parse_ref(text)
    assert info.value.code is ErrorCode.E_INVALID_CMD
    for word in words:
        assert word in info.value.message


# --- structured form ------------------------------------------------------------------------------

STRUCTURED_EXAMPLES: list[dict[str, Any]] = [
    {
        "app": "app_0",
        "view": "view_3",
        "operation": "reply_message",
        "args": {"message_to_be_replied": "message_history[0]", "content": "Hi", "loud": True},
        "snapshot_id": "T17",
    },
    {"app": "app_0", "view": "view_3", "operation": "op", "args": {}, "snapshot_id": None},
    {"action": "open_application", "app": "com.example.notes"},
    {"action": "close_application", "app": "app_1", "snapshot_id": "T2"},
    {"action": "mount_view", "app": "app_0", "view": "view_3"},
    {"action": "show_view", "app": "app_0", "view": "view_3", "snapshot_id": "T9"},
]


@pytest.mark.parametrize("obj", STRUCTURED_EXAMPLES)
def test_structured_round_trip(obj: dict[str, Any]) -> None:
    command = Command.from_structured(obj)
    assert command.to_structured() == obj
    assert Command.from_structured(command.to_structured()) == command


def test_every_parsed_command_round_trips() -> None:
    text = (
        "<context>open --application app_1; collapse application --id app_2</context>"
        '<context app_id="app_0" view_id="view_3">mount --view view_4\n'
        "hide --view view_1; execute op --a 1 --b --c 'x y'</context>"
    )
    for command in parse_commands(text):
        bound = command.with_snapshot("T5")
        assert bound.snapshot_id == "T5"
        assert command.snapshot_id is None
        assert Command.from_structured(bound.to_structured()) == bound


def test_structured_execute_with_explicit_action_and_defaults() -> None:
    command = Command.from_structured(
        {"action": "execute", "app": "app_0", "view": "v", "operation": "op"}
    )
    assert command == Command(Action.EXECUTE, "op", "app_0", "v", ArgValues())


def test_structured_numbers_become_raw_text() -> None:
    command = Command.from_structured(
        {"app": "a", "view": "v", "operation": "op", "args": {"n": 3, "x": 1.5}}
    )
    assert dict(command.args) == {"n": "3", "x": "1.5"}
    schema = parse_arg_schema({"n": "integer", "x": "number"})
    assert coerce_args(schema, command.args).args == {"n": 3, "x": 1.5}


@pytest.mark.parametrize(
    ("obj", "field", "words"),
    [
        ([], None, ["must be an object", "list"]),
        ({}, "action", ["needs 'operation'"]),
        ({"action": "launch", "app": "a"}, "action", ["must be one of", "open_application"]),
        ({"action": 3, "app": "a"}, "action", ["must be one of"]),
        ({"action": "open_application"}, "app", ["missing field 'app'"]),
        ({"action": "open_application", "app": ""}, "app", ["non-empty id"]),
        ({"action": "open_application", "app": 7}, "app", ["non-empty id", "7"]),
        ({"action": "open_application", "app": 10**5000}, "app", ["got <int>"]),
        ({"action": 10**5000}, "action", ["got <int>"]),
        ({"operation": "op", 10**5000: 1}, "<int>", ["unknown field <int>"]),
        ({"action": "open_application", "app": "a", "view": "v"}, "view", ["unknown field"]),
        ({"action": "mount_view", "app": "a"}, "view", ["missing field 'view'"]),
        ({"operation": "op", "app": "a"}, "view", ["missing field 'view'"]),
        ({"operation": "op", "app": "a", "view": "v", "extra": 1}, "extra", ["'extra'"]),
        ({"operation": "op", "app": "a", "view": "v", "args": []}, "args", ["must be an object"]),
        ({"operation": "op", "app": "a", "view": "v", "args": {"a b": "x"}}, "args", ["a b"]),
        ({"operation": "op", "app": "a", "view": "v", "args": {"a": None}}, "args", ["NoneType"]),
        ({"operation": "op", "app": "a", "view": "v", "args": {"a": [1]}}, "args", ["list"]),
        ({"operation": "op", "app": "a", "view": "v", "args": {"a": 10**5000}}, "args", ["large"]),
        ({"operation": "o p", "app": "a", "view": "v"}, "operation", ["non-empty id"]),
        ({"operation": "op", "app": "a", "view": "v", "snapshot_id": 5}, "snapshot_id", ["id"]),
    ],
)
def test_structured_errors_name_the_field(obj: Any, field: str | None, words: list[str]) -> None:
    with pytest.raises(AotuiError) as info:
        Command.from_structured(obj)
    assert info.value.code is ErrorCode.E_INVALID_CMD
    assert info.value.data.get("field") == field
    for word in words:
        assert word in info.value.message


def test_arg_values_behave_like_a_frozen_mapping() -> None:
    values = ArgValues({"a": "1", "b": True})
    assert values == {"a": "1", "b": True}
    assert values != {"a": "1"}
    assert values != 3
    assert list(values) == ["a", "b"]
    assert len(values) == 2
    assert hash(values) == hash(ArgValues({"b": True, "a": "1"}))
    assert repr(values) == "ArgValues({'a': '1', 'b': True})"
    with pytest.raises(AttributeError):
        values.x = 1
    assert len(ArgValues()) == 0


# --- one validator on both sides of the wall ------------------------------------------------------


def _renderer_schema(spec: str) -> dict[str, str] | AotuiError:
    """What the app-side renderer makes of ``args='spec'``: the declared schema, or its error."""
    from aotui.sandbox.render import render_view

    html = f'<section view="V"><button operation="go" args=\'{spec}\'>Go</button></section>'
    try:
        (spec_out,) = render_view(html).operations
    except AotuiError as exc:
        return exc
    return dict(spec_out.args)


def test_python_type_name_is_refused_by_the_renderer_too() -> None:
    # The renderer used to accept {"x": "str"} ("str" read as a list item type), and every
    # execute of it then failed E_APP_ERROR on the supervisor's side.
    error = _renderer_schema('{"x": "str"}')
    assert isinstance(error, AotuiError)
    assert error.code is ErrorCode.E_APP_ERROR
    assert "did you mean string?" in error.message
    assert "go" in error.message


def test_hyphenated_name_is_accepted_by_both_sides_and_executes() -> None:
    # "dry-run" was refused by the renderer but accepted by the supervisor's validator.
    declared = _renderer_schema('{"dry-run?": "boolean", "n": "integer"}')
    assert declared == {"dry-run?": "boolean", "n": "integer"}
    assert not isinstance(declared, AotuiError)
    (command,) = parse_commands(
        '<context app_id="app_0" view_id="view_1">execute go --dry-run --n 3</context>'
    )
    assert coerce_args(parse_arg_schema(declared), command.args).args == {"dry-run": True, "n": 3}


@pytest.mark.parametrize(
    "spec",
    [
        '{"x": "str"}', '{"x": "int"}', '{"dry-run": "string"}', '{"x?": "message"}',
        '{"x": "string", "x?": "string"}', '{"bad name": "string"}', '{"x": ""}', '{"x": 1}',
        '["x"]', "{x}", '{"9x": "string"}', '{"x": "list of string"}', '{"a": "a-b"}', "{}",
        '{"x": "string", "x": "integer"}',
    ],
)  # fmt: skip
def test_renderer_and_supervisor_agree_on_every_schema(spec: str) -> None:
    app_side = _renderer_schema(spec)
    try:
        supervisor_side: dict[str, str] | AotuiError = parse_arg_schema(spec).to_dict()
    except AotuiError as exc:
        supervisor_side = exc
    if isinstance(supervisor_side, AotuiError):
        assert isinstance(app_side, AotuiError), f"renderer accepted {spec} but execute refuses it"
        assert app_side.code is supervisor_side.code is ErrorCode.E_APP_ERROR
    else:
        assert app_side == supervisor_side
