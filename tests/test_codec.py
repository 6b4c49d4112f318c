"""The wire codec: round trips, every validation rule, msgpack bombs, the foreign-error mapping."""

from __future__ import annotations

import dataclasses
import enum
import inspect
import math
import time
import tracemalloc
from typing import Any, ClassVar

import msgpack
import pytest

import aotui.protocol.codec as codec_module
from aotui.protocol import frame_guard
from aotui.protocol.codec import PROTOCOL_VERSION, Codec, decode, encode
from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.messages import (
    MESSAGE_TYPES,
    Ack,
    AppState,
    ChildLink,
    Dismount,
    ErrorReply,
    Exited,
    FragmentUpdate,
    Hello,
    HttpCall,
    HttpRequest,
    HttpResponse,
    HttpResult,
    Launch,
    Launched,
    LogLevel,
    LogRecord,
    Message,
    Mount,
    Operation,
    OperationSpec,
    Ping,
    Pong,
    Reply,
    Request,
    RestoreChunk,
    SandboxLayer,
    Serialize,
    Shutdown,
    Signal,
    SignalReason,
    Start,
    ViewFragment,
    WorkerPolicy,
)

VIEW = ViewFragment(
    key="conversation:johnny",
    name="conversation",
    parent="contacts",
    mounted=True,
    markdown="## Johnny\n\n- [messages[0]] hi there 👋\n- [messages[1]] see (view:@thread:7)",
    refs={"messages[0]": {"id": "m-1", "unread": True}, "messages[1]": "m-2", "pinned": None},
    keys={"messages[0]": "message:m-1", "messages[1]": "message:m-2"},
    ref_types={"messages[0]": "message", "messages[1]": "message"},
    operations=[
        OperationSpec("send_message", "Send Message", "Send to Johnny", {"text": "string"}),
        OperationSpec("delete", "Delete", "", {"message": "ref", "confirm?": "bool"}),
    ],
    links=[ChildLink("thread:7", "Thread 7", "the build discussion")],
)

#: One realistic message per kind; test_every_kind_has_an_example keeps it complete.
EXAMPLES: dict[str, Message] = {
    message.KIND: message
    for message in (
        Start("app_3", restore={"drafts": ["hi"], "cursor": 4}, mounted=["conversation:johnny"]),
        RestoreChunk(parts={"msg:1": {"text": "hi"}, "next_id": 2}),
        Operation(
            request_id=41,
            view="conversation:johnny",
            op_id="send_message",
            args={"text": "hello", "attachments": [b"\x89PNG", 2.5], "urgent": False},
            stable_keys={"message": "message:m-1"},
            deadline_ms=5000,
        ),
        Mount(7, "thread:7"),
        Dismount(8, "thread:7"),
        Serialize(9),
        Ping(2**64 - 1),
        Shutdown("desktop closing"),
        Hello(pid=4242, layers=[SandboxLayer.LANDLOCK, SandboxLayer.SECCOMP]),
        FragmentUpdate(views=[VIEW]),
        Ack(request_id=41, result={"sent": True}, state={"drafts": []}),
        AppState(request_id=9, data={"drafts": ["a", "b"], "ratio": -0.5, "blob": b"\x00\xff"}),
        Pong(-(2**63)),
        LogRecord(LogLevel.WARNING, "handler took 900 ms"),
        Launch(
            3,
            "app_3",
            "/srv/apps/chat",
            "main.py",
            "ipc:///tmp/w3",
            WorkerPolicy("app_3", "/srv/apps/chat", ["/data"], [], {"memory_mb": 256}, 1000),
        ),
        Launched(token=3, pid=4243),
        Exited(pid=4243, exit_code=None, signal=9, reason="memory limit"),
        HttpCall(call_id=1, request=HttpRequest("GET", "https://a.example/", {"a": "b"}, b"")),
        HttpResult(call_id=1, error={"code": "E_PERMISSION", "message": "not granted"}),
        ErrorReply(41, "E_NOT_FOUND", "no view thread:9", {"view": "thread:9"}),
        Request(request_id=1, method="execute", params={"command": "app_3.send_message"}),
        Reply(request_id=1, result=[1, "two", None, {"three": 3.0}]),
        Signal(
            desktop_id="desk-1",
            timestamp=1718000000.25,
            reason=SignalReason.APP_RESTARTED,
            reasons=[SignalReason.APP_CRASHED, SignalReason.APP_RESTARTED],
        ),
    )
}


def frame(kind: str, fields: object, version: object = PROTOCOL_VERSION) -> bytes:
    """A hand-built frame, to say what a hostile or buggy peer might send."""
    raw: bytes = msgpack.packb([version, kind, fields], use_bin_type=True)
    return raw


def fields_of(message: Message) -> dict[str, Any]:
    """The fields map of ``message``'s frame, to mutate one field at a time."""
    fields: dict[str, Any] = msgpack.unpackb(encode(message))[2]
    return fields


def refused(raw: object, reason: str, codec: Codec | None = None, **data: object) -> AotuiError:
    """Decode ``raw``, assert it fails with ``E_INVALID_CMD`` and ``reason``; return the error."""
    with pytest.raises(AotuiError) as caught:
        (codec.decode if codec else decode)(raw)  # type: ignore[arg-type]
    error = caught.value
    assert error.code is ErrorCode.E_INVALID_CMD, error
    assert error.data["reason"] == reason, error
    for key, value in data.items():
        assert error.data[key] == value, error
    return error


def unencodable(message: object, reason: str, codec: Codec | None = None) -> AotuiError:
    """Encode ``message``, assert it fails with ``E_INTERNAL`` and ``reason``; return the error."""
    with pytest.raises(AotuiError) as caught:
        (codec.encode if codec else encode)(message)  # type: ignore[arg-type]
    error = caught.value
    assert error.code is ErrorCode.E_INTERNAL, error
    assert error.data["reason"] == reason, error
    return error


def test_public_names() -> None:
    assert set(codec_module.__all__) == {
        "MAX_FRAME_BYTES", "PROTOCOL_VERSION", "Codec", "decode", "encode", "prepare"
    }


# --- round trips --------------------------------------------------------------------------------


def test_every_kind_has_an_example() -> None:
    assert set(EXAMPLES) == set(MESSAGE_TYPES)
    assert all(type(EXAMPLES[kind]) is cls for kind, cls in MESSAGE_TYPES.items())


@pytest.mark.parametrize("kind", sorted(EXAMPLES))
def test_round_trip(kind: str) -> None:
    message = EXAMPLES[kind]
    assert decode(encode(message)) == message


@pytest.mark.parametrize("kind", sorted(EXAMPLES))
def test_round_trip_through_the_header_scan(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(codec_module, "claims_fit", lambda frame, cap: False)
    message = EXAMPLES[kind]
    assert decode(encode(message)) == message


def test_frame_layout() -> None:
    raw = msgpack.unpackb(encode(Ping(5)))
    assert raw == [PROTOCOL_VERSION, "ping", {"seq": 5}]
    nested = msgpack.unpackb(encode(EXAMPLES["fragments"]))[2]["views"][0]
    assert nested["operations"][0] == {
        "op_id": "send_message",
        "label": "Send Message",
        "description": "Send to Johnny",
        "args": {"text": "string"},
        "confirm": False,
    }


def test_a_small_frame_is_packed_without_a_large_buffer() -> None:
    # msgpack.packb took a 256 KiB buffer for every frame: past the supervisor's fixed mmap
    # threshold (server/memory.py), an mmap, a page fault and a munmap for every ack.
    message = Ack(1, [1])
    encode(message)  # the kind's converter is built
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        encode(message)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 10
    large = "x" * (3 << 20)  # the buffer grows to what a frame needs
    assert decode(encode(Reply(1, large))) == Reply(1, large)


def test_bytes_travel_as_bin_and_come_back_as_bytes() -> None:
    packed = encode(Reply(1, b"\x00\xff"))
    assert b"\xc4\x02\x00\xff" in packed
    assert decode(packed) == Reply(1, b"\x00\xff")


def test_absent_fields_with_defaults_take_them() -> None:
    assert decode(frame("start", {"app": "app_1"})) == Start("app_1", None, [])
    assert decode(frame("launched", {"token": 1, "pid": 2})) == Launched(1, 2, "")


def test_float_field_takes_an_int() -> None:
    decoded = decode(frame("signal", {"desktop_id": "d", "timestamp": 5, "reason": "app_opened"}))
    assert decoded == Signal("d", 5.0, SignalReason.APP_OPENED)
    again = decode(encode(Signal("d", 5, SignalReason.APP_OPENED)))
    assert again == Signal("d", 5.0, SignalReason.APP_OPENED)


def test_a_closed_set_travels_as_its_plain_word_and_refuses_others() -> None:
    """Enum fields are the same strings on the wire; a word outside the set is refused."""
    raw = encode(LogRecord(LogLevel.ERROR, "m"))
    assert raw == frame("log", {"level": "error", "message": "m"})
    assert decode(raw) == LogRecord(LogLevel.ERROR, "m")
    assert type(decode(raw).level) is LogLevel  # type: ignore[attr-defined]
    error = refused(frame("log", {"level": "debug", "message": "m"}), "unknown_value", kind="log")
    assert "'debug' is not one of info, warning, error" in error.message
    refused(frame("signal", {"desktop_id": "d", "timestamp": 1, "reason": "x"}), "unknown_value")
    reasons = {"desktop_id": "d", "timestamp": 1, "reason": "app_opened", "reasons": ["nope"]}
    refused(frame("signal", reasons), "unknown_value", field="reasons[0]")
    refused(frame("log", {"level": 1, "message": "m"}), "wrong_type", field="level")
    forged = {"pid": 1, "layers": ["landlock", "forged-layer"]}
    refused(frame("hello", forged), "unknown_value", field="layers[1]")
    unencodable(LogRecord("error", "m"), "wrong_type")  # type: ignore[arg-type]


def test_any_carries_nan_and_the_whole_integer_range() -> None:
    decoded = decode(encode(Reply(1, [math.nan, -(2**63), 2**64 - 1])))
    assert isinstance(decoded, Reply)
    assert math.isnan(decoded.result[0])
    assert decoded.result[1:] == [-(2**63), 2**64 - 1]


def test_depth_limit_is_exact() -> None:
    # The frame array is depth 1, the fields map 2, so a result list sits at depth 3.
    def nested(levels: int) -> Any:
        value: Any = 0
        for _ in range(levels):
            value = [value]
        return value

    assert decode(encode(Reply(1, nested(30)))) == Reply(1, nested(30))
    unencodable(Reply(1, nested(31)), "too_deep")
    refused(frame("reply", {"request_id": 1, "result": nested(31)}), "too_deep")


# --- frame-level rules ---------------------------------------------------------------------------


@pytest.mark.parametrize("raw", ["text", bytearray(b"\xc0"), memoryview(b"\xc0"), None, 7])
def test_not_bytes_is_refused(raw: object) -> None:
    refused(raw, "not_bytes")


@pytest.mark.parametrize("version", [2, 0, True, "1", None, 1.0])
def test_wrong_version_is_refused(version: object) -> None:
    error = refused(frame("ping", {"seq": 1}, version=version), "version_mismatch")
    assert "version" in error.message


@pytest.mark.parametrize("kind", ["nope", "", 1, None, ["ping"], b"ping"])
def test_unknown_kind_is_refused(kind: Any) -> None:
    refused(frame(kind, {"seq": 1}), "unknown_kind")


@pytest.mark.parametrize(
    "top", [{"seq": 1}, [1, "ping"], [1, "ping", {"seq": 1}, None], "ping", 1, None]
)
def test_frame_that_is_not_a_triple_is_refused(top: object) -> None:
    refused(msgpack.packb(top), "malformed")


def test_fields_that_are_not_a_map_are_refused() -> None:
    error = refused(frame("ping", [1]), "wrong_type", kind="ping")
    assert "Ping map" in error.message


def test_trailing_bytes_are_refused() -> None:
    refused(encode(Ping(1)) + b"\xc0", "trailing_data")


@pytest.mark.parametrize("cut", [1, 2, 5])
def test_truncated_frame_is_refused(cut: int) -> None:
    refused(encode(EXAMPLES["op"])[:-cut], "malformed")


def test_oversized_frame_is_refused_before_unpacking(monkeypatch: pytest.MonkeyPatch) -> None:
    def unpackb(*args: object, **kwargs: object) -> object:
        raise AssertionError("unpacked an oversized frame")

    monkeypatch.setattr(msgpack, "unpackb", unpackb)
    started = time.process_time()  # CPU time: a loaded machine's waits are not the codec's
    error = refused(b"\xc0" * (4 * 1024 * 1024 + 1), "frame_too_large")
    assert time.process_time() - started < 0.05
    assert "max_frame_bytes" in error.message
    refused(b"\xc0" * 101, "frame_too_large", Codec(max_frame_bytes=100))


# --- field rules ---------------------------------------------------------------------------------


def test_missing_field_is_refused() -> None:
    error = refused(frame("op", {"request_id": 1, "view": "v"}), "missing_field", kind="op")
    assert "args, deadline_ms, op_id, stable_keys" in error.message


def test_unknown_field_is_refused() -> None:
    fields = fields_of(Ping(1)) | {"extra": 1}
    error = refused(frame("ping", fields), "unknown_field", kind="ping")
    assert "'extra'" in error.message
    refused(frame("ping", {"seq": 1, b"seq": 1}), "unknown_field")


def view_fields(**changes: object) -> dict[str, Any]:
    """A ``fragments`` fields map whose one view has ``changes`` applied."""
    fields = fields_of(EXAMPLES["fragments"])
    fields["views"][0].update(changes)
    return fields


@pytest.mark.parametrize(
    ("kind", "fields", "where"),
    [
        ("log", {"level": 1, "message": "m"}, "level"),  # str
        ("ping", {"seq": "1"}, "seq"),  # int
        ("ping", {"seq": True}, "seq"),  # bool is not an int
        ("ping", {"seq": 1.0}, "seq"),
        ("signal", {"desktop_id": "d", "timestamp": "now", "reason": "r"}, "timestamp"),
        ("signal", {"desktop_id": "d", "timestamp": False, "reason": "r"}, "timestamp"),
        ("signal", {"desktop_id": "d", "timestamp": math.nan, "reason": "r"}, "timestamp"),
        ("signal", {"desktop_id": "d", "timestamp": -math.inf, "reason": "r"}, "timestamp"),
        ("fragments", view_fields(mounted=1), "views[0].mounted"),  # bool
        ("fragments", view_fields(parent=7), "views[0].parent"),  # str | None
        ("exited", {"pid": 1, "exit_code": "0", "signal": None}, "exit_code"),  # int | None
        ("hello", {"pid": 1, "layers": "landlock"}, "layers"),  # list
        ("hello", {"pid": 1, "layers": ["landlock", 2]}, "layers[1]"),
        ("fragments", view_fields(keys={"k": 1}), "views[0].keys['k']"),  # dict[str, str]
        ("fragments", view_fields(keys=["k"]), "views[0].keys"),
        ("fragments", view_fields(refs=[]), "views[0].refs"),  # dict[str, Any]
        ("fragments", {"views": [1]}, "views[0]"),  # record
        (
            "fragments",
            view_fields(links=[{"key": 1, "label": "", "description": ""}]),
            "views[0].links[0].key",
        ),
    ],
)
def test_wrong_type_is_refused_with_its_path(kind: str, fields: object, where: str) -> None:
    error = refused(frame(kind, fields), "wrong_type", kind=kind, field=where)
    assert f"field {where}:" in error.message


@pytest.mark.parametrize(
    ("kind", "fields", "dead"),
    [
        ("hello", {"pid": 1, "protocol": 1}, "protocol"),
        ("ack", {"request_id": 1, "revision": 3}, "revision"),
        ("fragments", {"views": [], "revision": 3}, "revision"),
        ("fragments", {"views": [], "removed": []}, "removed"),
    ],
)
def test_dead_fields_are_gone_from_the_wire(kind: str, fields: object, dead: str) -> None:
    """Fields nothing read (a version never compared, revisions, an always empty list)."""
    error = refused(frame(kind, fields), "unknown_field", kind=kind)
    assert repr(dead) in error.message


def test_http_records_are_checked_field_by_field() -> None:
    """A worker's HTTP request is a typed record: a malformed one never reaches the broker."""
    response = HttpResponse(200, "OK", {"content-type": "text/plain"}, b"hi", "https://a.example/")
    assert decode(encode(HttpResult(2, response=response))) == HttpResult(2, response=response)
    request = {"method": "GET", "url": "https://a.example/", "headers": {"a": 1}, "body": b""}
    error = refused(frame("http", {"call_id": 1, "request": request}), "wrong_type")
    assert error.data["field"] == "request.headers['a']"
    request["headers"] = {}
    refused(frame("http", {"call_id": 1, "request": {**request, "bdy": b""}}), "unknown_field")
    refused(frame("http", {"call_id": 1, "request": {**request, "body": "text"}}), "wrong_type")


def test_a_worker_policy_is_a_record_checked_on_receipt() -> None:
    """The zygote refuses a malformed policy as the frame is decoded, naming the field."""
    fields = fields_of(EXAMPLES["launch"])
    fields["policy"]["limits"] = {"memory_mb": "256"}
    error = refused(frame("launch", fields), "wrong_type", kind="launch")
    assert error.data["field"] == "policy.limits['memory_mb']"
    fields["policy"] = {"app": "app_3", "app_dir": "/srv/apps/chat", "grants": ["/"]}
    refused(frame("launch", fields), "unknown_field", field="policy")


def test_nested_record_of_the_wrong_shape_is_refused() -> None:
    refused(frame("fragments", view_fields(colour="red")), "unknown_field", field="views[0]")
    broken = view_fields()
    del broken["views"][0]["markdown"]
    error = refused(frame("fragments", broken), "missing_field", field="views[0]")
    assert "markdown" in error.message


@pytest.mark.parametrize(
    ("params", "where"),
    [
        ({b"raw": 1}, "params"),
        ({"a": [{"b": {b"raw": 1}}]}, "params['a'][0]['b']"),
    ],
)
def test_plain_data_maps_need_str_keys(params: object, where: str) -> None:
    raw = frame("request", {"request_id": 1, "method": "m", "params": params})
    refused(raw, "wrong_type", field=where)


def test_map_with_non_str_key_is_refused_by_the_unpacker() -> None:
    raw = frame("request", {"request_id": 1, "method": "m", "params": {1: 2}})
    refused(raw, "malformed")


def test_uint64_decodes_and_beyond_int64_min_does_not_encode() -> None:
    assert decode(frame("ping", {"seq": 2**64 - 1})) == Ping(2**64 - 1)
    unencodable(Ping(2**64), "out_of_range")
    unencodable(Reply(1, -(2**63) - 1), "out_of_range")


@pytest.mark.parametrize("limit", ["max_frame_bytes", "max_depth", "max_items", "max_str_bytes"])
@pytest.mark.parametrize("value", [0, 1, -5, 2.5, True])
def test_codec_limits_are_validated(limit: str, value: object) -> None:
    with pytest.raises(AotuiError) as caught:
        Codec(**{limit: value})  # type: ignore[arg-type]
    assert caught.value.code is ErrorCode.E_INTERNAL
    assert limit in caught.value.message


def test_codecs_compare_by_limits() -> None:
    assert Codec() == Codec()
    assert hash(Codec(max_depth=8)) == hash(Codec(max_depth=8))
    assert Codec(max_depth=8) != Codec()


def test_smaller_limits_apply_to_decoding() -> None:
    small = Codec(max_items=4, max_str_bytes=16)
    refused(encode(Reply(1, [1, 2, 3, 4, 5])), "over_limit", small)
    refused(encode(Reply(1, "x" * 17)), "over_limit", small)
    refused(encode(Reply(1, b"x" * 17)), "over_limit", small)
    assert small.decode(encode(Reply(1, "x" * 16))) == Reply(1, "x" * 16)


# --- encoding refuses what the wire cannot carry ------------------------------------------------


class Colour(enum.Enum):
    RED = "red"


class Label(enum.StrEnum):
    NAME = "name"


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ({1, 2}, "unserializable"),
        ((1, 2), "unserializable"),
        (object(), "unserializable"),
        ([Colour.RED], "unserializable"),
        ({"k": Label.NAME}, "unserializable"),  # a str subclass would come back as a plain str
        ({1: "one"}, "wrong_type"),
        ({"k": {b"raw": 1}}, "wrong_type"),
        ("\ud800", "bad_utf8"),
        (2**64, "out_of_range"),
    ],
)
def test_unplain_data_does_not_encode(value: object, reason: str) -> None:
    unencodable(Reply(1, value), reason)


def test_wrong_field_types_do_not_encode() -> None:
    error = unencodable(Ping(True), "wrong_type")
    assert error.data == {"reason": "wrong_type", "kind": "ping", "field": "seq"}
    unencodable(Signal("d", math.nan, SignalReason.APP_OPENED), "wrong_type")
    unencodable(FragmentUpdate([VIEW, "view"]), "wrong_type")  # type: ignore[list-item]
    unencodable(Exited(1, "0", None), "wrong_type")  # type: ignore[arg-type]


def test_only_catalogued_messages_encode() -> None:
    @dataclasses.dataclass(frozen=True)
    class Stray(Message):
        KIND: ClassVar[str] = "ping"
        seq: int

    unencodable(Stray(1), "unknown_kind")
    unencodable("ping", "unknown_kind")
    unencodable(VIEW, "unknown_kind")


def test_frames_the_peer_would_refuse_do_not_encode() -> None:
    unencodable(Reply(1, "x" * 200), "frame_too_large", Codec(max_frame_bytes=100))
    unencodable(Reply(1, list(range(5))), "over_limit", Codec(max_items=4))
    unencodable(Reply(1, "é" * 600), "over_limit", Codec(max_str_bytes=1000))
    unencodable(Reply(1, b"x" * 1001), "over_limit", Codec(max_str_bytes=1000))


def test_python_recursion_limit_becomes_a_typed_error() -> None:
    value: Any = 0
    for _ in range(50_000):
        value = [value]
    unencodable(Reply(1, value), "too_deep", Codec(max_depth=1_000_000))


# --- bombs --------------------------------------------------------------------------------------

PREFIX = b"\x93\x01\xa5reply\x82\xaarequest_id\x01\xa6result"  # [1, "reply", {…, "result": ⟨bomb⟩
BOMBS = {
    "array32 of 2**32-1": b"\xdd\xff\xff\xff\xff",
    "map32 of 2**32-1": b"\xdf\xff\xff\xff\xff",
    "str32 of 2**32-1": b"\xdb\xff\xff\xff\xff",
    "bin32 of 2**32-1": b"\xc6\xff\xff\xff\xff",
    "100k nesting": b"\x91" * 100_000 + b"\xc0",
    "10 MB of nils": b"\xc0" * 10_000_000,
    "array of 10M nils": b"\xdd\x00\x98\x96\x80" + b"\xc0" * 10_000_000,
    "array of 4M nils": b"\xdd\x00\x3d\x09\x00" + b"\xc0" * 4_000_000,
    "nested array16 claims": b"\xdc\xff\xff" * 2000 + b"\xc0" * 70_000,
    "nested array32 claims": b"\xdd\x00\x01\x86\xa0" * 1100 + b"\xc0" * 100_000,
    "nested map32 claims": b"\xdf\x00\x01\x86\xa0\xa1k" * 1100 + b"\xc0" * 100_000,
    "fixext": b"\xd4\x01\x00",
    "empty ext8": b"\xc7\x00\x05",
    "timestamp ext": msgpack.packb(msgpack.Timestamp(1, 2)),
    "invalid utf-8": b"\xa2\xff\xfe",
    "lone surrogate": b"\xa3\xed\xa0\x80",
    "int map key": b"\x81\x01\x02",
    "reserved byte": b"\xc1",
    "uint64": b"\xcf" + b"\xff" * 8,
    "nan": msgpack.packb(math.nan),
    "empty": b"",
}
#: Bombs that are fine plain data once inside a field that takes ``Any``.
HARMLESS_IN_FIELD = {"uint64", "nan"}


@pytest.mark.parametrize("prefix", [b"", PREFIX], ids=["bare", "in-field"])
@pytest.mark.parametrize("bomb", sorted(BOMBS))
def test_bomb_fails_fast_with_bounded_memory(bomb: str, prefix: bytes) -> None:
    raw = prefix + BOMBS[bomb]
    if prefix and bomb in HARMLESS_IN_FIELD:
        assert isinstance(decode(raw), Reply)
        return
    tracemalloc.start()
    started = time.process_time()  # CPU time: a loaded machine's waits are not the codec's
    try:
        with pytest.raises(AotuiError) as caught:
            decode(raw)
        elapsed = time.process_time() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert caught.value.code is ErrorCode.E_INVALID_CMD
    assert elapsed < 0.5
    assert peak < 16 * 1024 * 1024


def test_header_scan_refuses_what_msgpack_would_preallocate() -> None:
    raw = b"\xdc\xff\xff" * 2000 + b"\xc0" * 70_000
    assert not frame_guard.claims_fit(raw, 100_000)
    with pytest.raises(frame_guard.FrameRefused):
        frame_guard.scan(raw, 32)


# --- the foreign-exception mapping --------------------------------------------------------------


def test_mapping_covers_every_msgpack_exception() -> None:
    mapped = tuple(foreign for foreign, _, _ in codec_module._FOREIGN_ERRORS)
    defined = [
        cls
        for _, cls in inspect.getmembers(msgpack.exceptions, inspect.isclass)
        if issubclass(cls, BaseException)
    ]
    assert defined
    # PackException is a deprecated alias of Exception itself; the catch-all answers for it.
    missing = [cls for cls in defined if cls is not Exception and not issubclass(cls, mapped)]
    assert missing == []


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (msgpack.exceptions.ExtraData(1, b""), "trailing_data"),
        (msgpack.exceptions.FormatError(), "malformed"),
        (msgpack.exceptions.StackError(), "too_deep"),
        (msgpack.exceptions.BufferFull(), "too_large"),
        (msgpack.exceptions.OutOfData(), "malformed"),
        (msgpack.exceptions.UnpackException(), "malformed"),
        (ValueError("3 exceeds max_array_len(2)"), "over_limit"),
        (ValueError("1 exceeds max_ext_len(0)"), "ext_type"),
        (ValueError("Unpack failed: incomplete input"), "malformed"),
        (TypeError("can not serialize 'set' object"), "unserializable"),
        (OverflowError("Integer value out of range"), "out_of_range"),
        (UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"), "bad_utf8"),
        (RecursionError(), "too_deep"),
        (MemoryError(), "too_large"),
    ],
)
@pytest.mark.parametrize("code", [ErrorCode.E_INVALID_CMD, ErrorCode.E_INTERNAL])
def test_foreign_exception_maps_to_our_code(
    exc: Exception, reason: str, code: ErrorCode, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unpackb(*args: object, **kwargs: object) -> object:
        raise exc

    class Packer:
        def __init__(self, **options: object) -> None:
            pass

        pack = staticmethod(unpackb)

    monkeypatch.setattr(msgpack, "unpackb", unpackb)
    monkeypatch.setattr(msgpack, "Packer", Packer)
    run = (lambda: decode(b"\xc0")) if code is ErrorCode.E_INVALID_CMD else lambda: encode(Ping(1))
    with pytest.raises(AotuiError) as caught:
        run()
    assert caught.value.code is code
    assert caught.value.data == {"reason": reason}
    assert caught.value.__cause__ is exc


def test_unforeseen_exception_is_an_internal_bug(monkeypatch: pytest.MonkeyPatch) -> None:
    def unpackb(*args: object, **kwargs: object) -> object:
        raise KeyError("surprise")

    monkeypatch.setattr(msgpack, "unpackb", unpackb)
    with pytest.raises(AotuiError) as caught:
        decode(b"\xc0")
    assert caught.value.code is ErrorCode.E_INTERNAL
    assert caught.value.data == {"reason": "bug"}


def test_messages_name_kind_field_and_limit() -> None:
    error = refused(frame("ping", {"seq": True}), "wrong_type")
    assert error.message == "malformed frame: 'ping' message, field seq: expected int, got bool"
    error = refused(b"\xc0" * 200, "frame_too_large", Codec(max_frame_bytes=100))
    assert error.message == "malformed frame: 200 bytes exceed max_frame_bytes 100"
    error = unencodable(Reply(1, {"a": {1, 2}}), "unserializable")
    assert (
        error.message
        == "cannot encode: 'reply' message, field result['a']: set is not plain msgpack data"
    )


def test_a_snapshot_of_the_largest_budget_fits_one_string() -> None:
    # The snapshot budget allowed 3 MiB while a str was capped at 1 MiB, so a desktop of many
    # shown apps answered every pull E_INTERNAL instead of its snapshot.
    from aotui.supervisor.config import DesktopConfig

    largest = DesktopConfig().snapshot_max_bytes
    assert Codec().max_str_bytes >= largest
    markdown = "x" * largest
    assert decode(encode(Reply(1, markdown))) == Reply(1, markdown)
