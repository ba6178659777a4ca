"""Containers run for real with runc: what a process sees once a spec is applied.

:func:`build_runc` builds runc (``github.com/opencontainers/runc`` at :data:`RUNC_VERSION`,
pinned by the Go module ``runtime/runc/``) and :func:`build_reporter` a static program
(``runtime/reporter/``), both once per machine, cached like the test apiserver
(``~/.cache/resourceslice/``; Go and a C compiler needed). :func:`run_container` runs the
reporter as the process of an OCI runtime spec (the env, mounts and ``linux.devices`` a CDI
edit would inject, merged into a base spec like ``runc spec``'s) and returns a
:class:`Container` whose :attr:`~Container.report` says what the process saw::

    with run_container({"process": {"env": ["GPU=0"]}}) as container:
        assert container.report.env["GPU"] == "0"

Needs root (:func:`runtime_available` says why not). The DRA cluster
(:mod:`resourceslice.testing.dra`) runs its pods' containers with it.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from resourceslice.testing.cluster import build_go_binary

_PACKAGE_DIR = Path(__file__).resolve().parent / "runtime"

#: The runc release the ``runtime/runc`` module pins.
RUNC_VERSION = "v1.5.3"

#: Where the reporter is in the container's rootfs (its only file).
REPORTER_PATH = "/reporter"


class RuncError(RuntimeError):
    """runc failed: the message is its command line and runc's own error message (``msg=`` of
    its log line), ``stderr`` all it wrote."""

    def __init__(self, args: Sequence[str], message: str, stderr: str) -> None:
        said = runc_message(stderr)
        super().__init__(f"runc {' '.join(args)}: {message}: {said or stderr.strip()}")
        self.stderr = stderr
        #: runc's error message (``msg="..."`` of its ``level=error`` line), or None.
        self.message = said


def runc_message(stderr: str) -> str | None:
    """The ``msg`` of runc's last ``level=error`` log line in ``stderr``, unquoted."""
    for line in reversed(stderr.splitlines()):
        if "level=error" not in line or ' msg="' not in line:
            continue
        quoted = line.split(' msg="', 1)[1]
        text: list[str] = []
        escaped = False
        for char in quoted:
            if escaped:
                text.append({"n": "\n", "t": "\t"}.get(char, char))
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                break
            else:
                text.append(char)
        return "".join(text)
    return None


def build_runc(*, quiet: bool = False) -> Path:
    """runc's command (``runtime/runc/``: runc v1.5.3's ``main``), built once per machine.

    With cgo (libcontainer's nsenter is C) and without the ``seccomp`` build tag: libseccomp is
    not needed, and a spec with a seccomp profile is refused.
    """
    return build_go_binary(
        _PACKAGE_DIR / "runc",
        binary="runc",
        cache_name="runc",
        what=f"runc {RUNC_VERSION} (github.com/opencontainers/runc)",
        package="github.com/opencontainers/runc",
        cgo=True,
        quiet=quiet,
    )


def build_reporter(*, quiet: bool = False) -> Path:
    """The reporter (``runtime/reporter/``), static: a rootfs of this one file runs it."""
    return build_go_binary(
        _PACKAGE_DIR / "reporter",
        binary="reporter",
        cache_name="runtime-reporter",
        what="the container reporter",
        cgo=False,
        quiet=quiet,
    )


def runtime_available() -> str | None:
    """Why runc cannot run containers here, or None when it can: on Linux, as root. (Rootless
    runc, in a user namespace, needs a spec of its own — ``runc spec --rootless`` — which is
    not made here.)"""
    if not sys.platform.startswith("linux"):
        return f"runc runs containers on Linux only, not {sys.platform}"
    if os.geteuid() != 0:
        return f"not root (uid {os.geteuid()}): rootless containers are not set up"
    return None


@dataclass(frozen=True)
class Mount:
    """A line of the process's ``/proc/self/mountinfo``."""

    mount_point: str
    source: str
    fs_type: str
    root: str


@dataclass(frozen=True)
class DeviceNode:
    """A character (``c``) or block (``b``) device node under the process's ``/dev``."""

    path: str
    type: str
    major: int
    minor: int


@dataclass(frozen=True)
class Report:
    """What the reporter saw from inside its container."""

    env: dict[str, str]
    mounts: list[Mount]
    devices: list[DeviceNode]
    #: Each file asked for: its contents, or None when it could not be read (see ``errors``).
    files: dict[str, str | None]
    errors: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Report:
        return cls(
            env=dict(data.get("env") or {}),
            mounts=[Mount(**m) for m in data.get("mounts") or []],
            devices=[DeviceNode(**d) for d in data.get("devices") or []],
            files=dict(data.get("files") or {}),
            errors=dict(data.get("errors") or {}),
        )

    def mount(self, mount_point: str) -> Mount | None:
        """The last mount at ``mount_point`` (the one the process sees), or None."""
        found = [m for m in self.mounts if m.mount_point == mount_point]
        return found[-1] if found else None

    def device(self, path: str) -> DeviceNode | None:
        return next((d for d in self.devices if d.path == path), None)


def base_spec(args: Sequence[str], *, cwd: str = "/") -> dict[str, Any]:
    """An OCI runtime spec like ``runc spec``'s default (not a terminal; rootfs ``rootfs``),
    with ``args`` as the process: the namespaces, mounts, masked paths and deny-all device
    cgroup a container starts from."""
    return {
        "ociVersion": "1.2.0",
        "process": {
            "terminal": False,
            "user": {"uid": 0, "gid": 0},
            "args": list(args),
            "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "cwd": cwd,
            "capabilities": {
                kind: ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"]
                for kind in ("bounding", "effective", "permitted")
            },
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
            "noNewPrivileges": True,
        },
        "root": {"path": "rootfs", "readonly": True},
        "hostname": "runc",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {
                "destination": "/dev",
                "type": "tmpfs",
                "source": "tmpfs",
                "options": ["nosuid", "strictatime", "mode=755", "size=65536k"],
            },
            {
                "destination": "/dev/pts",
                "type": "devpts",
                "source": "devpts",
                "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"],
            },
            {
                "destination": "/dev/shm",
                "type": "tmpfs",
                "source": "shm",
                "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"],
            },
            {
                "destination": "/dev/mqueue",
                "type": "mqueue",
                "source": "mqueue",
                "options": ["nosuid", "noexec", "nodev"],
            },
            {
                "destination": "/sys",
                "type": "sysfs",
                "source": "sysfs",
                "options": ["nosuid", "noexec", "nodev", "ro"],
            },
            {
                "destination": "/tmp",
                "type": "tmpfs",
                "source": "tmpfs",
                "options": ["nosuid", "nodev", "mode=1777"],
            },
        ],
        "linux": {
            "resources": {"devices": [{"allow": False, "access": "rwm"}]},
            "namespaces": [
                {"type": t} for t in ("pid", "network", "ipc", "uts", "mount", "cgroup")
            ],
            "maskedPaths": [
                "/proc/acpi",
                "/proc/asound",
                "/proc/kcore",
                "/proc/keys",
                "/proc/latency_stats",
                "/proc/timer_list",
                "/proc/timer_stats",
                "/proc/sched_debug",
                "/sys/firmware",
                "/proc/scsi",
            ],
            "readonlyPaths": [
                "/proc/bus",
                "/proc/fs",
                "/proc/irq",
                "/proc/sys",
                "/proc/sysrq-trigger",
            ],
        },
    }


def merge_spec(base: Mapping[str, Any], edits: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with what ``edits`` (a partial spec) adds: ``process.env`` (a variable set
    twice keeps the later value), ``process.args``, ``mounts`` (after the base's: the later
    mount wins at a destination), ``linux.devices`` and the device cgroup rules of
    ``linux.resources.devices`` (after the base's deny-all), and ``annotations``."""
    spec = copy.deepcopy(dict(base))
    process = edits.get("process") or {}
    if process.get("args"):
        spec["process"]["args"] = list(process["args"])
    env: dict[str, str] = {}
    for entry in [*spec["process"].get("env", []), *process.get("env", [])]:
        name, _, value = entry.partition("=")
        env.pop(name, None)  # a later value moves to the end too: the order of the edits
        env[name] = value
    spec["process"]["env"] = [f"{name}={value}" for name, value in env.items()]
    spec["mounts"] = [*spec.get("mounts", []), *copy.deepcopy(edits.get("mounts") or [])]
    linux = edits.get("linux") or {}
    if linux.get("devices"):
        spec["linux"]["devices"] = [
            *spec["linux"].get("devices", []),
            *copy.deepcopy(linux["devices"]),
        ]
    rules = (linux.get("resources") or {}).get("devices") or []
    resources = spec["linux"].setdefault("resources", {})
    resources["devices"] = [*resources.get("devices", []), *copy.deepcopy(rules)]
    if edits.get("annotations"):
        spec["annotations"] = {**spec.get("annotations", {}), **edits["annotations"]}
    return spec


def _runc_state(runc: Path, root: Path, container_id: str) -> dict[str, Any] | None:
    done = subprocess.run(
        [str(runc), "--root", str(root), "state", container_id],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        return None  # gone (deleted, or never created)
    state: dict[str, Any] = json.loads(done.stdout)
    return state


def _wait(condition: Any, timeout: float, interval: float = 0.02) -> bool:
    """Poll ``condition`` (a state only runc or a file shows: nothing signals it) until it is
    truthy or ``timeout`` passes; whether it became truthy."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True


class Container:
    """A container running the reporter, made by :func:`run_container`.

    Its bundle (``config.json``, ``rootfs/``, the process's ``stdout``/``stderr``) and runc's
    state directory are temporary directories of its own, removed by :meth:`stop`.
    """

    def __init__(
        self, runc: Path, reporter: Path, spec: Mapping[str, Any], *, timeout: float
    ) -> None:
        self.runc = runc
        self.id = f"rs-{uuid.uuid4().hex[:12]}"
        self.bundle = Path(tempfile.mkdtemp(prefix="resourceslice-bundle-"))
        #: runc's ``--root``: its state of this container, nothing else's.
        self.state_root = Path(tempfile.mkdtemp(prefix="resourceslice-runc-"))
        self.stopped = False
        rootfs = self.bundle / "rootfs"
        for directory in ("proc", "dev", "sys", "tmp"):
            (rootfs / directory).mkdir(parents=True)
        shutil.copy2(reporter, rootfs / REPORTER_PATH.lstrip("/"))
        #: The spec runc was given: the base, with ``spec`` merged in.
        self.spec = merge_spec(base_spec([REPORTER_PATH]), spec)
        (self.bundle / "config.json").write_text(json.dumps(self.spec, indent=1))
        self._stdout = self.bundle / "stdout"
        self._stderr = self.bundle / "stderr"
        try:
            self._start(timeout)
            self.report = self._read_report(timeout)
        except BaseException:
            self._cleanup(grace=0.0)
            raise

    def _runc(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.runc), "--root", str(self.state_root), *args],
            capture_output=True,
            text=True,
            check=False,
        )

    def _start(self, timeout: float) -> None:
        # Detached and not a terminal: runc hands its own stdio to the process and exits once
        # it runs, so they are files (a pipe would stay open as long as the container).
        args = ["run", "--detach", "--bundle", str(self.bundle), self.id]
        with open(self._stdout, "wb") as out, open(self._stderr, "wb") as err:
            done = subprocess.run(
                [str(self.runc), "--root", str(self.state_root), *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                timeout=timeout,
                check=False,
            )
        if done.returncode != 0:
            raise RuncError(
                args, f"exit {done.returncode}", self._stderr.read_text(errors="replace")
            )

    def _read_report(self, timeout: float) -> Report:
        def line() -> str | None:
            text = self._stdout.read_text(errors="replace")
            return text.split("\n", 1)[0] if "\n" in text else None

        def ended() -> bool:
            state = _runc_state(self.runc, self.state_root, self.id)
            return state is None or state.get("status") == "stopped"

        if not _wait(lambda: line() is not None or ended(), timeout):
            raise RuncError(["run", self.id], f"no report within {timeout}s", self._errors())
        report = line()
        if report is None:
            raise RuncError(["run", self.id], "the process ended without a report", self._errors())
        return Report.from_json(json.loads(report))

    def _errors(self) -> str:
        return self._stderr.read_text(errors="replace")

    def state(self) -> dict[str, Any] | None:
        """``runc state``: ``status`` (``running``, ``stopped``, ...), ``pid``...; None once
        deleted."""
        return _runc_state(self.runc, self.state_root, self.id)

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM, SIGKILL if the process still runs ``grace`` seconds later, then ``runc
        delete``: no runc state and no bundle are left. Idempotent."""
        if self.stopped:
            return
        self._cleanup(grace)

    def _cleanup(self, grace: float) -> None:
        self.stopped = True
        try:
            if self.state() is not None:
                self._runc("kill", self.id, "TERM")

                def stopped() -> bool:
                    state = self.state()
                    return state is None or state.get("status") == "stopped"

                if not _wait(stopped, grace):
                    self._runc("kill", self.id, "KILL")
                    _wait(stopped, 10.0)
                done = self._runc("delete", "--force", self.id)
                if done.returncode != 0 and self.state() is not None:
                    raise RuncError(["delete", "--force", self.id], "failed", done.stderr)
        finally:
            shutil.rmtree(self.bundle, ignore_errors=True)
            shutil.rmtree(self.state_root, ignore_errors=True)

    def __enter__(self) -> Container:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def run_container(
    spec: Mapping[str, Any] | None = None,
    *,
    files: Sequence[str] = (),
    timeout: float = 30.0,
) -> Container:
    """Run the reporter in a container of ``spec`` (a partial OCI runtime spec, merged into
    :func:`base_spec` by :func:`merge_spec`) and return it once its report is read. ``files``:
    paths inside the container whose contents the report holds. :class:`RuncError` (with
    runc's stderr) when runc cannot start it. Stop it with :meth:`Container.stop` (or a
    ``with`` block)."""
    edits = copy.deepcopy(dict(spec or {}))
    if files:
        process = edits.setdefault("process", {})
        process["args"] = [REPORTER_PATH, *files]
    return Container(build_runc(), build_reporter(), edits, timeout=timeout)
