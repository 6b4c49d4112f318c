"""The codec builds each message kind's converters on its first frame, and can build them all."""

from __future__ import annotations

from aotui.protocol.codec import Codec
from aotui.protocol.messages import MESSAGE_TYPES, ErrorReply, Reply, Request


def test_every_kind_has_converters() -> None:
    # What the codec built at import before: an annotation it cannot carry fails here.
    codec = Codec()
    for kind, cls in MESSAGE_TYPES.items():
        assert callable(codec._record(cls, decoding=True)), kind
        assert callable(codec._record(cls, decoding=False)), kind


def test_a_client_builds_only_the_kinds_it_uses() -> None:
    codec = Codec()
    assert codec._encoders == {}
    assert codec._decoders == {}
    frame = codec.encode(Request(1, "status", {}))
    assert codec.decode(frame) == Request(1, "status", {})
    assert codec.decode(codec.encode(Reply(1, {"apps": []}))) == Reply(1, {"apps": []})
    assert set(codec._encoders) == {Request, Reply}
    assert set(codec._decoders) == {"request", "reply"}
    error = ErrorReply(2, "E_NOT_FOUND", "no such app")
    assert codec.decode(codec.encode(error)) == error
    assert set(codec._decoders) == {"request", "reply", "error"}
