"""The desktop is observed through supervisor/instrument.py, never by swapping its methods: no
module of the supervisor's core imports chaos, and the nemesis overrides exactly the hooks."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from aotui.supervisor.chaos.nemesis import Nemesis
from aotui.supervisor.instrument import Instrument

pytestmark = pytest.mark.timeout(30)

ROOT = Path(__file__).resolve().parents[1] / "supervisor"


@pytest.mark.parametrize("room", ["server", "desktop", "workers", "store", "broker"])
def test_the_core_never_imports_chaos(room: str) -> None:
    for path in sorted((ROOT / room).glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            assert not any(".chaos" in name for name in names), f"{path.name} imports {names}"


def test_the_nemesis_is_an_instrument_and_overrides_its_hooks() -> None:
    hooks = {name for name, member in vars(Instrument).items() if inspect.isfunction(member)}
    assert issubclass(Nemesis, Instrument)
    assert hooks <= set(vars(Nemesis)), hooks - set(vars(Nemesis))
    source = inspect.getsource(Nemesis)
    assert "method-assign" not in source  # nothing of the desktop is swapped
