"""``aotui browser …`` and ``awi-tty …``: seed 002's CLI façade over AWI-TTY's JSON-RPC methods.

Each subcommand is one method of the Browser's active tab (``supervisor/interface/awi.py``),
spelled with dashes (``get-title`` is ``get_title``), sent as one JSON-RPC 2.0 line to the
desktop's ``rpc.sock``: ``aotui browser`` finds it from ``--desktop``/``--socket`` as every
command does; ``awi-tty`` takes ``--socket PATH``, else ``$AWI_SOCK``, else the default desktop's.
Output is the method's JSON (``--json``, the default), or with ``--plain`` the text a shell wants
(a snapshot's lines, a title, a URL). Exit codes are reference §7's (sysexits: 64 usage, 69 no
desktop, 73 rate-limited, 75 a timeout, 77 permission…).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.supervisor.paths import DesktopPaths, unix_address

__all__ = ["add_arguments", "main", "run"]

#: seed 002's keys for ``send-key`` (``Char:X`` for a character).
KEYS = ("Tab", "Enter", "Up", "Down", "Left", "Right", "Space", "Escape", "Backspace")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The subcommands on ``parser`` (``aotui browser`` and ``awi-tty`` share them)."""
    parser.add_argument("--plain", action="store_true", help="text only (snapshot lines, title)")
    sub = parser.add_subparsers(dest="awi_command", required=True, metavar="COMMAND")
    navigate = sub.add_parser("navigate", help="load a URL in the active tab")
    navigate.add_argument("url")
    key = sub.add_parser("send-key", help=f"press a key: {', '.join(KEYS)} or Char:X")
    key.add_argument("key")
    for modifier in ("alt", "ctrl", "shift", "meta"):
        key.add_argument(f"--{modifier}", action="store_true", help=f"hold {modifier.title()}")
    scroll = sub.add_parser("scroll", help="scroll by lines (negative: up)")
    scroll.add_argument("delta", type=int)
    snapshot = sub.add_parser("snapshot", help="the active tab as a terminal grid, or Markdown")
    snapshot.add_argument("--format", choices=("text", "markdown"), default="text")
    snapshot.add_argument("--include-meta", action="store_true", help="cursor, URL, title, nav")
    for name in ("get-title", "get-url", "get-nav-state", "get-capabilities"):
        sub.add_parser(name, help=name.replace("-", " ").replace("get ", "the tab's "))
    viewport = sub.add_parser("set-viewport", help="the grid's size in cells (default 140x45)")
    viewport.add_argument("cols", type=int)
    viewport.add_argument("rows", type=int)
    text = sub.add_parser("type-text", help="type text into the focused element")
    text.add_argument("text")
    quiet = sub.add_parser("wait-for-frame-quiescence", help="wait until the page is quiet")
    quiet.add_argument("--idle-ms", type=int, default=100)
    title = sub.add_parser("wait-for-title-contains", help="wait until the title has a text")
    title.add_argument("substring")
    title.add_argument("--timeout-ms", type=int, default=3500)
    sub.add_parser("ping", help="whether the desktop answers")


def _request(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """The JSON-RPC method and params of the parsed subcommand."""
    command = args.awi_command
    if command == "navigate":
        return "navigate", {"url": args.url}
    if command == "send-key":
        name, _, char = args.key.partition(":")
        params: dict[str, Any] = {"key": name}
        if name == "Char":
            params["char"] = char
        params.update({m: True for m in ("alt", "ctrl", "shift", "meta") if getattr(args, m)})
        return "send_key", params
    if command == "scroll":
        return "scroll", {"delta": args.delta}
    if command == "snapshot":
        if args.format == "markdown":
            return "snapshot", {"format": "markdown", "include_meta": args.include_meta}
        return "snapshot", {"format": "text", "include_meta": args.include_meta}
    if command == "set-viewport":
        return "set_viewport", {"cols": args.cols, "rows": args.rows}
    if command == "type-text":
        return "type_text", {"text": args.text}
    if command == "wait-for-frame-quiescence":
        return "wait_for_frame_quiescence", {"idle_ms": args.idle_ms}
    if command == "wait-for-title-contains":
        return "wait_for_title_contains", {
            "substring": args.substring,
            "timeout_ms": args.timeout_ms,
        }
    return command.replace("-", "_"), {}


def _plain(method: str, result: Any) -> str:
    """What ``--plain`` prints."""
    if isinstance(result, dict):
        if "lines" in result:
            return "\n".join(result["lines"])
        for name in ("markdown", "title", "url"):
            if name in result:
                return str(result[name])
    return json.dumps(result, ensure_ascii=False)


def call(path: str, method: str, params: dict[str, Any], timeout_s: float = 30.0) -> Any:
    """One JSON-RPC call on the socket at ``path``: its result, or its error as AotuiError."""
    request = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout_s)
    try:
        try:
            sock.connect(unix_address(Path(path)))
        except OSError as exc:
            raise AotuiError(
                ErrorCode.E_UNAVAILABLE,
                f"no AWI-TTY socket at {path} ({exc.strerror}); start a desktop (aotui up) "
                "and give its rpc.sock (aotui capabilities --rpc-path) as --socket or AWI_SOCK",
            ) from None
        sock.sendall(json.dumps(request).encode() + b"\n")
        data = b""
        while b"\n" not in data:
            chunk = sock.recv(1 << 16)
            if not chunk:
                break
            data += chunk
    except TimeoutError:
        raise AotuiError(
            ErrorCode.E_TIMEOUT, f"{method} got no answer in {timeout_s:g} s"
        ) from None
    finally:
        sock.close()
    if not data:
        raise AotuiError(ErrorCode.E_UNAVAILABLE, f"the desktop at {path} closed the connection")
    answer = json.loads(data.split(b"\n", 1)[0])
    if "error" in answer:
        raise AotuiError.from_jsonrpc(answer["error"])
    return answer["result"]


def run(args: argparse.Namespace, path: str) -> int:
    """Run the parsed subcommand against the socket at ``path``; the exit code."""
    method, params = _request(args)
    try:
        result = call(path, method, params)
    except AotuiError as exc:
        print(f"{exc.code.value}: {exc.message}", file=sys.stderr)
        return exc.code.exit_code
    print(_plain(method, result) if args.plain else json.dumps(result, ensure_ascii=False))
    return 0


def default_socket() -> str:
    """``$AWI_SOCK``, else the default desktop's ``rpc.sock``."""
    return os.environ.get("AWI_SOCK") or str(DesktopPaths.for_desktop("default", None).rpc_file)


def main(argv: Sequence[str] | None = None) -> int:
    """The ``awi-tty`` console script."""
    parser = argparse.ArgumentParser(
        prog="awi-tty",
        description="AWI-TTY (seed 002): drive the aotui Browser's active tab like a terminal "
        "browser, over the desktop's JSON-RPC socket.",
    )
    parser.add_argument(
        "--socket", help="the desktop's rpc.sock (default: $AWI_SOCK, else the default desktop's)"
    )
    add_arguments(parser)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return ErrorCode.E_INVALID_CMD.exit_code if exc.code not in (0, None) else 0
    return run(args, args.socket or default_socket())
