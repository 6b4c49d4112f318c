"""The public surface is on purpose: every package's ``__all__`` is exactly what is listed here."""

from __future__ import annotations

import importlib

import pytest

PUBLIC = {
    "aotui.protocol": {
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
    },
    "aotui.sandbox": {
        "App",
        "OperationCall",
        "RenderedView",
        "Timer",
        "View",
        "ViewLink",
        "operation",
        "render_view",
    },
    "aotui.supervisor": {
        "Client",
        "DesktopConfig",
        "DesktopUnavailable",
        "Manifest",
        "load_config",
        "load_manifest",
    },
}


@pytest.mark.parametrize("package", sorted(PUBLIC))
def test_exports(package: str) -> None:
    module = importlib.import_module(package)
    assert set(module.__all__) == PUBLIC[package]
    for name in module.__all__:
        assert getattr(module, name) is not None


def test_names_the_issue_promises() -> None:
    from aotui.protocol import AotuiError, Command, ErrorCode, parse_commands
    from aotui.sandbox.render import render_view

    assert callable(parse_commands)
    assert callable(render_view)
    assert issubclass(AotuiError, Exception)
    assert Command.__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert ErrorCode.E_INVALID_CMD.exit_code == 64


def test_sandbox_never_imports_supervisor() -> None:
    import pathlib
    import re

    root = pathlib.Path(__file__).parent.parent
    for folder, forbidden in (("sandbox", "supervisor"), ("protocol", "supervisor|sandbox")):
        for path in (root / folder).glob("*.py"):
            text = path.read_text()
            assert not re.search(rf"^\s*(from|import) ({forbidden})\b", text, re.M), path


def test_the_client_is_importable_from_the_package_aotui() -> None:
    # CONTRACT §9; importing the package alone loads none of the client (a command pays for it
    # only when it uses it).
    import subprocess
    import sys

    from aotui import AotuiError, Client, DesktopUnavailable, ErrorCode
    from aotui.supervisor.interface.client import Client as RoomClient

    assert Client is RoomClient
    assert issubclass(DesktopUnavailable, AotuiError)
    assert ErrorCode.E_TIMEOUT.recoverable
    probe = "import aotui, sys; print('aotui.supervisor.interface.client' in sys.modules)"
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=30
    )
    assert loaded.stdout.strip() == "False"
