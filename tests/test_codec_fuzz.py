"""Property tests: whatever a peer sends, decoding gives a message or ``E_INVALID_CMD``."""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import math
import typing
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aotui.protocol import frame_guard
from aotui.protocol.codec import PROTOCOL_VERSION, decode, encode
from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.messages import MESSAGE_TYPES, Exited, Message
from tests.test_codec import EXAMPLES

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

INTS = st.integers(min_value=-(2**63), max_value=2**64 - 1)
SCALARS = (
    st.none() | st.booleans() | INTS | st.floats() | st.text(max_size=20) | st.binary(max_size=20)
)
#: Anything msgpack can pack, including what the codec must refuse (bytes keys, NaN, infinities).
PACKABLE = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.dictionaries(st.text(max_size=8) | st.binary(max_size=4), inner, max_size=5)
    ),
    max_leaves=12,
)
#: Plain data that round-trips exactly: no NaN (NaN != NaN), str keys only.
PLAIN = st.recursive(
    st.none() | st.booleans() | INTS | st.floats(allow_nan=False) | st.text() | st.binary(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


def decodes_or_refuses(raw: bytes) -> None:
    """The codec's promise to a hostile peer: a message, or ``E_INVALID_CMD`` — nothing else."""
    try:
        message = decode(raw)
    except AotuiError as error:
        refusal = error
    else:
        assert isinstance(message, Message)
        assert decode(encode(message)) == message or _has_nan(message)
        return
    assert refusal.code is ErrorCode.E_INVALID_CMD, refusal
    assert isinstance(refusal.data["reason"], str)


def _has_nan(value: object) -> bool:
    if isinstance(value, float):
        return math.isnan(value)
    if isinstance(value, list):
        return any(_has_nan(item) for item in value)
    if isinstance(value, dict):
        return any(_has_nan(item) for item in value.values())
    if dataclasses.is_dataclass(value):
        return any(_has_nan(getattr(value, f.name)) for f in dataclasses.fields(value))
    return False


@FUZZ
@given(st.binary(max_size=200))
def test_arbitrary_bytes(raw: bytes) -> None:
    decodes_or_refuses(raw)


@FUZZ
@given(PACKABLE)
def test_arbitrary_packed_structures(value: Any) -> None:
    decodes_or_refuses(msgpack.packb(value, use_bin_type=True))


@FUZZ
@given(st.data())
def test_frame_shaped_structures(data: st.DataObject) -> None:
    kind = data.draw(st.sampled_from(sorted(MESSAGE_TYPES)))
    # Mostly real field names, so the field checks run and not just the unknown-field check.
    names = st.sampled_from([f.name for f in dataclasses.fields(MESSAGE_TYPES[kind])])
    values = SCALARS | st.lists(SCALARS, max_size=3) | st.dictionaries(st.text(max_size=4), SCALARS)
    fields = data.draw(st.dictionaries(names | st.text(max_size=4), values, max_size=6))
    decodes_or_refuses(msgpack.packb([PROTOCOL_VERSION, kind, fields], use_bin_type=True))


@FUZZ
@given(
    st.sampled_from(sorted(EXAMPLES)),
    st.lists(
        st.tuples(st.sampled_from(["flip", "insert", "delete"]), st.integers(0, 10**6), INTS),
        min_size=1,
        max_size=4,
    ),
)
def test_mutated_valid_frames(kind: str, mutations: list[tuple[str, int, int]]) -> None:
    raw = bytearray(encode(EXAMPLES[kind]))
    for action, where, noise in mutations:
        at = where % (len(raw) + 1)
        if action == "flip" and at < len(raw):
            raw[at] ^= (noise % 255) + 1
        elif action == "insert":
            raw[at:at] = (noise % 2**32).to_bytes(4, "big")[: noise % 5]
        else:
            del raw[at : at + noise % 8]
    decodes_or_refuses(bytes(raw))


def strategy_for(hint: Any) -> st.SearchStrategy[Any]:
    """Values of one field annotation, as the codec must carry them exactly."""
    if hint is Any:
        return PLAIN
    simple: dict[Any, st.SearchStrategy[Any]] = {
        str: st.text(),
        int: INTS,
        bool: st.booleans(),
        bytes: st.binary(),
        float: st.floats(allow_nan=False, allow_infinity=False),
    }
    if hint in simple:
        return simple[hint]
    if isinstance(hint, type) and issubclass(hint, enum.StrEnum):
        return st.sampled_from(list(hint))
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is list:
        return st.lists(strategy_for(args[0]), max_size=3)
    if origin is dict:
        return st.dictionaries(st.text(max_size=8), strategy_for(args[1]), max_size=3)
    if type(None) in args:
        return st.none() | strategy_for(next(a for a in args if a is not type(None)))
    if hint is Exited:  # exactly one of exit_code / signal, as its __post_init__ demands
        return st.builds(Exited, pid=INTS, exit_code=INTS, signal=st.none()) | st.builds(
            Exited, pid=INTS, exit_code=st.none(), signal=INTS
        )
    hints = typing.get_type_hints(hint)
    fields = {f.name: strategy_for(hints[f.name]) for f in dataclasses.fields(hint)}
    return st.builds(hint, **fields)


MESSAGES = st.sampled_from(sorted(MESSAGE_TYPES)).flatmap(
    lambda kind: strategy_for(MESSAGE_TYPES[kind])
)


@FUZZ
@given(MESSAGES)
def test_generated_messages_round_trip(message: Message) -> None:
    raw = encode(message)
    assert decode(raw) == message
    frame_guard.scan(raw, 32)  # the header scan never refuses a frame we produce


@FUZZ
@given(PLAIN)
def test_header_scan_accepts_all_plain_data(value: Any) -> None:
    frame_guard.scan(msgpack.packb(value, use_bin_type=True), 64)


@FUZZ
@given(st.binary(max_size=64) | PACKABLE.map(lambda value: msgpack.packb(value, use_bin_type=True)))
def test_header_scan_raises_nothing_but_a_refusal(raw: bytes) -> None:
    with contextlib.suppress(frame_guard.FrameRefused):
        frame_guard.scan(raw, 32)


@pytest.mark.parametrize("kind", sorted(EXAMPLES))
def test_every_prefix_of_a_valid_frame_is_refused(kind: str) -> None:
    raw = encode(EXAMPLES[kind])
    for end in range(len(raw)):
        with pytest.raises(AotuiError) as caught:
            decode(raw[:end])
        assert caught.value.code is ErrorCode.E_INVALID_CMD
