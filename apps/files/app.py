"""Files: a read-only browser over the directory the manifest grants with ``fs:read``.

The root view "Browser" lists the current directory (directories first, at most
:data:`MAX_ENTRIES`) with ``open_entry``, ``go_up`` and ``go_to``. Opening a file fills the "File"
child view with its first :data:`PREVIEW_BYTES`. Every path is resolved (symlinks and ``..``
included) and must stay under the root: anything else raises :class:`PermissionError`, which the
runtime answers with ``E_PERMISSION``, as it does when the OS itself refuses a read.

Where the agent is is the app's stored data (``App.stored``): ``path``, the current directory,
and ``open_file``, both relative to the root; a restart reads the open file again.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from aotui.sandbox.sdk import App, Ref, View, operation

#: The manifest this app reads its ``fs:read`` grant from.
MANIFEST = Path(__file__).with_name("aoapp.json")
#: Where browsing starts when the grant covers it; otherwise the grant itself is the root.
PREFERRED_ROOT = Path("/usr/share/doc")
#: Most entries listed for one directory.
MAX_ENTRIES = 200
#: How much of a file the File view shows.
PREVIEW_BYTES = 4096


def granted_root(manifest: Path = MANIFEST) -> Path:
    """The root to browse: :data:`PREFERRED_ROOT` if a grant covers it, else the first grant."""
    permissions = json.loads(manifest.read_text(encoding="utf-8")).get("permissions", [])
    grants = [Path(p.split(":", 2)[2]) for p in permissions if p.startswith("fs:read:/")]
    if not grants:
        raise RuntimeError(f"{manifest} grants no fs:read:<directory>; there is nothing to browse")
    if PREFERRED_ROOT.is_dir() and any(PREFERRED_ROOT.is_relative_to(g) for g in grants):
        return PREFERRED_ROOT
    return grants[0]


def _size(size: int) -> str:
    if size < 1024:
        return f"{size} byte{'s' if size != 1 else ''}"
    units = ("KB", "MB", "GB", "TB")
    value, unit = size / 1024, 0
    while value >= 1024 and unit < len(units) - 1:
        value, unit = value / 1024, unit + 1
    return f"{value:.1f} {units[unit]}"


@contextmanager
def _reading(path: Path) -> Iterator[None]:
    """Turn the OS's errors about ``path`` into ones that say what to do."""
    try:
        yield
    except PermissionError as exc:
        raise PermissionError(f"the system refuses to let this app read {path}") from exc
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"{path} does not exist (any more)") from exc
    except NotADirectoryError as exc:
        raise NotADirectoryError(f"{path} is not a directory") from exc
    except OSError as exc:
        raise OSError(f"cannot read {path}: {exc.strerror or exc}") from exc


@dataclass(frozen=True)
class Entry:
    """One directory entry as the Browser lists it."""

    name: str
    #: Path relative to the root, the entry's stable key.
    key: str
    is_dir: bool
    size: int | None


@dataclass(frozen=True)
class Preview:
    """The head of the open file: its text, or why there is none."""

    path: Path
    size: int = 0
    text: str | None = None
    binary: bool = False
    error: str = ""


class BrowserView(View["FilesApp"]):
    """The root: the current directory's entries and the navigation operations."""

    template = """
<section view="Browser" description="Read-only files under {{ app.root }}">
  <h2>Browser</h2>
  <ul><li>Root: {{ app.root }}</li><li>Current Directory: {{ app.cwd }}</li></ul>
{% if app.preview is not none %}
  <h3>Open File</h3>
  {{- view.link("file", app.preview.path.name, "Mount it to read the first 4 KB") }}
{% endif %}
{% if entries %}
  <ol list="entry[]:entries" title="Entries">
  {%- for entry, value, label in entries -%}
    <li {{ view.item(entry.key, value) }}>{{ label }}</li>
  {%- endfor -%}
  </ol>
{% else %}
  <p>{{ problem or "This directory is empty." }}</p>
{% endif %}
{% if hidden %}
  <p>{{ hidden }} more entries not shown (directories first, then files, by name; only
     {{ limit }} are listed). Reach them with go_to.</p>
{% endif %}
  {{ view.buttons() }}
</section>"""

    def context(self) -> Mapping[str, Any]:
        problem = ""
        try:
            entries, total = self.app.listing()
        except OSError as exc:
            problem = f"This directory cannot be read: {exc}"
            entries, total = [], 0
        return {
            "entries": [(entry, *_shown(entry)) for entry in entries],
            "problem": problem,
            "hidden": total - len(entries),
            "limit": MAX_ENTRIES,
        }

    @operation
    def open_entry(self, entry: Ref[Literal["entry"]]) -> dict[str, str]:
        """Enter a directory, or show a file in the File view."""
        files = self.app
        return files.go(files.inside(files.root / entry.key, entry.key))

    @operation
    def go_up(self) -> dict[str, str]:
        """Go to the parent directory."""
        files = self.app
        if files.cwd == files.root:
            raise ValueError(f"already at the root, {files.root}; this app reads nothing above it")
        return files.go(files.cwd.parent)

    @operation
    def go_to(self, path: str) -> dict[str, str]:
        """Go to a directory or open a file: an absolute path, or one relative
        to the current directory.
        """
        files = self.app
        raw = path.strip()
        if not raw:
            raise ValueError(
                "path is empty: give an absolute path or one relative to the current directory"
            )
        return files.go(files.inside(files.cwd / raw, raw))


def _shown(entry: Entry) -> tuple[dict[str, Any], str]:
    """An entry's ``data-value`` and its label."""
    value: dict[str, Any] = {
        "name": entry.name,
        "path": entry.key,
        "kind": "dir" if entry.is_dir else "file",
    }
    if entry.is_dir:
        return value, f"{entry.name}/ (dir)"
    value["size"] = entry.size
    size = "size unknown" if entry.size is None else _size(entry.size)
    return value, f"{entry.name} (file, {size})"


class FileView(View["FilesApp"]):
    """The open file: the first :data:`PREVIEW_BYTES` as a code block, or why it is not shown."""

    template = """
{% set preview = app.preview %}
{% if preview is none %}
<article view="File" description="The open file">
  <h2>No File Open</h2>
  <p>Open a file from the Browser with open_entry.</p>
</article>
{% else %}
<article view="File" description="The first 4 KB of the open file">
  <h2>{{ preview.path.name }}</h2>
  <ul><li>Path: {{ preview.path }}</li>
  {%- if not preview.error %}<li>Size: {{ size(preview.size) }}</li>{% endif %}</ul>
{% if preview.error %}
  <p>This file cannot be read: {{ preview.error }}</p>
{% elif preview.binary %}
  <p>This is a binary file; its content is not shown.</p>
{% elif not preview.text %}
  <p>This file is empty.</p>
{% else %}
  {% if preview.size > limit %}<p>The first 4 KB of {{ size(preview.size) }}:</p>{% endif %}
  <pre><code>{{ preview.text }}</code></pre>
{% endif %}
</article>
{% endif %}"""

    def context(self) -> Mapping[str, Any]:
        return {"size": _size, "limit": PREVIEW_BYTES}


class FilesApp(App):
    """The browser's state: the root, the current directory and the open file's preview."""

    def __init__(self, root: str | Path | None = None) -> None:
        super().__init__()
        self.root = Path(os.path.realpath(root if root is not None else granted_root()))
        self.cwd = self.root
        self.preview: Preview | None = None
        self.browser = BrowserView("browser")
        self.file_view = FileView("file")

    def on_start(self) -> None:
        # What was there before a restart may be gone: fall back to the root, show the error.
        path = str(self.stored.get("path", "."))
        try:
            cwd = self.inside(self.root / path, path)
            if cwd.is_dir():
                self.cwd = cwd
        except OSError:
            self.cwd = self.root
        opened = self.stored.get("open_file")
        if opened:
            file = self.root / str(opened)
            try:
                self.preview = self.read_head(self.inside(file, str(opened)))
            except (OSError, ValueError) as exc:
                self.preview = Preview(file, error=str(exc))

    def roots(self) -> list[View[Any]]:
        return [self.browser]

    def resolve_view(self, key: str) -> View[Any] | None:
        return self.file_view if key == "file" else None

    def inside(self, path: Path, shown: str) -> Path:
        """``path`` resolved; :class:`PermissionError` unless it lies under the root."""
        resolved = Path(os.path.realpath(path))
        if not resolved.is_relative_to(self.root):
            raise PermissionError(
                f"{shown} resolves to {resolved}, outside {self.root}; this app may only read "
                f"under {self.root}"
            )
        return resolved

    def go(self, path: Path) -> dict[str, str]:
        """Enter ``path`` if it is a directory, else open it (and enter its directory)."""
        with _reading(path):
            is_dir = stat.S_ISDIR(os.stat(path).st_mode)
        if is_dir:
            with _reading(path), os.scandir(path):
                pass  # a directory we cannot list must fail here, not in the next render
            self.cwd = path
            self.stored["path"] = path.relative_to(self.root).as_posix()
            return {"directory": str(path)}
        self.preview = self.read_head(path)
        self.cwd = path.parent
        self.stored["path"] = self.cwd.relative_to(self.root).as_posix()
        self.stored["open_file"] = path.relative_to(self.root).as_posix()
        return {"file": str(path)}

    def read_head(self, path: Path) -> Preview:
        """Read the first :data:`PREVIEW_BYTES` of a regular file."""
        with _reading(path):
            # O_NONBLOCK: opening a FIFO must not hang the app; it is refused below instead.
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            try:
                info = os.fstat(fd)
                if not stat.S_ISREG(info.st_mode):
                    raise ValueError(f"{path} is not a regular file or directory")
                head = os.read(fd, PREVIEW_BYTES)
            finally:
                os.close(fd)
        text = _decode(head)
        return Preview(path, info.st_size, text, binary=text is None)

    def listing(self) -> tuple[list[Entry], int]:
        """The current directory's first :data:`MAX_ENTRIES` entries and how many there are."""
        found: list[tuple[bool, str, os.DirEntry[str]]] = []
        with _reading(self.cwd), os.scandir(self.cwd) as scan:
            for item in scan:
                try:
                    is_dir = item.is_dir()
                except OSError:
                    is_dir = False
                found.append((not is_dir, item.name.casefold(), item))
        found.sort(key=lambda entry: (entry[0], entry[1]))
        entries = []
        for is_file, _, item in found[:MAX_ENTRIES]:
            size: int | None = None
            if is_file:
                try:
                    size = item.stat().st_size
                except OSError:
                    size = None
            key = (self.cwd / item.name).relative_to(self.root).as_posix()
            entries.append(Entry(item.name, key, not is_file, size))
        return entries, len(found)


def _decode(head: bytes) -> str | None:
    """``head`` as text, or ``None`` when it looks binary (NUL bytes, not UTF-8)."""
    if b"\0" in head:
        return None
    try:
        return head.decode("utf-8")
    except UnicodeDecodeError as exc:
        # The cut at PREVIEW_BYTES may split one multi-byte character; that is still text.
        if len(head) == PREVIEW_BYTES and exc.start >= len(head) - 3:
            try:
                return head[: exc.start].decode("utf-8")
            except UnicodeDecodeError:
                return None
        return None


app = FilesApp()
