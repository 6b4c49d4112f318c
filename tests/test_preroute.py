"""The zygote names its modules once the way every worker reaches them (sandbox/handles.py).

A root worker drops to a per-app uid that may not reach the interpreter's trees by name (pyenv
under a 0700 /root); it reaches them as ``/proc/self/fd/N``. Renaming ~250 modules in each worker
copied ~1,000 pages the zygote shares (4 MB of its own memory, 10-25 ms of its start); now the
zygote predicts the names (:func:`handles.preroute`) and a worker whose handles match them
reroutes only its search paths. The children are really confined (tests/confined.py).
"""

from __future__ import annotations

import importlib
import importlib.resources
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from aotui.sandbox import handles
from aotui.sandbox.policy import default_runtime_read
from tests.confined import APP, APP_UID, close_inherited_descriptors, run_confined

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(os.geteuid() != 0, reason="unprivileged, there is no uid drop"),
]

#: How many times the child renamed its modules after the fork (0: the zygote's names held).
renamed: list[int] = []


def _lowest_free_fd() -> int:
    fd = os.open("/dev/null", os.O_RDONLY)
    os.close(fd)
    return fd


def _preroute(shift: int = 0) -> None:
    """As the zygote does, for a child whose handles will start at the lowest free descriptor."""
    close_inherited_descriptors()
    handles.preroute(default_runtime_read(), first_fd=_lowest_free_fd() + shift)
    rename = handles._rename_modules

    def counted(file_name: Any) -> None:
        renamed.append(1)
        rename(file_name)

    handles._rename_modules = counted  # type: ignore[assignment]  # counted in the child only


def _imports_still_work() -> dict[str, object]:
    for loaded in [m for m in sys.modules if m == "sqlite3" or m.startswith("sqlite3.")]:
        del sys.modules[loaded]  # imported afresh, as the app's uid, through the search paths
    sqlite3 = importlib.import_module("sqlite3")
    return {
        "renamed": len(renamed),
        "json_file": json.__file__,
        "json_readable": "JSONDecoder" in Path(json.__file__ or "").read_text(),
        "resources": "JSONDecoder"
        in importlib.resources.files("json").joinpath("__init__.py").read_text(),
        "sqlite": sqlite3.connect(":memory:").execute("select 6 * 7").fetchone()[0],
        "traceback_names": handles.real_names(json.__file__ or ""),
    }


def _stdlib_closed() -> bool:
    return bool(handles._prerouted) or not handles._others_reach(os.path.dirname(json.__file__))


def _policy(tmp_path: Path) -> dict[str, object]:
    app = tmp_path / "app"
    app.mkdir()
    tmp_path.chmod(0o755)
    return {"app": APP, "app_dir": str(app), "uid": APP_UID}


def test_a_worker_keeps_the_zygotes_names_and_reroutes_only_its_search_paths(
    tmp_path: Path,
) -> None:
    if not _stdlib_closed():
        pytest.skip("the per-app uid reaches the standard library by name: nothing to reroute")
    outcome = run_confined("root", _policy(tmp_path), _imports_still_work, before=_preroute)
    assert outcome.value is not None, outcome
    assert outcome.value.pop("renamed") == 0  # the prediction held: no module renamed
    assert outcome.value.pop("json_file").startswith("/proc/self/fd/")
    assert outcome.value.pop("traceback_names") == json.__file__  # logs name the real file
    assert outcome.value == {"json_readable": True, "resources": True, "sqlite": 42}


def test_a_missed_prediction_renames_every_module_as_before(tmp_path: Path) -> None:
    if not _stdlib_closed():
        pytest.skip("the per-app uid reaches the standard library by name: nothing to reroute")
    outcome = run_confined(
        "root", _policy(tmp_path), _imports_still_work, before=lambda: _preroute(shift=3)
    )
    assert outcome.value is not None, outcome
    assert outcome.value.pop("renamed") == 1
    assert outcome.value.pop("json_file").startswith("/proc/self/fd/")
    assert outcome.value.pop("traceback_names") == json.__file__
    assert outcome.value == {"json_readable": True, "resources": True, "sqlite": 42}


def test_a_worker_that_keeps_root_takes_the_zygotes_names_back(tmp_path: Path) -> None:
    policy = _policy(tmp_path)
    del policy["uid"]  # no uid drop: every tree is reached by its real name
    outcome = run_confined("root", policy, _imports_still_work, before=_preroute)
    assert outcome.value is not None, outcome
    assert outcome.value.pop("json_file") == json.__file__
    assert outcome.value.pop("renamed") == (1 if _stdlib_closed() else 0)
    assert outcome.value.pop("traceback_names") == json.__file__
    assert outcome.value == {"json_readable": True, "resources": True, "sqlite": 42}
