"""The suite's own guarantees: a test that leaves a process running fails, and it is killed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parent.parent

LEAKY = '''
import subprocess, sys

def test_detaches_a_sleeper(tmp_path):
    code = "import os, time; open(%r, 'w').write(str(os.getpid())); time.sleep(60)"
    subprocess.Popen([sys.executable, "-c", code % str(tmp_path.parent / "pid")],
                     start_new_session=True)
    import time
    deadline = time.monotonic() + 10
    while not (tmp_path.parent / "pid").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
'''


def test_a_process_left_running_fails_the_test_and_is_killed(tmp_path: Path) -> None:
    (tmp_path / "test_leaky.py").write_text(textwrap.dedent(LEAKY))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-q", "-p", "no:cacheprovider",
         "--basetemp", str(tmp_path / "base"), "--rootdir", str(tmp_path), "-c", "/dev/null",
         str(tmp_path / "test_leaky.py")],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    assert "left processes running" in result.stdout
    pid = int(next((tmp_path / "base").glob("**/pid")).read_text())
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_nothing_tracked_is_ignored() -> None:
    # A virtualenv (5,360 files linking into the builders' /root/.pyenv) was once committed in
    # spite of .gitignore; caches and build output would break other machines the same way.
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    tracked = subprocess.run(
        ["git", "ls-files", "--cached", "--ignored", "--exclude-standard"],
        cwd=ROOT, capture_output=True, text=True, timeout=30, check=True,
    ).stdout.split()  # fmt: skip
    assert tracked == [], f"tracked files that .gitignore excludes: {tracked[:10]}"
