"""docs/reference.md says what the code does: its tables are compared with the declarations.

The error table with :class:`ErrorCode` (code, recoverable, JSON-RPC and exit codes), the CLI
table with the commands ``aotui`` has, the JSON-RPC table with the methods ``rpc.sock`` takes and
the MCP table with the fixed tools ``aotui mcp`` lists. A face that grows without its reference
(or the reverse) fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from aotui.protocol import api
from aotui.protocol.errors import ErrorCode
from aotui.supervisor.interface import jsonrpc
from aotui.supervisor.interface.cli import COMMANDS

pytestmark = pytest.mark.timeout(30)

REFERENCE = Path(__file__).resolve().parents[1] / "docs" / "reference.md"


def _section(number: int) -> str:
    text = REFERENCE.read_text()
    start = text.index(f"\n## {number}. ")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def _tables(section: str) -> list[list[list[str]]]:
    """Every Markdown table of ``section``: rows of cells, header and rule left out."""
    tables: list[list[list[str]]] = []
    current: list[list[str]] = []
    for line in [*section.splitlines(), ""]:
        if line.startswith("|"):
            current.append([cell.strip() for cell in line.strip("|").split("|")])
        elif current:
            tables.append(current[2:])
            current = []
    return tables


def _names(rows: list[list[str]]) -> list[str]:
    return [row[0].strip("`") for row in rows]


def test_the_error_table_is_the_error_codes() -> None:
    (rows,) = _tables(_section(7))
    assert _names(rows) == [code.name for code in ErrorCode]
    for row in rows:
        code = ErrorCode[row[0]]
        assert row[2] == ("yes" if code.recoverable else "no"), row
        assert row[3].split()[0] == str(code.jsonrpc_code), row
        assert row[4] == str(code.exit_code), row


def test_the_cli_table_is_the_commands() -> None:
    rows = _tables(_section(8))[0]
    assert sorted(_names(rows)) == sorted(COMMANDS)


def test_the_json_rpc_table_is_the_methods() -> None:
    rows = _tables(_section(9))[0]
    assert sorted(_names(rows)) == sorted(jsonrpc.METHODS)


def test_the_mcp_table_is_the_fixed_tools() -> None:
    from aotui.supervisor.interface import mcp_server

    rows = _tables(_section(9))[1]
    assert sorted(_names(rows)) == sorted(tool.name for tool in mcp_server.TOOLS)


def test_the_client_methods_section_is_the_declaration() -> None:
    text = REFERENCE.read_text()
    start = text.index("<!-- generated: python -m aotui.protocol.api -->\n")
    end = text.index("\n<!-- end of generated -->")
    shown = text[start:end].split("\n", 1)[1]
    assert shown == api.reference_markdown(), (
        "docs/reference.md §10 differs from protocol/api.py: paste the output of "
        "`python -m aotui.protocol.api` between its markers"
    )


def test_every_face_offers_what_is_declared_for_it() -> None:
    from aotui.supervisor.interface import cli, mcp_tools

    assert set(jsonrpc.METHODS) == {
        name for name, method in api.METHODS.items() if api.Face.JSONRPC in method.faces
    }
    for tool in mcp_tools.TOOLS:  # every property described, as declared
        method = mcp_tools.TOOL_METHODS[tool.name]
        assert tool.inputSchema == method.input_schema(api.Face.MCP)
        for name, schema in tool.inputSchema["properties"].items():
            assert schema["description"], (tool.name, name)
    for method in api.METHODS.values():
        if not method.cli_command:
            continue
        parser = cli.build_parser(method.cli_command)
        (commands,) = (a for a in parser._actions if a.dest == "command")
        assert isinstance(commands.choices, dict)
        flags = {
            option
            for action in commands.choices[method.cli_command]._actions
            for option in action.option_strings
        }
        for name, declared in method.offered(api.Face.CLI).items():
            if declared.flag:
                assert declared.flag in flags, (method.name, name)


def test_every_page_cites_the_reference_not_a_file_a_clone_lacks() -> None:
    # CONTRACT.md lives in the project's shared folder, not in a user's clone.
    root = REFERENCE.parents[1]
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    citing = [page.name for page in pages if re.search(r"CONTRACT", page.read_text())]
    assert citing == [], f"these pages cite CONTRACT.md instead of docs/reference.md: {citing}"
