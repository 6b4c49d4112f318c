"""The words on the wire; imports nothing else of aotui.

- :mod:`protocol.errors` — ``ErrorCode`` (recoverable / JSON-RPC / exit codes), ``AotuiError``.
- :mod:`protocol.commands` — ``Command`` and ``Action``: one parsed agent command, structured form.
- :mod:`protocol.grammar` — ``parse_commands``: the ``<context>`` command language (CONTRACT §5).
- :mod:`protocol.args` — operation argument schemas, coercion and ref resolution hooks.
- :mod:`protocol.messages` — the frozen dataclass messages between client, supervisor, worker.
- :mod:`protocol.codec` — the only module that touches msgpack: frames with limits.
- :mod:`protocol.stream` — length-prefixed frames over stream sockets (supervisor ↔ zygote).
- :mod:`protocol.structure` — escaping of the snapshot's structural tags in app text.
"""

# Exports load on first use (PEP 562): `aotui status` and every worker import one submodule, not the
# whole room, so a command's start-up pays only for what it runs.
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aotui.protocol.args import (
        ArgSchema,
        CoercedArgs,
        Param,
        RefResolver,
        ResolvedRef,
        coerce_args,
        parse_arg_schema,
        parse_ref,
    )
    from aotui.protocol.codec import PROTOCOL_VERSION, Codec, decode, encode
    from aotui.protocol.commands import Action, ArgValues, Command
    from aotui.protocol.errors import EXIT_NO_DESKTOP, AotuiError, ErrorCode
    from aotui.protocol.grammar import parse_commands
    from aotui.protocol.structure import STRUCTURAL_TAGS, contains_structural, escape_structural

_EXPORTS = {
    "ArgSchema": "aotui.protocol.args",
    "CoercedArgs": "aotui.protocol.args",
    "Param": "aotui.protocol.args",
    "RefResolver": "aotui.protocol.args",
    "ResolvedRef": "aotui.protocol.args",
    "coerce_args": "aotui.protocol.args",
    "parse_arg_schema": "aotui.protocol.args",
    "parse_ref": "aotui.protocol.args",
    "PROTOCOL_VERSION": "aotui.protocol.codec",
    "Codec": "aotui.protocol.codec",
    "decode": "aotui.protocol.codec",
    "encode": "aotui.protocol.codec",
    "Action": "aotui.protocol.commands",
    "ArgValues": "aotui.protocol.commands",
    "Command": "aotui.protocol.commands",
    "EXIT_NO_DESKTOP": "aotui.protocol.errors",
    "AotuiError": "aotui.protocol.errors",
    "ErrorCode": "aotui.protocol.errors",
    "parse_commands": "aotui.protocol.grammar",
    "STRUCTURAL_TAGS": "aotui.protocol.structure",
    "contains_structural": "aotui.protocol.structure",
    "escape_structural": "aotui.protocol.structure",
}

__all__ = [
    "EXIT_NO_DESKTOP",
    "PROTOCOL_VERSION",
    "STRUCTURAL_TAGS",
    "Action",
    "AotuiError",
    "ArgSchema",
    "ArgValues",
    "Codec",
    "CoercedArgs",
    "Command",
    "ErrorCode",
    "Param",
    "RefResolver",
    "ResolvedRef",
    "coerce_args",
    "contains_structural",
    "decode",
    "encode",
    "escape_structural",
    "parse_arg_schema",
    "parse_commands",
    "parse_ref",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
