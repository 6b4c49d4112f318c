"""Error codes and the one exception that carries them (CONTRACT §7).

Every failure that crosses a boundary of aotui — to the agent, to a client program, to a worker —
is an :class:`AotuiError` with an :class:`ErrorCode`. The code carries its own metadata (whether a
retry can help, the JSON-RPC code, the CLI exit code), the way httpx's ``codes`` carry a phrase.

Exception tree::

    Exception
    └── AotuiError(code, message, data)      one class; callers switch on ``.code``

There is deliberately a single class: no caller reacts differently to two kinds of error except by
looking at the code, and the code is what travels over the wire.
"""

from __future__ import annotations

import enum
import reprlib
from collections.abc import Mapping

TYPE_CHECKING = False  # typing's, without importing typing (~2 ms of every CLI call)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["EXIT_NO_DESKTOP", "AotuiError", "ErrorCode", "Outcome"]

#: CLI exit code when no desktop is running or the connection is refused (CONTRACT §7).
EXIT_NO_DESKTOP = 69


class ErrorCode(enum.Enum):
    """The error codes of CONTRACT §7, each with its recoverability, JSON-RPC and exit codes."""

    #: Malformed context, DSL or arguments.
    E_INVALID_CMD = ("E_INVALID_CMD", True, -32600, 64)
    #: App, view, operation or ref not found.
    E_NOT_FOUND = ("E_NOT_FOUND", True, -32004, 65)
    #: Snapshot id unknown or expired.
    E_STALE_STATE = ("E_STALE_STATE", True, -32009, 75)
    #: Input held by another owner.
    E_LOCKED = ("E_LOCKED", True, -32013, 75)
    #: The app touched what its manifest does not grant.
    E_PERMISSION = ("E_PERMISSION", False, -32003, 77)
    #: Operation or render past its deadline.
    E_TIMEOUT = ("E_TIMEOUT", True, -32010, 75)
    #: Too many commands in flight, or a bounded resource of the caller's is full; wait and retry.
    E_RATE_LIMITED = ("E_RATE_LIMITED", True, -32029, 73)
    #: No desktop answers at that address (not started, or gone).
    E_UNAVAILABLE = ("E_UNAVAILABLE", True, -32001, EXIT_NO_DESKTOP)
    #: The desktop's store (or its directory) cannot be written or read; nothing was changed.
    E_IO = ("E_IO", True, -32074, 74)
    #: A handler raised, or the app crashed mid-operation.
    E_APP_ERROR = ("E_APP_ERROR", False, -32050, 70)
    #: A bug in the runtime.
    E_INTERNAL = ("E_INTERNAL", False, -32603, 70)

    recoverable: bool
    jsonrpc_code: int
    exit_code: int

    def __new__(cls, name: str, recoverable: bool, jsonrpc_code: int, exit_code: int) -> ErrorCode:
        member = object.__new__(cls)
        member._value_ = name
        member.recoverable = recoverable
        member.jsonrpc_code = jsonrpc_code
        member.exit_code = exit_code
        return member

    def __str__(self) -> str:
        return self.name

    @classmethod
    def parse(cls, name: object) -> ErrorCode | None:
        """The code named ``name`` (``"E_NOT_FOUND"``), or ``None`` for anything else."""
        return cls.__members__.get(name) if isinstance(name, str) else None

    @classmethod
    def from_jsonrpc(cls, jsonrpc_code: int) -> ErrorCode:
        """The code for a JSON-RPC error code; -32602 (invalid params) is also ``E_INVALID_CMD``."""
        if jsonrpc_code == -32602:
            return cls.E_INVALID_CMD
        for member in cls:
            if member.jsonrpc_code == jsonrpc_code:
                return member
        return cls.E_INTERNAL


class Outcome(enum.StrEnum):
    """What an error reply says of its command's effect, as ``data["outcome"]`` (reference §6).

    A plain string on the wire (JSON, msgpack): ``"not applied"``.
    """

    #: The command took no effect: retrying it is safe.
    NOT_APPLIED = "not applied"
    #: Whether it took effect is not known (a deadline passed while it ran); read the snapshot.
    UNKNOWN = "unknown"


class AotuiError(Exception):
    """A failure with a code, a message for a human or an agent, and optional structured data."""

    def __init__(
        self, code: ErrorCode, message: str, data: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        # An enum value (an Outcome) travels as the plain string it names: the codec and JSON
        # carry plain data only.
        self.data: dict[str, Any] = {
            key: value.value if isinstance(value, enum.Enum) else value
            for key, value in (data or {}).items()
        }

    @property
    def recoverable(self) -> bool:
        """Whether retrying (after a refresh, a wait, a new pull) can succeed."""
        return self.code.recoverable

    def __str__(self) -> str:
        return f"{self.code.value}: {self.message}"

    def __repr__(self) -> str:
        return f"AotuiError({self.code.value}, {self.message!r}, {self.data!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AotuiError):
            return NotImplemented
        return (self.code, self.message, self.data) == (other.code, other.message, other.data)

    __hash__ = Exception.__hash__

    def to_dict(self) -> dict[str, Any]:
        """The error reply of CONTRACT §7: ``code``, ``message``, ``recoverable`` and ``data``."""
        return {
            "code": self.code.value,
            "message": self.message,
            "recoverable": self.recoverable,
            "data": dict(self.data),
        }

    def to_jsonrpc(self) -> dict[str, Any]:
        """A JSON-RPC 2.0 error object; our code travels in ``data.code``."""
        return {
            "code": self.code.jsonrpc_code,
            "message": self.message,
            "data": {"code": self.code.value, "recoverable": self.recoverable, **self.data},
        }

    @classmethod
    def from_jsonrpc(cls, error: Mapping[str, Any]) -> AotuiError:
        """Rebuild an error from a JSON-RPC 2.0 error object (ours or a foreign server's)."""
        if not isinstance(error, Mapping):
            return cls(ErrorCode.E_INTERNAL, f"malformed JSON-RPC error object: {error!r:.200}")
        raw_data = error.get("data")
        data = dict(raw_data) if isinstance(raw_data, Mapping) else {}
        name = data.pop("code", None)
        data.pop("recoverable", None)
        code = ErrorCode.parse(name)
        if code is None:
            jsonrpc_code = error.get("code")
            code = (
                ErrorCode.from_jsonrpc(jsonrpc_code)
                if isinstance(jsonrpc_code, int)
                else ErrorCode.E_INTERNAL
            )
        message = error.get("message")
        return cls(code, message if isinstance(message, str) else str(message), data)

    @classmethod
    def from_dict(cls, reply: Mapping[str, Any]) -> AotuiError:
        """Rebuild an error from :meth:`to_dict` output; unknown codes become ``E_INTERNAL``."""
        code = ErrorCode.parse(reply.get("code")) or ErrorCode.E_INTERNAL
        data = reply.get("data")
        return cls(
            code, str(reply.get("message", "")), dict(data) if isinstance(data, Mapping) else {}
        )


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 80


def show_value(value: object) -> str:
    """A short printable form of any value for an error message; never raises."""
    try:
        return _REPR.repr(value)
    except Exception:  # noqa: BLE001 - a huge int or broken __repr__ must not hide the error
        return f"<{type(value).__name__}>"


def invalid_cmd(message: str, **data: Any) -> AotuiError:
    """Shorthand for the most common error: the agent wrote something malformed."""
    return AotuiError(ErrorCode.E_INVALID_CMD, message, data)
