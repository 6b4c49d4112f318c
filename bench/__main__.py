"""Run every benchmark and print a summary of the figures."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent))
MODULES = [
    "bench_parse",
    "bench_codec",
    "bench_render",
    "bench_desktop",
    "bench_sandbox",
    "bench_store",
    "bench_fleet",
    "bench_fleet_priority",
    "bench_hostile",
    "bench_scale",
    "bench_tokens",
    "bench_web",
    "bench_browser",
    "bench_miniwob",
]


def main() -> int:
    """Run each benchmark module's ``run()``."""
    figures: dict[str, float] = {}
    for name in MODULES:
        print(f"== {name}")
        module = importlib.import_module(f"bench.{name}")
        figures.update(module.run())
    print("== summary")
    for key, value in figures.items():
        print(f"{key:<40} {value:12.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
