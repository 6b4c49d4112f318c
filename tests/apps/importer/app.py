"""Imports modules the zygote does not pre-load and uses its private temp dir (sandbox tests)."""

import datetime
import importlib
import os
import tempfile
from pathlib import Path

from helper import GREETING

from aotui.sandbox.sdk import App, View, operation

#: Standard-library modules (several with C extensions) and installed packages.
MODULES = [
    "zoneinfo", "sqlite3", "subprocess", "asyncio", "email.mime.text", "xml.etree.ElementTree",
    "logging.handlers", "argparse", "tempfile", "unittest", "urllib.request", "json.tool",
    "_decimal", "_zoneinfo", "_sqlite3", "psutil", "lxml.objectify",
]  # fmt: skip

#: Read at import, through ``__file__`` and through the working directory.
BESIDE = Path(__file__).with_name("data.txt").read_text().strip()
with open("data.txt") as relative:
    RELATIVE = relative.read().strip()


class ImporterView(View):
    def render(self) -> str:
        found = self.app.found  # type: ignore[union-attr]
        return f"""<section view="Importer"><p>Imports: {found}</p><p>{GREETING}; {BESIDE}</p>
<button operation="imports">Import</button>
<button operation="temp">Use temp</button>
<button operation="peek" args='{{"path": "string"}}'>Peek</button></section>"""

    @operation
    def imports(self) -> dict[str, str]:
        failed = {}
        for name in MODULES:
            try:
                importlib.import_module(name)
            except Exception as exc:
                failed[name] = f"{type(exc).__name__}: {exc}"
        import sqlite3
        import zoneinfo

        with sqlite3.connect(":memory:") as db:
            db.execute("create table t (x)")
            db.execute("insert into t values (41)")
            (value,) = db.execute("select x + 1 from t").fetchone()
        offset = zoneinfo.ZoneInfo("Europe/Paris").utcoffset(datetime.datetime(2024, 1, 1))
        self.app.found = "ok" if not failed else f"{len(failed)} failed"  # type: ignore[union-attr]
        return {"failed": failed, "sqlite": value, "paris": str(offset), "relative": RELATIVE}

    @operation
    def temp(self) -> dict[str, object]:
        with tempfile.NamedTemporaryFile("w+") as handle:
            handle.write("scratch")
            handle.flush()
            handle.seek(0)
            text = handle.read()
        made = tempfile.mkdtemp()
        Path(made, "inner.txt").write_text("inner")
        return {
            "text": text,
            "gettempdir": tempfile.gettempdir(),
            "tmpdir": os.environ.get("TMPDIR", ""),
            "real": os.path.realpath(tempfile.gettempdir()),
            "made": os.path.realpath(made),
            "entries": sorted(os.listdir(tempfile.gettempdir())),
        }

    @operation
    def peek(self, path: str) -> str:
        try:
            return f"listed {sorted(os.listdir(path))}"
        except OSError as exc:
            return f"refused: {type(exc).__name__}"


class ImporterApp(App):
    def __init__(self) -> None:
        super().__init__()
        self.found = "not yet"

    def roots(self) -> list[View]:
        return [ImporterView("importer")]


app = ImporterApp()
