"""Opens a SQLite database in its private TMPDIR, or in a granted directory (sqlite tests)."""

import os
import sqlite3
import tempfile

from aotui.sandbox.sdk import App, View, operation


def use_database(directory: str, journal: str) -> dict[str, object]:
    """Create, write and read back a database in ``directory`` with the ``journal`` mode."""
    path = os.path.join(directory, f"app-{journal.lower()}.db")
    try:
        with sqlite3.connect(path) as db:
            db.execute(f"PRAGMA journal_mode={journal}")
            db.execute("CREATE TABLE IF NOT EXISTS notes (text TEXT)")
            db.execute("INSERT INTO notes VALUES ('kept')")
        with sqlite3.connect(path) as db:
            (count,) = db.execute("SELECT count(*) FROM notes").fetchone()
        db.close()
    except sqlite3.Error as exc:
        return {"path": path, "error": f"{type(exc).__name__}: {exc}"}
    return {"path": path, "rows": count}


class SqliteView(View):
    def render(self) -> str:
        return """<section view="Sqlite"><p>SQLite</p>
<button operation="in_tmp" args='{"journal": "string"}'>In TMPDIR</button>
<button operation="in_dir" args='{"path": "string", "journal": "string"}'>In a directory</button>
</section>"""

    @operation
    def in_tmp(self, journal: str) -> dict[str, object]:
        return use_database(tempfile.gettempdir(), str(journal))

    @operation
    def in_dir(self, path: str, journal: str) -> dict[str, object]:
        return use_database(str(path), str(journal))


class SqliteApp(App):
    def roots(self) -> list[View]:
        return [SqliteView("sqlite")]


app = SqliteApp()
