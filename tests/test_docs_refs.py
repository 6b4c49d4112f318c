"""The docs name only what exists: modules, symbols, CLI commands and files.

Docs drift silently: a moved module or a renamed command leaves a sentence pointing at nothing. This
reads README.md and docs/*.md (and doc pointers in the code) and checks every reference in
backticks or code blocks that names something of ours:

- a dotted name under one of our packages (``aotui.supervisor.interface.client.Client``, or the
  folder form ``supervisor.interface.client``) imports, and its remaining parts are attributes;
- an exported name (a package's ``__all__``) with ``.attr`` (``App.http``) has that attribute;
- a path of the repository (``supervisor/desktop/desktop.py``, ``configs/desktop.toml``) exists;
- ``aotui WORD`` names a subcommand of the CLI.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from aotui.supervisor.interface.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
ROOMS = ("protocol", "sandbox", "supervisor")
TOP = ("apps", "bench", "configs", "docs", "protocol", "sandbox", "supervisor", "tests")

_CODE = re.compile(r"```[^\n]*\n(.*?)```|`([^`\n]+)`", re.S)
_DOTTED = re.compile(
    r"(?<![\w/.-])(?:aotui\.)?(?:protocol|sandbox|supervisor)(?:\.[A-Za-z_]\w*)+(?![\w/-])"
)
_FILE_SUFFIX = re.compile(r"\.(?:md|py|toml|json|html|txt|db|log|sock)$")
_PATH = re.compile(rf"(?<![\w/.-])((?:{'|'.join(TOP)})/[\w./*-]*[\w/*])")
_COMMAND = re.compile(r"^(?:\$ )?(?:\S*/)?aotui\s+([a-z][a-z-]*)")
_ATTR = re.compile(r"\b([A-Z]\w*)\.([a-z_]\w*)\b")


def _code_spans(text: str) -> Iterator[str]:
    for match in _CODE.finditer(text):
        yield match.group(1) or match.group(2)


def _resolves(dotted: str) -> bool:
    parts = dotted.removeprefix("aotui.").split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value: object = importlib.import_module("aotui." + ".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(value, attr):
                return False
            value = getattr(value, attr)
        return True
    return False


def _has_attribute(owner: object, attr: str) -> bool:
    """A class or instance attribute (one its methods assign to ``self``) of ``owner``."""
    if hasattr(owner, attr):
        return True
    try:
        source = inspect.getsource(owner)  # type: ignore[arg-type]
    except (TypeError, OSError):
        return False
    return re.search(rf"\bself\.{attr}\b\s*(?::[^=]+)?=", source) is not None


def _exported() -> dict[str, object]:
    names: dict[str, object] = {}
    for room in ROOMS:
        package = importlib.import_module(f"aotui.{room}")
        names.update({name: getattr(package, name) for name in package.__all__})
    return names


def _references() -> Iterator[tuple[str, str, str]]:
    """(kind, reference, where) for every reference the docs make."""
    for doc in DOCS:
        where = doc.relative_to(ROOT).as_posix()
        for span in _code_spans(doc.read_text()):
            for match in _DOTTED.finditer(span):
                if not _FILE_SUFFIX.search(match.group(0)):
                    yield "module", match.group(0), where
            for match in _PATH.finditer(span):
                yield "path", match.group(1), where
            for line in span.splitlines():
                if command := _COMMAND.match(line.strip()):
                    yield "command", command.group(1), where
            for match in _ATTR.finditer(span):
                yield "attribute", f"{match.group(1)}.{match.group(2)}", where
    for room in ROOMS:
        for source in (ROOT / room).rglob("*.py"):
            for match in re.finditer(r"\bdocs/[\w-]+\.md\b", source.read_text()):
                yield "path", match.group(0), source.relative_to(ROOT).as_posix()


def _broken() -> list[str]:
    subcommands = next(
        action for action in build_parser()._actions
        if isinstance(action, argparse._SubParsersAction)
    )  # fmt: skip
    commands = set(subcommands.choices)
    exported = _exported()
    broken = []
    for kind, ref, where in _references():
        if kind == "module":
            ok = _resolves(ref)
        elif kind == "path":
            # Globs and placeholders (``bench/bench_NAME.py``) name a pattern, not a file.
            pattern = any(char in ref for char in "*<{") or re.search(r"[A-Z]", ref)
            ok = bool(pattern) or (ROOT / ref).exists()
        elif kind == "command":
            ok = ref in commands
        else:
            name, attr = ref.split(".")
            ok = name not in exported or _has_attribute(exported[name], attr)
        if not ok:
            broken.append(f"{where}: {kind} {ref}")
    return sorted(set(broken))


def test_docs_name_only_what_exists() -> None:
    broken = _broken()
    assert not broken, "the docs name things that do not exist:\n" + "\n".join(broken)


@pytest.mark.parametrize(
    ("kind", "ref"),
    [("module", "aotui.supervisor.nosuch"), ("module", "sandbox.sdk.App.nosuch"),
     ("path", "docs/client.md"), ("command", "frobnicate")],
)  # fmt: skip
def test_the_checker_catches_a_broken_reference(
    kind: str, ref: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = tmp_path / "doc.md"
    text = {"module": f"`{ref}`", "path": f"see `{ref}`", "command": f"`aotui {ref}`"}[kind]
    doc.write_text(f"# A doc\n\n{text}\n")
    monkeypatch.setitem(globals(), "DOCS", [doc])
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    monkeypatch.setitem(globals(), "ROOMS", ())
    (tmp_path / "docs").mkdir()
    assert _broken(), f"{kind} {ref} was not reported"
