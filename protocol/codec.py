"""Messages to msgpack frames and back; the only module in aotui that imports msgpack.

A frame is the msgpack array ``[PROTOCOL_VERSION, kind, fields]``: ``kind`` is the message's
``KIND``, ``fields`` maps field names to values, and nested records (``ViewFragment``,
``OperationSpec``, …) travel as maps. Both directions check every field against its annotation:
``int`` refuses ``bool``; ``float`` takes ``int`` but refuses NaN and infinities; ``Any`` takes
plain data only — nil, bool, int, float (NaN allowed), str, bin, lists and str-keyed maps; no
tuples, sets, subclasses or ext types. Integers span msgpack's range, -2**63 to 2**64-1. A
``StrEnum`` field (a closed set of words) travels as its plain string; decoding refuses a string
that is none of its members (``unknown_value``).

:class:`Codec` limits: ``max_frame_bytes`` (4 MiB), checked before unpacking; ``max_depth`` (32)
counts nesting from the frame array (1) and fields map (2); ``max_items`` (100 000) bounds each
array and map; ``max_str_bytes`` (3.5 MiB) each str (as UTF-8) and bin — a whole snapshot of the
desktop's largest budget (3 MiB of Markdown) is one str. msgpack's C unpacker
allocates an array's claimed length before reading it, so a few KB of nested headers could claim
gigabytes: a frame whose array headers might claim more items than it has bytes is first walked
by :func:`protocol.frame_guard.scan`, which allocates nothing.

A peer's malformed frame is a protocol violation: decoding raises ``E_INVALID_CMD``. A message of
ours that cannot be encoded is our bug: encoding raises ``E_INTERNAL``. Nothing else escapes;
:class:`_MapMsgpackErrors` is the one place foreign exceptions become ours::

    raised inside the codec                           data["reason"]   decode          encode
    ────────────────────────────────────────────────  ──────────────  ──────────────  ──────────
    our checks (type, field, kind, version, limits)   see the message  E_INVALID_CMD   E_INTERNAL
    msgpack ExtraData                                 trailing_data        "               "
    msgpack StackError, RecursionError                too_deep             "               "
    msgpack FormatError, OutOfData, UnpackException   malformed            "               "
    ValueError naming max_ext_len / another max_*     ext_type / over_limit  "             "
    other ValueError                                  malformed            "               "
    msgpack BufferFull, MemoryError                   too_large            "               "
    UnicodeError (bad UTF-8, lone surrogate)          bad_utf8             "               "
    OverflowError (int outside msgpack's range)       out_of_range         "               "
    TypeError (a value msgpack cannot carry)          unserializable       "               "
    any other Exception (a bug in this module)        bug             E_INTERNAL      E_INTERNAL

Duplicate map keys are not detected: msgpack keeps the last, and every aotui peer uses this codec.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import types
import typing
from collections.abc import Callable
from typing import Any, NoReturn

import msgpack

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.frame_guard import FrameRefused, claims_fit, scan
from aotui.protocol.messages import Message, message_type

__all__ = ["MAX_FRAME_BYTES", "PROTOCOL_VERSION", "Codec", "decode", "encode", "prepare"]

#: The one frame-size limit: the codec refuses bigger frames, and every socket a worker or a
#: client writes to sets it as ``ZMQ_MAXMSGSIZE``, so ZeroMQ refuses them before allocating.
MAX_FRAME_BYTES = 4 << 20

#: The buffer a frame is packed into at first, grown as the frame needs. msgpack's own default
#: is 256 KiB, allocated and freed for every frame: with the supervisor's allocator settings
#: (server/memory.py) that took 5-20 µs of its CPU per frame (profiled), where packing a small
#: frame needs under 1 µs.
PACK_START_BYTES = 4 << 10

#: The first element of every frame; a frame of another version is refused.
PROTOCOL_VERSION = 1

# (value, depth) -> value: checks a value and returns it, or builds a record from its map.
_Convert = Callable[[Any, int], Any]
# A converter and whether it returns its input unchanged, so containers need no copy.
_Node = tuple[_Convert, bool]

_SCALARS = frozenset({type(None), bool, int, float, str, bytes})
_STR = frozenset({str})


class _Refused(Exception):
    """Internal: a check failed; unwinds to the codec boundary, collecting where it happened."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason, self.detail, self.kind = reason, detail, ""
        self.steps: list[str] = []

    @classmethod
    def wrong_type(cls, expected: str, value: object) -> _Refused:
        return cls("wrong_type", f"expected {expected}, got {type(value).__name__}")

    @classmethod
    def oversized(cls, value: Any, depth: int, codec: Codec) -> _Refused:
        if depth > codec.max_depth:
            return cls("too_deep", f"nesting deeper than max_depth {codec.max_depth}")
        return cls("over_limit", f"{len(value)} items exceed max_items {codec.max_items}")

    @classmethod
    def bad_key(cls, mapping: dict[Any, Any]) -> _Refused:
        names = ", ".join(sorted({type(key).__name__ for key in mapping} - {"str"}))
        return cls("wrong_type", f"map keys are str, got {names}")

    def at(self, step: str) -> None:
        self.steps.append(step)

    def error(self, code: ErrorCode, doing: str) -> AotuiError:
        data: dict[str, Any] = {"reason": self.reason}
        where = ""
        if self.kind:
            data["kind"] = self.kind
            where = f" {self.kind!r} message"
        if self.steps:
            data["field"] = "".join(reversed(self.steps)).lstrip(".")
            where += f", field {data['field']}"
        return AotuiError(code, f"{doing}:{where}{':' if where else ''} {self.detail}", data)


def _refuse_ext(code: int, data: bytes) -> NoReturn:
    raise _Refused("ext_type", f"ext type {code} is not allowed")


_FOREIGN_ERRORS: tuple[tuple[type[Exception], str, str], ...] = (
    (msgpack.exceptions.ExtraData, "trailing_data", "bytes follow the end of the message"),
    (msgpack.exceptions.StackError, "too_deep", "nesting deeper than msgpack's stack"),
    (msgpack.exceptions.FormatError, "malformed", "not msgpack"),
    (msgpack.exceptions.OutOfData, "malformed", "the frame ends mid-value"),
    (msgpack.exceptions.BufferFull, "too_large", "msgpack's buffer is full"),
    (msgpack.exceptions.UnpackException, "malformed", "not msgpack"),
    (UnicodeError, "bad_utf8", "a string is not valid UTF-8"),
    (RecursionError, "too_deep", "nesting deeper than Python's recursion limit"),
    (MemoryError, "too_large", "out of memory"),
    (OverflowError, "out_of_range", "a number is outside msgpack's range"),
    (ValueError, "malformed", "not a valid frame"),
    (TypeError, "unserializable", "a value msgpack cannot carry"),
)


class _MapMsgpackErrors:
    """Turns every exception raised in its ``with`` block into an :class:`AotuiError`."""

    # A class rather than @contextmanager: it is entered for every frame, and costs a third.
    def __init__(self, code: ErrorCode, doing: str) -> None:
        self.code, self.doing = code, doing

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, traceback: object) -> None:
        if exc is None or isinstance(exc, AotuiError) or not isinstance(exc, Exception):
            return
        if isinstance(exc, _Refused):
            raise exc.error(self.code, self.doing) from None
        text = str(exc)[:200]
        for foreign, reason, what in _FOREIGN_ERRORS:
            if isinstance(exc, foreign):
                # msgpack reports each of its length limits as a bare ValueError naming it.
                if isinstance(exc, ValueError) and "max_ext_len" in text:
                    reason, what = "ext_type", "ext types are not allowed"
                elif isinstance(exc, ValueError) and "exceeds max_" in text:
                    reason, what = "over_limit", "a length exceeds the limits or the frame"
                detail = f"{self.doing}: {what} ({text})" if text else f"{self.doing}: {what}"
                raise AotuiError(self.code, detail, {"reason": reason}) from exc
        detail = f"{self.doing}: codec bug: {exc!r:.200}"
        raise AotuiError(ErrorCode.E_INTERNAL, detail, {"reason": "bug"}) from exc


_DECODING = _MapMsgpackErrors(ErrorCode.E_INVALID_CMD, "malformed frame")
_ENCODING = _MapMsgpackErrors(ErrorCode.E_INTERNAL, "cannot encode")


def _exact(kind: type) -> _Convert:
    def check(value: Any, depth: int) -> Any:
        if type(value) is not kind:
            raise _Refused.wrong_type(kind.__name__, value)
        return value

    return check


def _check_float(value: Any, depth: int) -> Any:
    # An int is a float by the numeric tower; a non-finite time or size is always a bug.
    if type(value) is float:
        if not math.isfinite(value):
            raise _Refused("wrong_type", f"expected a finite float, got {value}")
    elif type(value) is not int:
        raise _Refused.wrong_type("float", value)
    return value


def _enum_decoder(kind: type[enum.StrEnum]) -> _Convert:
    members = {member.value: member for member in kind}
    allowed = ", ".join(members)

    def decode(value: Any, depth: int) -> Any:
        if type(value) is not str:
            raise _Refused.wrong_type(kind.__name__, value)
        member = members.get(value)
        if member is None:
            raise _Refused("unknown_value", f"{value!r:.40} is not one of {allowed}")
        return member

    return decode


def _enum_encoder(kind: type[enum.StrEnum]) -> _Convert:
    def encode(value: Any, depth: int) -> Any:
        if type(value) is not kind:
            raise _Refused.wrong_type(kind.__name__, value)
        return value.value  # msgpack is given the plain string

    return encode


# Annotations a single C-level pass over element types can check for a whole list or dict.
_EXACT_TYPES = {hint: frozenset({hint}) for hint in (str, int, bool, bytes)}
_SCALAR_NODES: dict[Any, _Convert] = {hint: _exact(hint) for hint in _EXACT_TYPES}
_SCALAR_NODES[float] = _check_float


@dataclasses.dataclass(frozen=True)
class Codec:
    """Encoder and decoder of frames under fixed limits; build once, share freely."""

    #: Largest frame in bytes, checked before unpacking.
    max_frame_bytes: int = MAX_FRAME_BYTES
    #: Deepest container nesting, counting the frame array as 1 and its fields map as 2.
    max_depth: int = 32
    #: Most elements in one array, or entries in one map.
    max_items: int = 100_000
    #: Longest str (in UTF-8 bytes) or bin.
    max_str_bytes: int = 7 << 19

    _decoders: dict[str, _Convert] = dataclasses.field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _encoders: dict[type, _Convert] = dataclasses.field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        for limit in ("max_frame_bytes", "max_depth", "max_items", "max_str_bytes"):
            if type(getattr(self, limit)) is not int or getattr(self, limit) < 2:
                raise AotuiError(ErrorCode.E_INTERNAL, f"Codec.{limit} must be an int ≥ 2")
        # Converters are built on a kind's first frame: `aotui status` sends one kind and reads
        # two, and building all of them took 3 ms of its start-up. tests/test_codec_kinds.py
        # builds every kind, so an annotation the codec cannot carry fails there, not mid-frame.

    def encode(self, message: Message) -> bytes:
        """The frame for ``message``; ``E_INTERNAL`` if it holds what the wire cannot carry."""
        with _ENCODING:
            cls = type(message)
            encode_fields = self._encoders.get(cls)
            if encode_fields is None:
                kind = getattr(cls, "KIND", None)
                if type(kind) is not str or message_type(kind) is not cls:
                    raise _Refused("unknown_kind", f"{cls.__name__} is not a message")
                encode_fields = self._record(cls, decoding=False)
                self._encoders[cls] = encode_fields
            try:
                fields = encode_fields(message, 2)
            except _Refused as refused:
                refused.kind = message.KIND
                raise
            packer = msgpack.Packer(use_bin_type=True, buf_size=PACK_START_BYTES)
            frame: bytes = packer.pack([PROTOCOL_VERSION, message.KIND, fields])
            self._check_size(frame)
            if len(frame) > self.max_str_bytes:
                # Only a frame this big can hold a str or bin the peer would refuse.
                msgpack.unpackb(
                    frame, max_str_len=self.max_str_bytes, max_bin_len=self.max_str_bytes
                )
            return frame

    def decode(self, frame: bytes) -> Message:
        """The message in ``frame``; ``E_INVALID_CMD`` naming the fault if it is malformed."""
        with _DECODING:
            if not isinstance(frame, bytes):
                raise _Refused("not_bytes", f"a frame is bytes, got {type(frame).__name__}")
            self._check_size(frame)
            cap = min(self.max_items, len(frame))
            if not claims_fit(frame, cap):
                try:
                    scan(frame, self.max_depth)
                except FrameRefused as refused:
                    raise _Refused(refused.reason, refused.detail) from None
            top = msgpack.unpackb(
                frame,
                raw=False,
                strict_map_key=True,
                max_str_len=self.max_str_bytes,
                max_bin_len=self.max_str_bytes,
                max_array_len=cap,
                max_map_len=cap,
                max_ext_len=0,
                ext_hook=_refuse_ext,
            )
            if type(top) is not list or len(top) != 3:
                raise _Refused("malformed", "a frame is the array [version, kind, fields]")
            version, kind, fields = top
            if type(version) is not int or version != PROTOCOL_VERSION:
                # A peer's values are shown cut short: a frame may hold a megabyte string.
                detail = f"version {version!r:.40} is not {PROTOCOL_VERSION}"
                raise _Refused("version_mismatch", detail)
            decode_fields = self._decoders.get(kind) if type(kind) is str else None
            if decode_fields is None:
                cls = message_type(kind) if type(kind) is str else None
                if cls is None:
                    raise _Refused("unknown_kind", f"unknown message kind {kind!r:.40}")
                decode_fields = self._record(cls, decoding=True)
                self._decoders[kind] = decode_fields
            try:
                message: Message = decode_fields(fields, 2)
            except _Refused as refused:
                refused.kind = kind
                raise
            return message

    def prepare(self, *classes: type[Message]) -> None:
        """Build the encoder and decoder of each message class now rather than on its first frame
        (the zygote, once for the kinds every worker it forks speaks)."""
        for cls in classes:
            if cls not in self._encoders:
                self._encoders[cls] = self._record(cls, decoding=False)
            if cls.KIND not in self._decoders:
                self._decoders[cls.KIND] = self._record(cls, decoding=True)

    def _check_size(self, frame: bytes) -> None:
        if len(frame) > self.max_frame_bytes:
            detail = f"{len(frame)} bytes exceed max_frame_bytes {self.max_frame_bytes}"
            raise _Refused("frame_too_large", detail)

    def _node(self, hint: Any, decoding: bool) -> _Node:
        if hint is Any:
            return self._plain, True
        if hint in _SCALAR_NODES:
            return _SCALAR_NODES[hint], True
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if origin in (types.UnionType, typing.Union) and len(args) == 2 and type(None) in args:
            convert, same = self._node(next(a for a in args if a is not type(None)), decoding)
            return (lambda value, depth: None if value is None else convert(value, depth)), same
        if origin is list and len(args) == 1:
            return self._container(list, args[0], decoding)
        if origin is dict and len(args) == 2 and args[0] is str:
            return self._container(dict, args[1], decoding)
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            return self._record(hint, decoding), False
        if isinstance(hint, type) and issubclass(hint, enum.StrEnum):
            return (_enum_decoder(hint) if decoding else _enum_encoder(hint)), False
        raise TypeError(f"the codec cannot carry a field annotated {hint!r}")

    def _container(self, kind: type[Any], item_hint: Any, decoding: bool) -> _Node:
        convert, same = self._node(item_hint, decoding)
        if convert == self._plain:
            plain = self._plain

            def convert_plain(value: Any, depth: int) -> Any:
                if type(value) is not kind:
                    raise _Refused.wrong_type(kind.__name__, value)
                return plain(value, depth)

            return convert_plain, True
        exact = _EXACT_TYPES.get(item_hint)

        def convert_container(value: Any, depth: int) -> Any:
            if type(value) is not kind:
                raise _Refused.wrong_type(kind.__name__, value)
            if depth > self.max_depth or len(value) > self.max_items:
                raise _Refused.oversized(value, depth, self)
            is_dict = kind is dict
            if is_dict and not set(map(type, value)) <= _STR:
                raise _Refused.bad_key(value)
            if exact is not None and set(map(type, value.values() if is_dict else value)) <= exact:
                return value
            converted = []
            for step, element in value.items() if is_dict else enumerate(value):
                try:
                    converted.append(convert(element, depth + 1))
                except _Refused as refused:
                    refused.at(f"[{step!r:.40}]")
                    raise
            if same:
                return value
            return dict(zip(value, converted, strict=True)) if is_dict else converted

        return convert_container, same

    def _plain(self, value: Any, depth: int) -> Any:
        """Check that ``value`` is plain msgpack data within the limits; return it unchanged."""
        kind = type(value)
        if kind in _SCALARS:
            return value
        if kind is not list and kind is not dict:
            raise _Refused("unserializable", f"{kind.__name__} is not plain msgpack data")
        if depth > self.max_depth or len(value) > self.max_items:
            raise _Refused.oversized(value, depth, self)
        is_dict = kind is dict
        # A long run of scalars is checked in one pass in C; a short one is cheaper to loop over.
        if (
            len(value) > 16
            and (not is_dict or set(map(type, value)) <= _STR)
            and set(map(type, value.values() if is_dict else value)) <= _SCALARS
        ):
            return value
        for step, element in value.items() if is_dict else enumerate(value):
            if is_dict and type(step) is not str:
                raise _Refused.bad_key(value)
            if type(element) not in _SCALARS:
                try:
                    self._plain(element, depth + 1)
                except _Refused as refused:
                    refused.at(f"[{step!r:.40}]")
                    raise
        return value

    def _record(self, cls: type, decoding: bool) -> _Convert:
        hints = typing.get_type_hints(cls)
        fields = dataclasses.fields(cls)
        nodes = {field.name: self._node(hints[field.name], decoding)[0] for field in fields}
        missing = dataclasses.MISSING
        required = {f.name for f in fields if f.default is missing and f.default_factory is missing}
        if decoding:
            return _record_decoder(cls, nodes, required, self.max_depth)
        return _record_encoder(cls, nodes, self.max_depth)


def _record_decoder(
    cls: type, nodes: dict[str, _Convert], required: set[str], max_depth: int
) -> _Convert:
    """The converter from a wire map to a ``cls`` record, field by field."""
    name = cls.__name__

    def decode_record(value: Any, depth: int) -> Any:
        if type(value) is not dict:
            raise _Refused.wrong_type(f"a {name} map", value)
        if depth > max_depth:
            raise _Refused("too_deep", f"nesting deeper than max_depth {max_depth}")
        kwargs = {}
        for key, element in value.items():
            convert = nodes.get(key)
            if convert is None:
                raise _Refused("unknown_field", f"{name} has no field {key!r:.40}")
            try:
                kwargs[key] = convert(element, depth + 1)
            except _Refused as refused:
                refused.at(f".{key}")
                raise
        if len(kwargs) < len(nodes) and not required <= kwargs.keys():
            absent = ", ".join(sorted(required - kwargs.keys()))
            raise _Refused("missing_field", f"{name} lacks required field(s) {absent}")
        return cls(**kwargs)

    return decode_record


def _record_encoder(cls: type, nodes: dict[str, _Convert], max_depth: int) -> _Convert:
    """The converter from a ``cls`` record to its wire map, field by field."""
    name = cls.__name__

    def encode_record(value: Any, depth: int) -> Any:
        if type(value) is not cls:
            raise _Refused.wrong_type(name, value)
        if depth > max_depth:
            raise _Refused("too_deep", f"nesting deeper than max_depth {max_depth}")
        out = {}
        for key, convert in nodes.items():
            try:
                out[key] = convert(getattr(value, key), depth + 1)
            except _Refused as refused:
                refused.at(f".{key}")
                raise
        return out

    return encode_record


_DEFAULT = Codec()


def encode(message: Message) -> bytes:
    """Encode ``message`` under the default :class:`Codec` limits."""
    return _DEFAULT.encode(message)


def decode(frame: bytes) -> Message:
    """Decode ``frame`` under the default :class:`Codec` limits."""
    return _DEFAULT.decode(frame)


def prepare(*classes: type[Message]) -> None:
    """Build the default :class:`Codec`'s converters of ``classes`` now (see ``Codec.prepare``)."""
    _DEFAULT.prepare(*classes)
