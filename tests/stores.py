"""The two stores under test: SQLite files, and a private PostgreSQL server the test run starts.

:func:`private_postgres` runs Debian's PostgreSQL server binaries (``apt-get install
postgresql``; CI installs them) on a cluster made for the run by ``initdb`` in a fresh temporary
directory, listening on a Unix socket there only (no TCP port). As root the cluster belongs to the
``postgres`` user the package creates (``initdb`` refuses root); otherwise to the user running the
tests. It is stopped, and its directory removed, when the run ends, failed tests included.
:class:`StoreBackend` opens either store for a test (a fresh database each, on the shared server).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pwd
import shutil
import signal
import sqlite3
import subprocess
import tempfile
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
    """The newest installed server's ``bin`` directory (with ``initdb`` and ``pg_ctl``)."""
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
    started = False
    try:
        initdb = [f"{bindir}/initdb", "-D", str(data), "-U", server.user, "-A", "trust"]
        subprocess.run([*initdb, "-E", "UTF8", "--no-instructions", "--no-sync"], **run)
        options = f"-k {base} -c listen_addresses='' -c shared_buffers=16MB -c max_connections=60"
        pg_ctl = [f"{bindir}/pg_ctl", "-D", str(data), "-l", str(base / "server.log")]
        subprocess.run([*pg_ctl, "-w", "-t", "60", "-o", options, "start"], **run)
        started = True
        yield server
    except subprocess.CalledProcessError as exc:
        log = base / "server.log"
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        raise RuntimeError(f"{exc}: {exc.stderr!r} {exc.stdout!r} {tail}") from None
    finally:
        if started:
            with contextlib.suppress(subprocess.SubprocessError):
                subprocess.run(
                    [*pg_ctl, "-m", "immediate", "-w", "stop"], **{**run, "check": False}
                )
            _kill_leftover(data)
        shutil.rmtree(base, ignore_errors=True)


def _kill_leftover(data: Path) -> None:
    """SIGKILL the postmaster if ``pg_ctl stop`` left it running (its children follow it)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        pid = int((data / "postmaster.pid").read_text().split()[0])
        os.kill(pid, signal.SIGKILL)


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
