"""The two stores under test: SQLite files, and a private PostgreSQL server the test run starts.

:func:`private_postgres` runs Debian's PostgreSQL server binaries (``apt-get install
postgresql``; CI installs them) on a cluster made for the run by ``initdb`` in a fresh temporary
directory, listening on a Unix socket there only (no TCP port). As root the cluster belongs to the
``postgres`` user the package creates (``initdb`` refuses root); otherwise to the user running the
tests. It is stopped, and its directory removed, when the run ends, failed tests included; the
server is the run's own child and is killed with it if the run is killed before its teardown.
:class:`StoreBackend` opens either store for a test (a fresh database each, on the shared server).
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import os
import pwd
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from aotui.supervisor.store.base import Store, open_store

#: Where Debian puts each major version's server binaries.
DEBIAN_PG = Path("/usr/lib/postgresql")
#: The environment variable the test fixtures tag processes with (tests/conftest.py): the server
#: outlives one test, so it must not carry that test's tag.
_TEST_TAG = "AOTUI_TEST_TAG"


def postgres_bindir() -> Path | None:
    """The newest installed server's ``bin`` directory (with ``initdb`` and ``postgres``)."""
    found = sorted(
        (path for path in DEBIAN_PG.glob("*/bin") if (path / "initdb").exists()),
        key=lambda path: int(path.parent.name) if path.parent.name.isdigit() else 0,
    )
    return found[-1] if found else None


@dataclass
class PrivatePostgres:
    """A running private server: its socket directory and how to reach a database."""

    bindir: Path
    socket_dir: Path
    user: str = "aotui"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{self.user}@/{database}?host={self.socket_dir}"

    def create_database(self, name: str) -> str:
        """A new, empty database; its URL."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def connect(self, url: str) -> Any:
        import psycopg

        return psycopg.connect(url, autocommit=True)


@contextlib.contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    """Start a private server for the length of the block (skips when none is installed)."""
    bindir = postgres_bindir()
    if bindir is None:
        pytest.skip(
            f"PostgreSQL's server binaries are not installed (no {DEBIAN_PG}/*/bin/initdb): "
            "apt-get install postgresql"
        )
    owner: pwd.struct_passwd | None = None
    if os.geteuid() == 0:
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and there is no 'postgres' user to run the server as")
    # Short: the socket's path (.s.PGSQL.5432 in it) must fit 107 bytes, whatever TMPDIR is.
    short = len(tempfile.gettempdir()) <= 60
    base = Path(tempfile.mkdtemp(prefix="aotui-pg-", dir=None if short else "/tmp"))
    env = {k: v for k, v in os.environ.items() if k != _TEST_TAG and not k.startswith("PG")}
    # Run from the server's own directory: the test's may be a 0700 one the server cannot enter.
    run: dict[str, Any] = {
        "env": env, "cwd": base, "check": True, "capture_output": True, "timeout": 60
    }  # fmt: skip
    if owner is not None:
        os.chown(base, owner.pw_uid, owner.pw_gid)
        run |= {"user": owner.pw_uid, "group": owner.pw_gid, "extra_groups": []}
        env["HOME"] = owner.pw_dir
    data = base / "data"
    server = PrivatePostgres(bindir, base)
    postmaster: subprocess.Popen[bytes] | None = None
    try:
        initdb = [f"{bindir}/initdb", "-D", str(data), "-U", server.user, "-A", "trust"]
        subprocess.run([*initdb, "-E", "UTF8", "--no-instructions", "--no-sync"], **run)
        # The postmaster is this process's own child, not pg_ctl's daemon: it is killed when
        # this process dies, however it dies (a runner killed by a signal runs no teardown), and
        # its backends follow it.
        options = ["-k", str(base), "-c", "listen_addresses=", "-c", "shared_buffers=16MB"]
        with open(base / "server.log", "wb") as log:
            postmaster = subprocess.Popen(
                [f"{bindir}/postgres", "-D", str(data), *options, "-c", "max_connections=60"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, preexec_fn=_die_with_parent,
                **{key: value for key, value in run.items() if key in _POPEN},
            )  # fmt: skip
        _wait_ready(postmaster, bindir, server, run)
        yield server
    except subprocess.CalledProcessError as exc:
        raise RuntimeError(f"{exc}: {exc.stderr!r} {exc.stdout!r} {_log_tail(base)}") from None
    finally:
        if postmaster is not None:
            postmaster.send_signal(signal.SIGQUIT)  # an immediate shutdown, as pg_ctl -m i
            try:
                postmaster.wait(timeout=20)
            except subprocess.TimeoutExpired:
                postmaster.kill()
                postmaster.wait()
        shutil.rmtree(base, ignore_errors=True)


_LIBC = ctypes.CDLL(None, use_errno=True)
_PR_SET_PDEATHSIG = 1
#: What :func:`private_postgres`'s ``subprocess.run`` settings :class:`subprocess.Popen` takes.
_POPEN = ("env", "cwd", "user", "group", "extra_groups")


def _die_with_parent() -> None:
    """In the server's process before it starts: SIGKILL it when its parent dies. Set after
    the switch to the ``postgres`` user (subprocess changes the uid first), which would clear it;
    nothing is imported here (that user may not read this Python's files)."""
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _wait_ready(
    postmaster: subprocess.Popen[bytes], bindir: Path, server: PrivatePostgres, run: dict[str, Any]
) -> None:
    """Until the server accepts connections (``pg_isready``), for up to 60 s."""
    ready = [f"{bindir}/pg_isready", "-q", "-h", str(server.socket_dir), "-U", server.user]
    deadline = time.monotonic() + 60
    while subprocess.run(ready, **{**run, "check": False}).returncode != 0:
        if postmaster.poll() is not None:
            raise RuntimeError(
                f"the private PostgreSQL server exited ({postmaster.returncode}) while "
                f"starting: {_log_tail(server.socket_dir)}"
            )
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"the private PostgreSQL server did not accept connections within 60 s: "
                f"{_log_tail(server.socket_dir)}"
            )
        time.sleep(0.05)


def _log_tail(base: Path) -> str:
    log = base / "server.log"
    return log.read_text(errors="replace")[-2000:] if log.exists() else ""


_databases = itertools.count()


@dataclass
class StoreBackend:
    """One kind of store for a test: ``sqlite`` (files in ``tmp_path``) or ``postgresql``."""

    kind: str
    tmp_path: Path
    server: PrivatePostgres | None = None

    def __post_init__(self) -> None:
        #: What a desktop config's ``store`` says for it.
        self.location = ""
        if self.server is not None:
            self.location = self.server.create_database(f"t{os.getpid()}_{next(_databases)}")

    def open(self, desktop: str = "d", synchronous: str = "FULL") -> Store:
        """The store of ``desktop`` (opened again by each call)."""
        return open_store(self.location, desktop, self.tmp_path / f"{desktop}.db", synchronous)

    def sql(self, statement: str, *params: Any, desktop: str = "d") -> list[tuple[Any, ...]]:
        """Run one statement (``?`` placeholders) on the store's own database, tables named as
        in SQLite (``apps``, ``app_parts``, ``meta``, ``commands``); ``{desktop}`` in it stands
        for "the rows of ``desktop``" (PostgreSQL keeps every desktop's rows in one table)."""
        if self.server is None:
            with contextlib.closing(sqlite3.connect(self.tmp_path / f"{desktop}.db")) as db:
                rows = db.execute(statement.replace("{desktop}", "1 = 1"), params).fetchall()
                db.commit()
                return rows
        for table in ("app_parts", "apps", "meta", "commands"):
            statement = statement.replace(f" {table} ", f" aotui.{table} ")
        mine = "desktop = '" + desktop.replace("'", "''") + "'"
        statement = statement.replace("{desktop}", mine).replace("?", "%s")
        with self.server.connect(self.location) as conn:
            cursor = conn.execute(statement, params)
            return list(cursor.fetchall()) if cursor.description else []
