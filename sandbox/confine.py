"""Confinement applied in the worker before the app's first line runs.

The zygote's child calls :func:`confine` single-threaded, with only descriptors 0–3 open (3 is
the channel) and before any ZeroMQ context exists. Each step is a layer; the order is forced by
what each one takes away from the next:

1. **minimal environment**, working directory the app's, no bytecode writes, no core dumps;
2. **cgroup** (root): needs root and ``/sys/fs/cgroup``, so before the uid drop and Landlock;
3. **namespaces, the filesystem view and identity**: root unshares an empty network and an IPC
   namespace (needs ``CAP_SYS_ADMIN``); an unprivileged user enters a user namespace owning new
   mount, network and IPC namespaces and writes its id maps (``/proc/self``, before the view
   hides it). Then the worker's own root is built in a mount namespace of its own
   (:mod:`sandbox.fsview`: only the granted trees, each at its own path) and root drops to the
   per-app uid, the unprivileged worker its capabilities. A credential change clears
   ``PR_SET_PDEATHSIG``, so it is re-armed; ``TMPDIR`` names the app's private temp directory;
4. **rlimits** after the identity change: ``RLIMIT_NPROC`` then counts only this worker's tasks
   (its own uid, or its own user namespace, whose counts are separate since Linux 5.14);
5. **no_new_privs**, which Landlock and seccomp require when unprivileged;
6. **Landlock**: filesystem grants, TCP denied, signals and abstract sockets scoped;
7. **seccomp** last: it forbids ``unshare`` and ``mount`` that earlier steps use, while the
   Landlock calls before it need nothing it denies.

Every layer is attempted; :func:`confine` returns the names of those in force. In strict mode a
layer :func:`required_layers` names that could not be applied raises :class:`ConfinementError`,
so the worker reports it and never runs the app. ``fd-close`` and ``pdeathsig`` are verified, not
applied: the zygote's child does them before.
"""

from __future__ import annotations

import fcntl
import os
import resource
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aotui.sandbox import cgroups, fsview, landlock, namespaces, rlimits, seccomp
from aotui.sandbox.layer_names import required_layers
from aotui.sandbox.linux import set_no_new_privs
from aotui.sandbox.policy import Policy, default_runtime_read

__all__ = [
    "KEPT_ENV",
    "ConfinementError",
    "LayerReport",
    "apply_layers",
    "confine",
    "default_runtime_read",
    "required_layers",
]

#: Environment variables a worker keeps; everything else is dropped.
KEPT_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "PYTHONHASHSEED")


class ConfinementError(RuntimeError):
    """Strict mode: a required layer could not be applied; ``missing`` maps each to why."""

    def __init__(self, missing: Mapping[str, str]) -> None:
        self.missing = dict(missing)
        detail = "; ".join(f"{layer} ({reason})" for layer, reason in sorted(self.missing.items()))
        super().__init__(f"strict mode refuses to run the app: missing layers: {detail}")


@dataclass
class LayerReport:
    """The layers in force, why the others failed, and what each step cost (seconds)."""

    active: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    def step(self, name: str, layers: tuple[str, ...], action: Callable[[], object]) -> bool:
        """Run ``action``; on ``OSError`` record every one of ``layers`` as failed."""
        start = time.perf_counter()
        try:
            action()
        except OSError as exc:
            self.failed.update({layer: f"{name}: {exc}" for layer in layers})
            return False
        finally:
            self.timings[name] = time.perf_counter() - start
        self.active += layers
        return True

    def verify(self, layer: str, holds: bool, reason: str) -> None:
        """Record a layer that is checked rather than applied."""
        if holds:
            self.active.append(layer)
        else:
            self.failed[layer] = reason


def _minimal_environment(policy: Policy) -> None:
    kept = {name: os.environ[name] for name in KEPT_ENV if name in os.environ}
    os.environ.clear()
    os.environ.update(kept)
    os.environ.update(policy.env)
    os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
    # The app's directory is read-only: writing __pycache__ would only fail.
    sys.dont_write_bytecode = True
    # Relative paths resolve in the app's directory, not wherever the supervisor was started.
    try:
        os.chdir(policy.app_dir or "/")
    except OSError:
        os.chdir("/")


def _open_descriptors_above_3() -> list[int] | None:
    """The descriptors above 3 still open, or ``None`` when ``/proc`` cannot tell."""
    found = []
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return None
    for name in names:
        fd = int(name)
        try:  # listdir's own descriptor is listed but already closed again
            fcntl.fcntl(fd, fcntl.F_GETFD)
        except OSError:
            continue
        if fd > 3:
            found.append(fd)
    return sorted(found)


def _identity(policy: Policy, report: LayerReport) -> None:
    """Namespaces, the filesystem view, then the per-app uid (root) or no capabilities."""
    if os.geteuid() != 0:

        def enter() -> None:
            with namespaces.keep_parent_death_signal():
                namespaces.enter_user_namespace()

        try:
            if report.step("namespaces", ("userns", "netns", "ipcns"), enter):
                _view(policy, report, unshare=False)
        finally:
            # The user namespace gave every capability over its own namespaces: the view
            # needed them, nothing after it does.
            report.step("capabilities", (), namespaces.drop_capabilities)
        return
    isolated = report.step("namespaces", ("netns", "ipcns"), namespaces.isolate_network)
    _view(policy, report, unshare=not isolated)
    uid, gid = policy.uid, policy.gid
    if uid is None or gid is None:
        report.failed["uid-drop"] = "the policy names no per-app uid"
        # Still root: at least without capabilities.
        report.step("capabilities", ("no-caps",), namespaces.drop_capabilities)
        return

    def drop() -> None:
        with namespaces.keep_parent_death_signal():
            namespaces.drop_to_uid(uid, gid)

    report.step("uid-drop", ("uid-drop",), drop)


def _view(policy: Policy, report: LayerReport, *, unshare: bool) -> None:
    """The worker's own root: only the granted trees, each at its own path (sandbox/fsview.py)."""
    # The ids the worker will have: the per-app uid's, or the unprivileged user's own.
    if policy.uid is not None and policy.gid is not None:
        ids: tuple[int, int] | None = (policy.uid, policy.gid)
    else:
        ids = None if os.geteuid() == 0 else (os.geteuid(), os.getegid())

    def enter() -> None:
        owner = policy.app_owner if policy.uid is not None else None
        fsview.enter_view(
            policy.grants(), owner=owner, app_dir=policy.app_dir, ids=ids, unshare=unshare
        )
        # The old working directory was the host's: the app's, again, in the view.
        os.chdir(policy.app_dir or "/")

    report.step("view", ("mntns",), enter)
    if policy.tmp_dir:
        os.environ["TMPDIR"] = policy.tmp_dir
        tempfile.tempdir = None  # in case the zygote's imports already asked for one


def _landlock(policy: Policy, report: LayerReport) -> None:
    result: list[landlock.Confinement] = []
    grants = policy.grants()

    def restrict() -> None:
        result.append(landlock.restrict(grants))

    if report.step("landlock", ("landlock",), restrict):
        abi = result[0].abi
        report.verify("landlock-scope", result[0].scoped, f"Landlock ABI {abi} < 6 has no scopes")


def _require_single_thread() -> None:
    # Landlock and credential changes apply to the calling thread only: a second thread (a
    # ZeroMQ context created too early) would stay unconfined.
    try:
        tasks = len(os.listdir("/proc/self/task"))
    except OSError:
        return
    if tasks != 1:
        raise RuntimeError(f"confine() must run single-threaded; this process has {tasks} threads")


def apply_layers(policy: Policy, timings: dict[str, float] | None = None) -> LayerReport:
    """Apply every layer the machine allows, in order; never raises for a missing layer."""
    _require_single_thread()
    root = os.geteuid() == 0
    report = LayerReport(timings=timings if timings is not None else {})
    extra = _open_descriptors_above_3()
    report.verify("fd-close", extra == [], f"descriptors {extra} are open")
    report.step("environment", ("minimal-env",), lambda: _minimal_environment(policy))
    report.step("core", ("no-core-dumps",), lambda: rlimits.lower(resource.RLIMIT_CORE, 0))
    if root:
        report.step("cgroup", ("cgroup",), lambda: cgroups.join_cgroups(policy.app, policy.limits))
    else:
        report.failed["cgroup"] = "cgroup v1 directories are writable by root only"
    _identity(policy, report)
    nproc = "uid-drop" in report.active or "userns" in report.active
    limits = policy.limits
    report.step(
        "rlimits",
        ("rlimits",),
        lambda: rlimits.apply_limits(limits, nproc=nproc, address_space=not policy.browser),
    )
    report.verify("pdeathsig", namespaces.parent_death_signal() != 0, "no parent-death signal")
    report.step("no-new-privs", ("no-new-privs",), set_no_new_privs)
    _landlock(policy, report)
    # A browser worker gets the browser profile: the same tables plus what Chromium needs.
    report.step("seccomp", ("seccomp",), lambda: seccomp.install(browser=policy.browser))
    return report


def confine(
    policy: Mapping[str, Any], *, timings: dict[str, float] | None = None
) -> tuple[str, ...]:
    """Confine this process for good; returns the names of the layers in force."""
    # Raises ValueError for a malformed policy, ConfinementError when strict and a required
    # layer is missing. ``timings``, when given, receives each step's duration in seconds.
    spec = Policy.from_mapping(policy)
    root = os.geteuid() == 0
    report = apply_layers(spec, timings)
    missing = required_layers(root) - set(report.active)
    if spec.strict and missing:
        raise ConfinementError({name: report.failed.get(name, "not applied") for name in missing})
    return tuple(report.active)
