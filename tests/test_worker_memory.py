"""A worker's memory of its own (USS): the pages it writes of those it shares with the zygote.

Measured with 10 workers of the 100-item list app (tests/apps/lister) as root: 7.15 MB each
once open; 6.23 MB when a worker no longer walks every module object to find the import
locations the zygote already listed, nor frees the zygote's import finders. The children below
are really confined (tests/confined.py).
"""

from __future__ import annotations

import os
import sys
import weakref
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from aotui.sandbox import handles
from aotui.sandbox.policy import default_runtime_read
from tests.confined import APP, APP_UID, run_confined

pytestmark = pytest.mark.timeout(60)

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="unprivileged, there is no uid drop")


class _WatchedModule(ModuleType):
    """A module that counts how often its ``__path__`` is looked up."""

    lookups = 0

    def __getattribute__(self, name: str) -> Any:
        if name == "__path__":
            type(self).lookups += 1
        return super().__getattribute__(name)


def _lowest_free_fd() -> int:
    fd = os.open("/dev/null", os.O_RDONLY)
    os.close(fd)
    return fd


def _as_the_zygote(then: Callable[[], object] = lambda: None) -> Callable[[], None]:
    """What the zygote does before forking (names its modules), then ``then()``; in the child."""

    def before() -> None:
        sys.modules["aotui_watched_module"] = _WatchedModule("aotui_watched_module")
        handles.preroute(default_runtime_read(), first_fd=_lowest_free_fd())
        _WatchedModule.lookups = 0
        then()

    return before


def _policy(tmp_path: Path) -> dict[str, object]:
    app = tmp_path / "app"
    app.mkdir()
    tmp_path.chmod(0o755)
    return {"app": APP, "app_dir": str(app), "uid": APP_UID}


@ROOT_ONLY
def test_a_worker_walks_no_module_to_find_the_import_locations(tmp_path: Path) -> None:
    # Each module object a worker touches copies the page it lies on: 1.4 MB for ~250 modules.
    outcome = run_confined(
        "root", _policy(tmp_path), lambda: _WatchedModule.lookups, before=_as_the_zygote()
    )
    assert "uid-drop" in outcome.layers, outcome
    assert outcome.value == 0, "confine() looked up every module's __path__ again"


finders: list[weakref.ref[Any]] = []


def _watch_finders() -> None:
    for finder in sys.path_importer_cache.values():
        if finder is not None:
            finders.append(weakref.ref(finder))


@ROOT_ONLY
def test_a_worker_does_not_free_the_finders_it_drops(tmp_path: Path) -> None:
    # Freeing them and their directory listings copies ~150 pages the zygote shares (0.6 MB).
    if handles._others_reach(os.path.dirname(os.__file__)):
        pytest.skip("the per-app uid reaches the standard library by name: nothing is dropped")

    def freed() -> list[int]:
        return [len(finders), sum(ref() is None for ref in finders), len(sys.path_importer_cache)]

    outcome = run_confined("root", _policy(tmp_path), freed, before=_as_the_zygote(_watch_finders))
    assert outcome.value is not None, outcome
    watched, dead, cached = outcome.value
    assert watched > 0
    assert dead == 0, f"{dead} of the zygote's {watched} import finders were freed"
    assert cached < watched  # they were dropped from the cache all the same
