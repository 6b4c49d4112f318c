"""Where a worker's own memory (USS) lies: per mapping, and copied from the zygote or new.

Starts a desktop of ``N`` copies of the 100-item list app (as ``bench_scale.bench_200_apps``
does), opens them all, and prints the USS median of the first ten workers once open and after
three operations each; then, for one worker, the private kilobytes of each mapping (heap, the
interpreter's arenas among the anonymous ones, libpython's data, thread stacks, ...), split into
pages copied on write from the zygote (it still maps the page at that address) and pages of the
worker's own. The split reads ``/proc/PID/pagemap`` and ``/proc/kpagecount``: run it as root.

Run: ``.venv/bin/python -m bench.worker_memory [N]`` (default 10 apps).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import statistics
import struct
import sys
import tempfile
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aotui.supervisor.interface.client import Client  # noqa: E402
from bench.bench_desktop import TEST_APPS, Desktop, _copies  # noqa: E402

PAGE = 4096
_PRESENT, _PFN = 1 << 63, (1 << 55) - 1


def _writable_mappings(pid: int) -> list[tuple[int, int, str]]:
    """``(start, end, name)`` of each writable mapping of ``pid``."""
    found = []
    with open(f"/proc/{pid}/maps") as maps:
        for line in maps:
            parts = line.split()
            if "w" in parts[1]:
                start, end = (int(x, 16) for x in parts[0].split("-"))
                found.append((start, end, os.path.basename(parts[5]) if len(parts) > 5 else ""))
    return found


def _frames(pid: int, start: int, end: int) -> tuple[int, ...]:
    """The pagemap entry of each page in ``[start, end)``."""
    with open(f"/proc/{pid}/pagemap", "rb") as pagemap:
        pagemap.seek(start // PAGE * 8)
        data = pagemap.read((end - start) // PAGE * 8)
    return struct.unpack(f"{len(data) // 8}Q", data)


def private_pages(pid: int, zygote: int) -> dict[str, list[int]]:
    """Per mapping name, ``[copied, own]``: the worker's pages mapped by it alone."""
    split: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    with open("/proc/kpagecount", "rb") as counts:
        for start, end, name in _writable_mappings(pid):
            mine = _frames(pid, start, end)
            try:
                theirs = _frames(zygote, start, end)
            except OSError:
                theirs = ()
            for i, entry in enumerate(mine):
                if not entry & _PRESENT:
                    continue
                counts.seek((entry & _PFN) * 8)
                if struct.unpack("Q", counts.read(8))[0] > 1:
                    continue  # still shared
                copied = i < len(theirs) and bool(theirs[i] & _PRESENT)
                split[name or "[anon]"][0 if copied else 1] += 1
    return split


def _uss_mb(pids: list[int]) -> tuple[float, list[float]]:
    values = [psutil.Process(pid).memory_full_info().uss / 2**20 for pid in pids]
    return statistics.median(values), values


def _rotate_each(client: Client, apps: int) -> None:
    snapshot = client.snapshot()
    for i in range(apps):
        block = snapshot[snapshot.index(f'<application id="app_{i}"') :]
        view = re.search(r'<view id="(view_\d+)" name="Items">', block)
        assert view is not None
        command = f'<context app_id="app_{i}" view_id="{view.group(1)}">execute rotate</context>'
        for _ in range(3):
            client.execute(command)


def main(apps: int = 10) -> None:
    """Print the figures described in the module docstring."""
    with tempfile.TemporaryDirectory() as tmp:
        desktop = Desktop(_copies(TEST_APPS / "lister", apps, Path(tmp)))
        try:
            client = desktop.client
            opens = ";".join(f"open --application app_{i}" for i in range(apps))
            client.execute(f"<context>{opens}</context>")
            client.snapshot()
            pids = [row["pid"] for row in client.status()["apps"] if row["pid"]][:10]
            median, values = _uss_mb(pids)
            print(f"once open: USS median {median:.2f} MB of {[round(v, 2) for v in values]}")
            worker = pids[len(pids) // 2]
            zygote = psutil.Process(worker).ppid()
            split = private_pages(worker, zygote)
            _rotate_each(client, min(apps, 10))
            median, values = _uss_mb(pids)
            print(f"after 3 operations each: USS median {median:.2f} MB")
        finally:
            desktop.close()
    print(f"worker {worker} once open, private kB per mapping (copied from the zygote / own):")
    for name, (copied, own) in sorted(split.items(), key=lambda kv: -sum(kv[1])):
        print(f"  {copied * 4:6d} {own * 4:6d}  {name}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description="Where a worker's USS lies, per mapping (run as root).",
    )
    parser.add_argument("apps", nargs="?", type=int, default=10, help="list apps (default 10)")
    main(parser.parse_args().apps)
