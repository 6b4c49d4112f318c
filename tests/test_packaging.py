"""The wheel is usable: one import name, the bundled apps and config inside, and it runs the demo.

The wheel is built from this checkout without build isolation (no network) and installed with
pip into a fresh virtualenv; the third-party dependencies come from the test environment through a
path entry, so the installed ``aotui`` is the wheel's and nothing else of this checkout.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
RUNTIME_ROOMS = ("protocol", "sandbox", "supervisor")
#: Import name → distribution name, for the runtime's third-party imports.
DISTRIBUTIONS = {
    "zmq": "pyzmq",
    "lxml": "lxml",
    "msgpack": "msgpack",
    "psutil": "psutil",
    "jinja2": "jinja2",
    "markupsafe": "markupsafe",
    "mcp": "mcp",
    "anyio": "anyio",
    "pydantic": "pydantic",
    "starlette": "starlette",
    "uvicorn": "uvicorn",
}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Built from a copy of what the build reads: setuptools reuses the checkout's build/lib, so a
    # file removed from the checkout would stay in a wheel built there (and two builds would race).
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    for room in {d.split("/")[0] for d in PYPROJECT["tool"]["setuptools"]["package-dir"].values()}:
        shutil.copytree(ROOT / room, source / room, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("wheel")
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--quiet", "--wheel-dir", str(out), str(source)],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "PIP_NO_INDEX": "1"},
    )  # fmt: skip
    assert build.returncode == 0, build.stderr
    (built,) = out.glob("aotui-*.whl")
    return built


def test_wheel_holds_one_import_name_with_apps_and_config(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names if not name.startswith("aotui-")}
    assert tops == {"aotui"}, f"top-level names besides aotui: {tops - {'aotui'}}"
    assert "aotui/__init__.py" in names  # the client at the top: `from aotui import Client`
    for room in RUNTIME_ROOMS:
        assert f"aotui/{room}/__init__.py" in names
    assert "aotui/configs/desktop.toml" in names
    bundled = sorted(p.parent.relative_to(ROOT) for p in (ROOT / "apps").rglob("aoapp.json"))
    assert bundled, "no bundled apps found"
    for app in bundled:
        manifest = json.loads((ROOT / app / "aoapp.json").read_text())
        for name in ("aoapp.json", manifest["entry"]):
            assert f"aotui/{app}/{name}" in names, f"{app}/{name} is not in the wheel"


def test_every_bundled_app_is_a_listed_package() -> None:
    # setuptools ships only listed packages: an app added to apps/ but not to pyproject.toml
    # would be missing from every installed desktop.
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    for manifest in (ROOT / "apps").rglob("aoapp.json"):
        parts = manifest.parent.relative_to(ROOT).parts
        for depth in range(1, len(parts) + 1):
            package = ".".join(("aotui", *parts[:depth]))
            assert package in listed, f"{package} is missing from [tool.setuptools] packages"


def _third_party_imports() -> set[str]:
    stdlib = set(sys.stdlib_module_names)
    found: set[str] = set()
    for room in RUNTIME_ROOMS:
        for source in (ROOT / room).rglob("*.py"):
            for node in ast.walk(ast.parse(source.read_text())):
                if isinstance(node, ast.Import):
                    found.update(alias.name.split(".")[0] for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    found.add(node.module.split(".")[0])
    return {name for name in found if name not in stdlib and name not in {"aotui", "__future__"}}


#: Imported only by runtime code that a configuration reaches, with the extra that installs it
#: (``store = "postgresql://…"``: supervisor/store/postgres.py, imported by open_store).
OPTIONAL = {"psycopg": "postgres", "ray": "fleet"}


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=\[ ]", d)[0].lower() for d in requirements}


def test_runtime_dependencies_are_what_runtime_code_imports() -> None:
    declared = _names(PYPROJECT["project"]["dependencies"])
    extras = PYPROJECT["project"]["optional-dependencies"]
    for name, extra in OPTIONAL.items():
        assert name in _names(extras[extra]), f"the {extra!r} extra installs {name}"
    imported = _third_party_imports() - set(OPTIONAL)
    unknown = imported - set(DISTRIBUTIONS)
    assert not unknown, f"runtime code imports {unknown}: add them to DISTRIBUTIONS and deps"
    assert declared == {DISTRIBUTIONS[name] for name in imported}


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv holding the wheel; its ``bin`` directory."""
    target = tmp_path_factory.mktemp("installed") / "venv"
    venv.EnvBuilder(with_pip=False).create(target)
    python = target / "bin" / "python"
    # The dependencies from this environment, without its editable aotui (a .pth in a path
    # entry is not processed, so the editable finder stays out).
    site = Path(
        subprocess.check_output(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
        ).strip()
    )
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
         "--no-index", "--quiet", str(wheel)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr
    where = subprocess.check_output(
        [python, "-c", "import aotui.supervisor as s; print(s.__file__)"], text=True
    )
    assert where.startswith(str(site)), f"aotui came from {where}, not the wheel"
    return target / "bin"


def test_installed_wheel_runs_the_demo(installed: Path, tmp_path: Path) -> None:
    runtime = tmp_path / "run"
    env = {**os.environ, "AOTUI_HOME": str(tmp_path / "home"), "XDG_RUNTIME_DIR": str(runtime)}
    runtime.mkdir(mode=0o700)
    demo = subprocess.run(
        [installed / "aotui", "demo"],
        capture_output=True, text=True, timeout=120, check=False, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "demo finished: every command was answered." in demo.stdout


#: An app with one deliberate type error: ``add`` takes an ``int``.
TYPED_APP = """\
from typing import Any

from aotui.sandbox import App, View, operation


class Counter(View["CounterApp"]):
    template = '<section view="Counter"><p>{{ app.count }}</p>{{ view.buttons() }}</section>'

    @operation
    def add(self, by: int) -> None:
        self.app.count += by


class CounterApp(App):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self.root = Counter("root")

    def roots(self) -> list[View[Any]]:
        return [self.root]


app = CounterApp()
app.root.add("two")
"""


def test_an_app_type_checks_against_the_installed_wheel(
    wheel: Path, installed: Path, tmp_path: Path
) -> None:
    # PEP 561: without the marker mypy skips the installed package ("missing library stubs or
    # py.typed marker"), every SDK name is Any and the app's error goes unseen.
    assert "aotui/py.typed" in zipfile.ZipFile(wheel).namelist()
    (tmp_path / "counter.py").write_text(TYPED_APP)
    mypy = Path(sys.executable).parent / "mypy"
    check = subprocess.run(
        [mypy, "--strict", "--no-incremental", "--python-executable", installed / "python",
         "--config-file", os.devnull, "counter.py"],
        capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path,
        env={**os.environ, "MYPYPATH": ""},
    )  # fmt: skip
    assert "py.typed" not in check.stdout, check.stdout
    errors = [line for line in check.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 1, check.stdout
    line = TYPED_APP.splitlines().index('app.root.add("two")') + 1
    assert errors[0].startswith(f'counter.py:{line}: error: Argument 1 to "add" of "Counter"')
    assert errors[0].endswith("[arg-type]"), errors[0]
