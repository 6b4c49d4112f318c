"""Confinement applied in the worker before the app's first line runs.

The zygote's child calls :func:`confine` after closing every inherited descriptor and before
:func:`sandbox.worker.run_worker` imports the app. This module is the single place where the
kernel layers (Landlock, seccomp, namespaces, rlimits, uid drop) are applied; the layers beyond
process hygiene are tracked by the sandbox issue and are not active yet — ``aotui status`` says so.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Mapping
from typing import Any

__all__ = ["ACTIVE_LAYERS", "confine"]

#: The confinement layers this build applies, as shown by ``aotui status``.
ACTIVE_LAYERS: tuple[str, ...] = ("fd-close", "minimal-env", "no-core-dumps", "pdeathsig")

#: Environment variables a worker keeps; everything else is dropped.
KEPT_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "PYTHONHASHSEED")


def confine(policy: Mapping[str, Any]) -> tuple[str, ...]:
    """Apply the process-hygiene layers; returns the names of the layers now active."""
    kept = {name: os.environ[name] for name in KEPT_ENV if name in os.environ}
    os.environ.clear()
    os.environ.update(kept)
    os.environ.update({str(k): str(v) for k, v in dict(policy.get("env", {})).items()})
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return ACTIVE_LAYERS
