"""Every ```python and ```sh example of README.md and docs/*.md runs, against a real desktop.

A block right after ``<!-- not-tested: REASON -->`` is skipped (the reason is required); every
other one must be one of these, or the test fails and names it:

- ``sh``: every command line is an ``aotui`` command (``aotui`` or ``.venv/bin/aotui``, comments
  allowed). The lines run in order with this venv's ``aotui`` on a private desktop
  (``AOTUI_SOCKET`` and ``AOTUI_HOME`` under the test's directory); each must exit 0. A block that
  does not start with ``aotui up`` gets a default desktop started for it.
- ``python``, a program that uses the client: it runs with this venv's Python on a private
  desktop (the bundled apps; the one it names with ``Client("NAME")``, else the default), and
  must exit 0.

README.md also runs as a reader follows it: its examples in order, in one place, with nothing
started for them.
- ``python`` in ``docs/apps.md``: the tutorial's whole app (installed and driven on a desktop as
  its section 10 shows), an excerpt of it (checked to be verbatim, so it runs as part of it), or
  its pytest example (run with pytest beside the app).
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from aotui.protocol.errors import ErrorCode

REPO = Path(__file__).resolve().parent.parent
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
AOTUI = Path(sys.executable).parent / "aotui"
TUTORIAL = REPO / "docs" / "apps.md"

_FENCE = re.compile(r"^(?P<indent> *)```(?P<info>[\w-]*)\s*$")
_MARKER = re.compile(r"<!--\s*not-tested:\s*(?P<reason>.*?)\s*-->")
_CLIENT_IMPORT = re.compile(
    r"^\s*from aotui(\.supervisor(\.interface(\.client)?)?)? import .*\bClient\b", re.M
)


@dataclass(frozen=True)
class Example:
    """One fenced code block of a document."""

    path: Path
    line: int
    language: str
    code: str
    #: The reason given by a ``<!-- not-tested: … -->`` marker right before the block.
    not_tested: str | None

    def __str__(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def fenced_blocks(path: Path) -> list[Example]:
    """Every fenced block of ``path`` (dedented when nested in a list), with its marker."""
    lines = path.read_text().splitlines()
    found: list[Example] = []
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        indent = opening["indent"]
        end = index + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        body = [
            line[len(indent) :] if line.startswith(indent) else line
            for line in lines[index + 1 : end]
        ]
        before = next((line.strip() for line in reversed(lines[:index]) if line.strip()), "")
        marker = _MARKER.fullmatch(before)
        found.append(
            Example(
                path,
                index + 1,
                opening["info"],
                "\n".join(body) + "\n",
                marker["reason"] if marker else None,
            )
        )
        index = end + 1
    return found


EXAMPLES = [
    block
    for path in DOCUMENTS
    for block in fenced_blocks(path)
    if block.language in ("python", "sh")
]


def aotui_commands(code: str) -> list[list[str]] | None:
    """The argument lists of an ``sh`` block's commands, or ``None`` if one is not ``aotui``."""
    commands = []
    for line in code.replace("\\\n", " ").splitlines():  # backslash-newline continues a line
        try:
            words = shlex.split(line, comments=True)
        except ValueError:  # not a line a shell would run as one command either
            return None
        if not words:
            continue
        if words[0] not in ("aotui", ".venv/bin/aotui"):
            return None
        commands.append(words[1:])
    return commands


def tutorial_file(name: str) -> str:
    """The final listing of ``todo/NAME`` at the end of docs/apps.md."""
    heading = rf"^### `todo/{re.escape(name)}`\n\n```\w+\n(.*?)^```$"
    found = re.search(heading, TUTORIAL.read_text(), re.S | re.M)
    assert found, f"docs/apps.md has no final listing of todo/{name}"
    return found.group(1)


def kind_of(example: Example) -> str | None:
    """How ``example`` runs, or ``None`` when it cannot (it must then be marked)."""
    if example.language == "sh":
        return "sh" if aotui_commands(example.code) else None
    try:
        ast.parse(example.code)
        parses = True
    except SyntaxError:
        parses = False
    if example.path == TUTORIAL:
        final = tutorial_file("app.py")
        if example.code == final:
            return "tutorial app"
        if example.code.startswith("# test_todo.py") and parses:
            return "tutorial test"
        if example.code in final:
            return "tutorial excerpt"
        return None
    if parses and _CLIENT_IMPORT.search(example.code):
        return "client program"
    return None


# --- a private desktop --------------------------------------------------------------------------


@dataclass
class Sandbox:
    """Where examples run: a private runtime directory and store, and this venv's tools."""

    root: Path
    env: dict[str, str]

    def aotui(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run this venv's ``aotui`` with the private environment."""
        return subprocess.run(
            [str(AOTUI), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env=self.env,
            cwd=self.root,
            stdin=subprocess.DEVNULL,
        )

    def up(self, desktop: str = "default") -> None:
        """Start ``desktop`` (the bundled apps) in the background."""
        started = self.aotui("up", "--detach", "--desktop", desktop)
        assert started.returncode == 0, started.stderr

    def stop_everything(self) -> None:
        """Stop every desktop started here, even when the example left one running."""
        for pidfile in (self.root / "run").glob("*/supervisor.pid"):
            with contextlib.suppress(ValueError, OSError, psutil.NoSuchProcess):
                supervisor = psutil.Process(int(pidfile.read_text()))
                family = [supervisor, *supervisor.children(recursive=True)]
                supervisor.terminate()
                _, alive = psutil.wait_procs(family, timeout=10)
                for process in alive:
                    process.kill()
                assert not alive, f"processes left behind: {[p.pid for p in alive]}"


@pytest.fixture
def sandbox(tmp_path: Path, private_home: Path) -> Iterator[Sandbox]:
    """A private place for one example; stops whatever it started."""
    env = {**os.environ, "AOTUI_SOCKET": str(tmp_path / "run"), "AOTUI_HOME": str(private_home)}
    env.pop("AOTUI_SESSION", None)
    box = Sandbox(tmp_path, env)
    try:
        yield box
    finally:
        box.stop_everything()


# --- the examples -------------------------------------------------------------------------------


def test_the_documents_have_examples() -> None:
    kinds = {kind_of(example) for example in EXAMPLES}
    assert {"sh", "client program", "tutorial app", "tutorial excerpt"} <= kinds
    assert all(example.not_tested != "" for example in EXAMPLES), "a marker without a reason"


@pytest.mark.timeout(180)
@pytest.mark.parametrize("example", EXAMPLES, ids=str)
def test_example_runs(example: Example, sandbox: Sandbox) -> None:
    if example.not_tested is not None:
        assert example.not_tested, f"{example}: say why it is not tested"
        pytest.skip(f"marked not-tested: {example.not_tested}")
    kind = kind_of(example)
    if kind is None:
        pytest.fail(
            f"{example}: this ```{example.language} block neither runs as documented here "
            "(see the module docstring) nor is marked `<!-- not-tested: reason -->`:\n"
            + example.code
        )
    RUNNERS[kind](example, sandbox)


def run_sh(example: Example, sandbox: Sandbox, started: bool = False) -> None:
    commands = aotui_commands(example.code)
    assert commands
    if commands[0][:1] != ["up"] and not started:
        sandbox.up()
    for args in commands:
        result = sandbox.aotui(*args)
        allowed = (0, 1) if args[:1] == ["doctor"] else (0,)  # 1: strict mode cannot run here
        assert result.returncode in allowed, f"{example}: aotui {shlex.join(args)}\n{result.stderr}"
    if not started:
        sandbox.aotui("down")  # when the block left its desktop running


@pytest.mark.timeout(240)
def test_the_readme_runs_in_order(sandbox: Sandbox) -> None:
    # A reader runs each block after the last, on what the blocks before left: nothing is
    # started or stopped for a block, and the Python example finds the desktop it was told to
    # start (the default one is stopped by then and holds the notes the shell examples added).
    ran = []
    for example in fenced_blocks(REPO / "README.md"):
        kind = kind_of(example) if example.language in ("python", "sh") else None
        if example.not_tested is not None or kind is None:
            continue
        if kind == "sh":
            run_sh(example, sandbox, started=True)
        else:
            assert kind == "client program", f"{example}: {kind} in the README"
            run_client_program(example, sandbox, started=True)
        ran.append(kind)
    assert ran == ["sh", "sh", "client program"]


def test_the_readme_lists_every_exit_code() -> None:
    # The README's exit-status table: each row's exit code and the error codes that exit so.
    rows = re.findall(r"^\| (\d+) \| [^|]+ \|([^|]*)\|$", (REPO / "README.md").read_text(), re.M)
    listed = {int(code): set(re.findall(r"`(E_\w+)`", names)) for code, names in rows}
    expected: dict[int, set[str]] = {0: set()}
    for code in ErrorCode:
        expected.setdefault(code.exit_code, set()).add(code.value)
    assert listed == expected


def run_client_program(example: Example, sandbox: Sandbox, started: bool = False) -> None:
    named = re.search(r"\bClient\(\s*[\"']([\w.-]+)[\"']", example.code)
    desktop = named[1] if named else "default"
    if not started:
        sandbox.up(desktop)
    program = sandbox.root / "example.py"
    program.write_text(example.code)
    result = subprocess.run(
        [sys.executable, str(program)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=sandbox.env,
        cwd=sandbox.root,
    )
    assert result.returncode == 0, f"{example}:\n{result.stdout}\n{result.stderr}"
    # The program left its `with` block: the input lease is free for the next agent.
    status = json.loads(sandbox.aotui("status", "--json", "--desktop", desktop).stdout)
    assert status["lease_owner"] is None


def write_todo(parent: Path) -> Path:
    """The tutorial's final app, written out of docs/apps.md."""
    app_dir = parent / "todo"
    app_dir.mkdir()
    (app_dir / "aoapp.json").write_text(tutorial_file("aoapp.json"))
    (app_dir / "app.py").write_text(tutorial_file("app.py"))
    return app_dir


def run_tutorial_app(example: Example, sandbox: Sandbox) -> None:
    write_todo(sandbox.root)
    sandbox.up()
    # docs/apps.md section 10, on a real desktop.
    installed = sandbox.aotui("install", "./todo")
    assert installed.stdout.strip() == "app_5", installed.stderr
    for text in (
        "<context>open --application app_5</context>",
        '<context app_id="app_5" view_id="view_0">'
        'execute add_todo --title "Buy milk" --remind_in_s 60</context>',
    ):
        ran = sandbox.aotui("exec", text)
        assert ran.stdout.strip() == "ok: 1 command(s) ran", ran.stderr
    snapshot = sandbox.aotui("snapshot", "--plain").stdout
    assert '<application id="app_5" name="Todo">' in snapshot
    assert "- [Buy milk](todo:todos[0])" in snapshot
    assert "    - [Buy milk](view:view_1)" in snapshot
    for text in (
        '<context app_id="app_5">mount --view view_1</context>',
        '<context app_id="app_5" view_id="view_1">execute rename --title "Buy oat milk"</context>',
    ):
        ran = sandbox.aotui("exec", text)
        assert ran.returncode == 0, ran.stderr
    assert "- [Buy oat milk](todo:todos[0])" in sandbox.aotui("snapshot", "--plain").stdout
    failed = sandbox.aotui(
        "exec", '<context app_id="app_5" view_id="view_0">execute add_todo --title " "</context>'
    )
    assert failed.returncode == 70
    assert "ValueError: a todo needs a title, e.g. --title 'Buy milk'" in failed.stderr
    assert sandbox.aotui("uninstall", "app_5").returncode == 0
    assert sandbox.aotui("down").returncode == 0


def run_tutorial_excerpt(example: Example, sandbox: Sandbox) -> None:
    # Verbatim in the whole app, which runs on a desktop in its own example.
    assert example.code in tutorial_file("app.py")


def run_tutorial_test(example: Example, sandbox: Sandbox) -> None:
    write_todo(sandbox.root)
    (sandbox.root / "test_todo.py").write_text(example.code)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_todo.py"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=sandbox.env,
        cwd=sandbox.root,
    )
    assert result.returncode == 0, f"{example}:\n{result.stdout}\n{result.stderr}"
    assert "1 passed" in result.stdout


RUNNERS = {
    "sh": run_sh,
    "client program": run_client_program,
    "tutorial app": run_tutorial_app,
    "tutorial excerpt": run_tutorial_excerpt,
    "tutorial test": run_tutorial_test,
}


def test_an_unmarked_block_that_cannot_run_is_refused(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```sh\nmake demo\n```\n\n<!-- not-tested: illustrative -->\n```sh\nrm -rf /nope\n```\n"
        "\n```python\nprint('no client here')\n```\n"
    )
    unmarked_sh, marked, unmarked_python = fenced_blocks(page)
    assert (unmarked_sh.not_tested, marked.not_tested) == (None, "illustrative")
    assert kind_of(unmarked_sh) is None
    assert kind_of(unmarked_python) is None
    assert textwrap.dedent(marked.code) == "rm -rf /nope\n"
