"""A shell agent pays the CLI's start-up on every call: the everyday commands import little.

``aotui snapshot``, ``exec`` and ``status`` need the JSON-RPC client (a socket and json), argument
parsing and output formatting; the ZeroMQ client (pyzmq, msgpack, the codec and message classes,
dataclasses) only for a desktop without ``rpc.sock``; the runtime of ``aotui up`` (asyncio), the
store (sqlite3), the renderer (jinja2, lxml), the watchdog (psutil) and ``aotui mcp`` (the MCP
SDK) are not theirs to load. Each check runs the commands in a fresh interpreter and reads its
``sys.modules``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from aotui.supervisor.interface.cli import COMMANDS, build_parser
from tests.conftest import RunningDesktop

Start = Callable[..., RunningDesktop]

#: Modules (and their submodules) the fast path must not import, with who needs them.
HEAVY = {
    "asyncio": "the supervisor's event loop (aotui up)",
    "sqlite3": "the store (aotui up, desktops)",
    "jinja2": "app views",
    "lxml": "the renderer",
    "psutil": "the watchdog and status sampling (the supervisor's side)",
    "mcp": "aotui mcp",
    "anyio": "aotui mcp",
    "pydantic": "aotui mcp",
    "tomllib": "config files (aotui up)",
    "aotui.supervisor.store": "the store",
    "aotui.supervisor.config": "aotui up",
    "aotui.supervisor.server": "the supervisor process",
    "aotui.sandbox": "the workers",
    # 22 frozen dataclasses defined at import were a third of a command's start-up.
    "aotui.protocol.worker_messages": "the supervisor's workers and zygote (their messages)",
    # argparse imports it (with bz2 and lzma) for the terminal width, ~2 ms; cli.py finds it.
    "shutil": "file operations (aotui up, logs)",
    # The fast commands ask on rpc.sock: pyzmq's package init alone was ~11 ms of CPU a call.
    "zmq": "the ZeroMQ client (a desktop without rpc.sock) and the supervisor",
    "msgpack": "the ZeroMQ client's codec",
    "aotui.protocol.codec": "the ZeroMQ client",
    "aotui.protocol.messages": "the ZeroMQ client",
    "aotui.supervisor.interface.client": "the other commands",
    # inspect, ast and dis come with it, ~6 ms.
    "dataclasses": "the ZeroMQ client's messages, the supervisor",
    # ~2 ms: the fast path's modules name typing's names under TYPE_CHECKING only.
    "typing": "annotations (the other commands)",
}

# Runs each argv through main() in one interpreter, then writes its sys.modules to argv[2].
PROBE = """\
import json, sys
from aotui.supervisor.interface.cli import main
codes = [main(argv) for argv in json.loads(sys.argv[1])]
with open(sys.argv[2], "w") as out:
    json.dump({"codes": codes, "modules": sorted(sys.modules)}, out)
"""


def run_cli(commands: list[list[str]], tmp_path: Path) -> tuple[list[int], list[str]]:
    """Exit codes of ``commands`` run in one fresh interpreter, and the modules it imported."""
    report = tmp_path / "modules.json"
    finished = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(commands), str(report)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=45,
        check=False,
    )
    assert finished.returncode == 0, finished.stderr
    result = json.loads(report.read_text())
    return result["codes"], result["modules"]


def heavy_in(modules: list[str]) -> dict[str, str]:
    """The loaded modules of :data:`HEAVY` (or their submodules), with why they are heavy."""
    return {
        name: why
        for name, why in HEAVY.items()
        if any(module == name or module.startswith(name + ".") for module in modules)
    }


def test_fast_commands_on_a_live_desktop_import_nothing_heavy(
    start_desktop: Start, tmp_path: Path
) -> None:
    desktop = start_desktop(["echo"])
    where = ["--desktop", desktop.name, "--socket", str(desktop.runtime)]
    codes, modules = run_cli(
        [
            ["status", *where],
            ["status", "--json", *where],
            ["snapshot", "--plain", *where],
            ["exec", "<context>open --application app_0</context>", *where],
            ["ping", *where],
        ],
        tmp_path,
    )
    assert codes == [0, 0, 0, 0, 0]
    assert heavy_in(modules) == {}
    assert "aotui.supervisor.interface.rpc_client" in modules


def test_the_check_sees_the_zeromq_fallback(start_desktop: Start, tmp_path: Path) -> None:
    # A desktop without rpc.sock (older than it) is asked on its control socket: zmq comes in.
    desktop = start_desktop(["echo"])
    rpc = desktop.runtime / desktop.name / "rpc.sock"
    rpc.rename(rpc.with_name("rpc.sock.aside"))
    where = ["--desktop", desktop.name, "--socket", str(desktop.runtime)]
    try:
        codes, modules = run_cli([["status", *where], ["snapshot", "--plain", *where]], tmp_path)
    finally:
        rpc.with_name("rpc.sock.aside").rename(rpc)
    assert codes == [0, 0]
    assert {"zmq", "msgpack", "dataclasses"} <= set(heavy_in(modules))


def test_fast_commands_without_a_desktop_import_nothing_heavy(tmp_path: Path) -> None:
    where = ["--socket", str(tmp_path / "run")]
    codes, modules = run_cli(
        [
            ["status", *where],
            ["snapshot", "--json", *where],
            ["exec", "<context>open --application app_0</context>", *where],
            ["ping", *where],
        ],
        tmp_path,
    )
    assert codes == [69, 69, 69, 69]
    assert heavy_in(modules) == {}


def entry_points() -> list[list[str]]:
    """How users start the CLI: ``python -m aotui.supervisor``, and the installed script."""
    script = Path(sys.executable).parent / "aotui"
    module = ["-m", "aotui.supervisor"]
    return [module, [str(script)]] if script.exists() else [module]


@pytest.mark.parametrize("entry", entry_points(), ids=lambda entry: Path(entry[-1]).name)
def test_entry_points_import_nothing_heavy(entry: list[str], tmp_path: Path) -> None:
    # -X importtime names every module the interpreter imports, the entry's own included.
    finished = subprocess.run(
        [sys.executable, "-X", "importtime", *entry, "status", "--socket", str(tmp_path)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=45,
        check=False,
    )
    assert finished.returncode == 69, finished.stderr
    lines = [line for line in finished.stderr.splitlines() if line.startswith("import time:")]
    modules = [line.rsplit("|", 1)[1].strip() for line in lines[1:]]  # [0] is the header
    assert "aotui.supervisor.interface.cli" in modules
    assert "importlib.metadata" not in modules  # entry points are not looked up at start
    assert heavy_in(modules) == {}


def test_the_check_sees_a_heavy_command(tmp_path: Path) -> None:
    # `aotui desktops` reads the stores: the probe must see sqlite3 come in.
    codes, modules = run_cli([["desktops", "--socket", str(tmp_path / "run")]], tmp_path)
    assert codes == [0]
    assert "sqlite3" in heavy_in(modules)


# main() with argv is a caller's; main() without is the process's own (the script, python -m).
FREEZE_PROBE = """\
import gc, sys
from aotui.supervisor.interface.cli import main
where = ["--socket", sys.argv[1]]
main(["status", *where])
as_a_callee = gc.get_freeze_count()
sys.argv = ["aotui", "status", *where]
main()
print(as_a_callee, gc.get_freeze_count())
"""


def test_only_the_process_entry_freezes_the_collector(tmp_path: Path) -> None:
    # Its start-up objects live until exit: the collector need not walk them (~9 ms a call).
    finished = subprocess.run(
        [sys.executable, "-c", FREEZE_PROBE, str(tmp_path)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=45,
        check=False,
    )
    assert finished.returncode == 0, finished.stderr
    as_a_callee, as_the_entry = map(int, finished.stdout.split())
    assert as_a_callee == 0
    assert as_the_entry > 1000


LAZY_PROBE = """\
import json, sys
import aotui.protocol, aotui.sandbox, aotui.supervisor
before = sorted(m for m in sys.modules if m.startswith("aotui."))
encode = aotui.protocol.encode
after = sorted(m for m in sys.modules if m.startswith("aotui."))
try:
    aotui.sandbox.no_such_name
except AttributeError as exc:
    missing = str(exc)
print(json.dumps({
    "before": before,
    "after": after,
    "cached": vars(aotui.protocol).get("encode") is encode,
    "dir": dir(aotui.sandbox) == sorted(aotui.sandbox.__all__),
    "missing": missing,
}))
"""


def run_probe(code: str) -> Any:
    """Run ``code`` in a fresh interpreter; what it printed, as JSON."""
    finished = subprocess.run(
        [sys.executable, "-c", code],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=45,
        check=False,
    )
    assert finished.returncode == 0, finished.stderr
    return json.loads(finished.stdout)


def test_package_exports_load_on_first_use() -> None:
    seen = run_probe(LAZY_PROBE)
    # Importing the three rooms imports none of their submodules but the helper itself.
    rooms = ["aotui.protocol", "aotui.protocol.lazy", "aotui.sandbox", "aotui.supervisor"]
    assert seen["before"] == rooms
    assert "aotui.protocol.codec" in seen["after"]
    assert "aotui.protocol.grammar" not in seen["after"]
    assert seen["cached"]
    assert seen["dir"]
    assert seen["missing"] == "module 'aotui.sandbox' has no attribute 'no_such_name'"


REGISTRY_PROBE = """\
import json, sys
from aotui.protocol.codec import Codec
from aotui.protocol.messages import Request, message_type
codec = Codec()
loaded = lambda: "aotui.protocol.worker_messages" in sys.modules
seen = {"at_start": loaded()}
codec.decode(codec.encode(Request(1, "status", {})))
seen["after_a_client_kind"] = loaded()
seen["unknown"] = repr(message_type("no_such_kind"))
seen["after_an_unknown_kind"] = loaded()
# A frame of an inner kind, as a worker sends it: the codec loads its class to decode it.
import msgpack
pong = codec.decode(msgpack.packb([1, "pong", {"seq": 7}]))
seen["decoded"] = [type(pong).__module__, type(pong).__name__, pong.seq]
print(json.dumps(seen))
"""


def test_the_inner_message_kinds_load_on_first_use() -> None:
    seen = run_probe(REGISTRY_PROBE)
    assert seen["at_start"] is False
    assert seen["after_a_client_kind"] is False
    assert seen["unknown"] == "None"
    assert seen["after_an_unknown_kind"] is True  # a peer's bad kind is looked up once, in full
    assert seen["decoded"] == ["aotui.protocol.worker_messages", "Pong", 7]


def test_the_registry_names_every_kind_once() -> None:
    from aotui.protocol import messages, worker_messages
    from aotui.protocol.messages import MESSAGE_TYPES, Message, message_type

    for kind, cls in MESSAGE_TYPES.items():
        assert kind == cls.KIND
        assert message_type(kind) is cls
    # Every message class either module defines is registered, under the tag it writes.
    defined = {
        value
        for module in (messages, worker_messages)
        for value in vars(module).values()
        if isinstance(value, type) and issubclass(value, Message) and value is not Message
    }
    assert defined == set(MESSAGE_TYPES.values())
    # The lazy names are the inner module's own objects, under the old import path.
    for name in worker_messages.__all__:
        assert getattr(messages, name) is getattr(worker_messages, name)
    assert set(worker_messages.__all__) <= set(messages.__all__)


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The command parsers ``parser`` built, by command."""
    (commands,) = (
        action for action in parser._actions if isinstance(action, argparse._SubParsersAction)
    )
    return dict(commands.choices)


def test_a_named_command_builds_its_own_parser_only() -> None:
    everything = subparsers(build_parser())
    assert set(everything) == set(COMMANDS)
    for name, full in everything.items():
        alone = subparsers(build_parser(name))
        assert list(alone) == [name]
        # The same arguments, defaults and help: the one parser is the full one's twin.
        assert alone[name].format_help() == full.format_help()
        assert described(alone[name]) == described(full)


def described(parser: argparse.ArgumentParser) -> list[tuple[Any, ...]]:
    """What each argument of ``parser`` is: its names, default, count, choices, type."""
    return [
        (
            action.dest,
            action.option_strings,
            action.default,
            action.nargs,
            action.choices,
            action.type,
        )
        for action in parser._actions
    ]


def test_the_first_word_chooses_what_is_built(tmp_path: Path) -> None:
    where = ["--socket", str(tmp_path / "run")]
    # Usage errors read as they did: an unknown option is the top parser's to report...
    wrong_option = run_usage(["status", "--no-such-option", *where])
    assert wrong_option == (64, "aotui: error: unrecognized arguments: --no-such-option")
    missing = run_usage(["say", *where])
    assert missing == (64, "aotui say: error: the following arguments are required: text")
    # ... and an unknown command lists every command, all built for it.
    code, message = run_usage(["no-such-command", *where])
    assert code == 64
    assert message.startswith("aotui: error: argument COMMAND: invalid choice: 'no-such-command'")
    assert all(repr(name) in message for name in COMMANDS)


def run_usage(argv: list[str]) -> tuple[int, str]:
    """The exit code and last stderr line of ``aotui argv`` in a fresh interpreter."""
    finished = subprocess.run(
        [sys.executable, "-m", "aotui.supervisor", *argv],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=45,
        check=False,
    )
    return finished.returncode, finished.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("columns", ["50", "123", "0", "wide", None])
def test_help_is_laid_out_as_argparse_lays_it_out(
    columns: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    top = build_parser()
    ours = [top, *subparsers(top).values()]
    texts = [parser.format_help() for parser in ours]
    # The same parsers with argparse's own formatters, which ask shutil for the width.
    top.formatter_class = argparse.RawDescriptionHelpFormatter
    for parser in ours[1:]:
        parser.formatter_class = argparse.HelpFormatter
    assert [parser.format_help() for parser in ours] == texts
    if columns == "50":  # a command's help wraps to the width (its usage and descriptions)
        snapshot = texts[1 + list(COMMANDS).index("snapshot")]
        assert max(len(line) for line in snapshot.splitlines()) <= 48


# `aotui --help` and `aotui COMMAND --help` in one interpreter each, counting the arguments built.
HELP_PROBE = """\
import argparse, contextlib, io, json, sys
from aotui.supervisor.interface.cli import main
built = []
add = argparse._ActionsContainer.add_argument
def counted(self, *args, **kwargs):
    built.append(args)
    return add(self, *args, **kwargs)
argparse._ActionsContainer.add_argument = counted
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        main(json.loads(sys.argv[1]))
    except SystemExit as exit:
        code = exit.code
print(json.dumps({"code": code, "built": len(built), "help": out.getvalue()}))
"""


@pytest.mark.parametrize("argv", [["--help"], ["-h"], ["status", "--help"], ["snapshot", "-h"]])
def test_help_builds_only_what_it_prints(argv: list[str]) -> None:
    finished = subprocess.run(
        [sys.executable, "-c", HELP_PROBE, json.dumps(argv)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=45,
        check=False,
    )
    assert finished.returncode == 0, finished.stderr
    seen = json.loads(finished.stdout)
    assert seen["code"] == 0
    # The common options, -h, and the one command's own: never the two dozen commands' ~100.
    assert seen["built"] <= 25, seen["built"]
    # What the user reads is what the parser of every command prints.
    named = argv[0] if argv[0] in COMMANDS else None
    full = build_parser()
    expected = (subparsers(full)[named] if named else full).format_help()
    assert seen["help"] == expected


def test_listed_commands_print_the_same_top_help() -> None:
    assert build_parser(None, listed=True).format_help() == build_parser().format_help()
    assert set(subparsers(build_parser(None, listed=True))) == set(COMMANDS)


def test_a_listed_command_taken_after_all_is_built_then() -> None:
    # Should argparse take a command _dispatch did not see, its parser is built on the spot.
    args = build_parser(None, listed=True).parse_args(["snapshot", "--since", "T3", "--json"])
    assert (args.command, args.since, args.json, args.plain) == ("snapshot", "T3", True, False)
