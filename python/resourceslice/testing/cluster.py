"""Build, start and stop a real kube-apiserver + etcd on 127.0.0.1 for tests.

Like controller-runtime's envtest: the server is the real one, built from the Kubernetes
Go modules pinned in the ``testcluster`` Go module, so what it accepts or rejects is what a
production cluster of that release accepts or rejects. Nobody publishes those binaries
through a package registry, so the first use builds it with the local Go toolchain and
caches the binary under ``~/.cache/resourceslice/`` keyed by the module's content.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from resourceslice._kubeclient import ClosingApiClient, kubeconfig_client
from resourceslice.connection import Connection

_PACKAGE_DIR = Path(__file__).resolve().parent


class ClusterError(RuntimeError):
    """The test apiserver could not be built or started; the message says why."""


def module_dir() -> Path:
    """The Go module of the server, shipped inside this package (``apiserver/``)."""
    override = os.environ.get("RESOURCESLICE_TESTCLUSTER_SRC")
    candidate = Path(override) if override else _PACKAGE_DIR / "apiserver"
    if not (candidate / "go.mod").is_file():
        raise ClusterError(
            f"the testcluster Go module was not found in {candidate}; "
            "set RESOURCESLICE_TESTCLUSTER_SRC to its directory"
        )
    return candidate


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "resourceslice"


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise ClusterError(
            "Go is not installed (no `go` on PATH): the test apiserver is built from the "
            "Kubernetes Go modules; install Go >= 1.26 or set RESOURCESLICE_TESTCLUSTER_BIN "
            "to a prebuilt testcluster binary"
        )
    return go


#: The release that ``go.mod`` pins; each other release has its own ``go-<release>.mod``
#: (and ``go-<release>.sum``) beside it, built from the same ``main.go`` with ``-modfile``.
DEFAULT_RELEASE = "1.37"


def releases() -> tuple[str, ...]:
    """The Kubernetes releases the test server can be built for, newest first."""
    others = [path.stem[len("go-") :] for path in module_dir().glob("go-*.mod")]
    found = {DEFAULT_RELEASE, *others}
    return tuple(sorted(found, key=lambda r: tuple(map(int, r.split("."))), reverse=True))


def module_files(release: str, src: Path | None = None) -> tuple[str, str]:
    """``(go.mod, go.sum)`` of ``release``, as names in ``src`` (by default
    :func:`module_dir`): ``go.mod`` pins :data:`DEFAULT_RELEASE`, ``go-<release>.mod`` the
    others."""
    if release == DEFAULT_RELEASE:
        return ("go.mod", "go.sum")
    if release not in releases():
        raise ClusterError(
            f"no test server for Kubernetes {release}: known releases are "
            f"{', '.join(releases())} (go-<release>.mod in {src or module_dir()})"
        )
    return (f"go-{release}.mod", f"go-{release}.sum")


def _source_key(
    src: Path,
    go: str,
    gomod: str,
    gosum: str,
    tags: Sequence[str],
    package: str = ".",
    cgo: bool | None = None,
) -> str:
    """Content hash of what the binary is built from: sources, pins, the modules ``gomod``
    replaces with a local directory (the shared ``jsonlines/``), build tags and the Go
    version."""
    digest = hashlib.sha256()
    if _is_import_path(package):  # a required module's main package: go.mod pins it
        digest.update(b"package\0" + package.encode() + b"\0")
    elif package != ".":  # another main package of the module: its own files too
        for path in sorted((src / package).glob("*.go")):
            digest.update(f"{package}/{path.name}".encode() + b"\0" + path.read_bytes() + b"\0")
    # Hashed under their default names, so the default release keeps its key; main.go first,
    # then any other Go file, so a module of main.go alone keeps its key too.
    others = sorted(p.name for p in src.glob("*.go") if p.name != "main.go")
    for name, label in (
        (gomod, "go.mod"),
        (gosum, "go.sum"),
        ("main.go", "main.go"),
        *((other, other) for other in others),
    ):
        path = src / name
        if path.is_file():
            digest.update(label.encode() + b"\0" + path.read_bytes() + b"\0")
    for replacement in _local_replacements(src / gomod):
        # Under the path go.mod gives: the key does not depend on where the package is.
        for path in sorted((src / replacement).rglob("*")):
            if path.name.endswith((".go", ".mod", ".sum")) and path.is_file():
                name = f"{replacement}/{path.relative_to(src / replacement).as_posix()}"
                digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    if tags:
        digest.update(b"tags\0" + ",".join(tags).encode() + b"\0")
    if cgo is not None:  # only when asked: the other programs keep their keys
        digest.update(b"cgo\0" + (b"1" if cgo else b"0") + b"\0")
    version = subprocess.run([go, "version"], capture_output=True, text=True, check=False)
    digest.update(version.stdout.encode())
    return digest.hexdigest()[:16]


#: A replace directive's local directory (``=> ../jsonlines``), in a replace block or not.
_LOCAL_REPLACEMENT = re.compile(r"=>\s*(\.{1,2}/\S*)\s*$", re.MULTILINE)


def _local_replacements(gomod: Path) -> list[str]:
    """The directories ``gomod`` replaces modules with, relative to its module (Go takes a
    replacement starting with ``./`` or ``../`` as a directory): part of the binary's source."""
    if not gomod.is_file():
        return []
    return sorted(set(_LOCAL_REPLACEMENT.findall(gomod.read_text())))


def _is_import_path(package: str) -> bool:
    """``github.com/x/y`` (a host name first), not a directory of the module like ``cmd/x``."""
    return "." in package.split("/", 1)[0] and package != "."


def ask_go_program(binary: Path, request: Mapping[str, Any]) -> dict[str, Any]:
    """``request`` as JSON on the standard input of a Go oracle built by
    :func:`build_go_binary`; the JSON object it prints (ClusterError if it fails)."""
    done = subprocess.run(
        [str(binary)],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        raise ClusterError(f"{binary.name} exited with {done.returncode}: {done.stderr}")
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def build_go_binary(
    src: Path,
    *,
    binary: str,
    cache_name: str,
    what: str,
    gomod: str = "go.mod",
    gosum: str = "go.sum",
    tags: Sequence[str] = (),
    package: str = ".",
    cgo: bool | None = None,
    quiet: bool = False,
) -> Path:
    """Build the Go module ``src`` (its main package, or the one in the directory ``package``,
    pinned by ``gomod``/``gosum``, with build ``tags``) once per machine, as
    ``~/.cache/resourceslice/<cache_name>-<key>/<binary>``.

    ``package`` may also be the import path of a main package of a module that ``gomod``
    requires (``github.com/opencontainers/runc``): a program built at the version pinned there.
    ``cgo`` sets ``CGO_ENABLED`` (``False``: a static binary); ``None`` leaves Go's default.

    ``key`` hashes the sources, pins, tags and Go version, so a change rebuilds. One build at a
    time per machine: a second process waits on the lock, then finds the binary. ``what``
    names the binary in messages.
    """
    go = _go()
    key = _source_key(src, go, gomod, gosum, tags, package, cgo)
    target = cache_dir() / f"{cache_name}-{key}" / binary
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # One build at a time per machine: a second process waits, then finds the binary.
    # Imported here: fcntl is POSIX-only, and this module is imported by the pytest plugin
    # (registered on install): pytest must keep working where it is missing, as on Windows.
    import fcntl

    with open(target.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.is_file():
            return target
        if not quiet:
            print(
                f"resourceslice.testing: building {what} from {src} "
                "(first time on this machine: minutes)",
                flush=True,
            )
        env = dict(os.environ, GOFLAGS="-mod=mod")
        if cgo is not None:
            env["CGO_ENABLED"] = "1" if cgo else "0"
        tmp = target.with_suffix(".tmp")
        started = time.monotonic()
        tag_args = [f"-tags={','.join(tags)}"] if tags else []
        main = package if package == "." or _is_import_path(package) else f"./{package}"
        result = subprocess.run(
            [go, "build", f"-modfile={gomod}", *tag_args, "-o", str(tmp), main],
            cwd=src,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise ClusterError(
                f"building {what} failed (go build -modfile={gomod} in "
                f"{src}, exit {result.returncode}):\n{result.stderr[-6000:]}"
            )
        tmp.rename(target)
        if not quiet:
            print(
                f"resourceslice.testing: built {target} in {time.monotonic() - started:.0f}s",
                flush=True,
            )
    return target


def build_server(*, release: str = DEFAULT_RELEASE, quiet: bool = False) -> Path:
    """Return the path of the testcluster binary of ``release``, building it once per machine.

    ``RESOURCESLICE_TESTCLUSTER_BIN`` (a prebuilt binary) stands for the default release only.
    """
    prebuilt = os.environ.get("RESOURCESLICE_TESTCLUSTER_BIN")
    if prebuilt and release == DEFAULT_RELEASE:
        if not os.access(prebuilt, os.X_OK):
            raise ClusterError(f"RESOURCESLICE_TESTCLUSTER_BIN={prebuilt} is not executable")
        return Path(prebuilt)
    gomod, gosum = module_files(release)
    return build_go_binary(
        module_dir(),
        binary="testcluster",
        cache_name="testcluster" if release == DEFAULT_RELEASE else f"testcluster-{release}",
        what=f"kube-apiserver {release} + etcd",
        gomod=gomod,
        gosum=gosum,
        quiet=quiet,
    )


@dataclass
class TestCluster:
    """One kube-apiserver + etcd process and the state directory it serves from.

    The directory keeps certificates, tokens, ports and etcd data, so :meth:`restart`
    (after :meth:`kill` or :meth:`stop`) brings the same cluster back at the same address.
    """

    __test__ = False  # not a pytest test class, despite the name

    binary: Path
    data_dir: Path
    #: The Kubernetes release (``major.minor``) the binary was built from.
    release: str = DEFAULT_RELEASE
    extra_users: Sequence[str] = ()
    extra_args: Sequence[str] = ()
    #: An ``audit.k8s.io/v1`` Policy: the server logs what it selects to :attr:`audit_log`.
    audit_policy: Mapping[str, Any] | None = None
    owns_data_dir: bool = True
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)
    _info: dict[str, Any] = field(default_factory=dict, init=False)
    _log: IO[bytes] | None = field(default=None, init=False)

    @property
    def server(self) -> str:
        return str(self._info["server"])

    @property
    def ca_file(self) -> Path:
        return Path(self._info["caFile"])

    @property
    def etcd_url(self) -> str:
        """etcd's client URL (plain HTTP with the JSON gateway, e.g. to force a compaction)."""
        return str(self._info["etcdClient"])

    @property
    def feature_gates(self) -> str:
        """The ``--feature-gates`` the server runs with (other components of the release
        take the same)."""
        return str(self._info.get("featureGates", ""))

    @property
    def kubeconfigs(self) -> dict[str, Path]:
        """Kubeconfig per user: ``admin`` (system:masters), ``driver`` (no rights), extras."""
        return {name: Path(path) for name, path in self._info["kubeconfigs"].items()}

    @property
    def log_path(self) -> Path:
        return self.data_dir / "apiserver.log"

    @property
    def audit_log(self) -> Path:
        """The audit log, one JSON event per line (a cluster started with an
        ``audit_policy``). Each event is on disk before its request is answered."""
        if self.audit_policy is None:
            raise ClusterError("the cluster was started without an audit_policy")
        return self.data_dir / "audit.log"

    def token(self, user: str = "admin") -> str:
        for entry in self._info["users"]:
            if entry["name"] == user:
                return str(entry["token"])
        raise KeyError(user)

    def api_client(self, user: str = "admin") -> ClosingApiClient:
        """A new client authenticated as ``user``; ``close()`` closes its connections."""
        return kubeconfig_client(str(self.kubeconfigs[user]))

    def connection(self, user: str = "admin") -> Connection:
        """A new :class:`~resourceslice.Connection` authenticated as ``user``."""
        return Connection.from_kubeconfig(str(self.kubeconfigs[user]))

    def start(self, timeout: float = 180.0) -> None:
        """Start the process and wait until ``/readyz`` answers ok."""
        if self.process is not None and self.process.poll() is None:
            raise ClusterError("already running")
        args = [str(self.binary), "--dir", str(self.data_dir)]
        for user in self.extra_users:
            args += ["--user", user]
        args += ["--", *self.extra_args]
        if self.audit_policy is not None:
            policy = self.data_dir / "audit-policy.json"  # JSON is YAML too
            policy.write_text(json.dumps(self.audit_policy))
            args += [
                f"--audit-policy-file={policy}",
                f"--audit-log-path={self.audit_log}",
                "--audit-log-mode=blocking",
            ]
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - lives as long as the process
        self.process = subprocess.Popen(
            args, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        info_path = self.data_dir / "cluster.json"
        last_error = "no answer yet"
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise ClusterError(
                    f"the test apiserver exited with {self.process.returncode}:\n{self.log_tail()}"
                )
            if not self._info and info_path.is_file():
                self._info = json.loads(info_path.read_text())
            if self._info:
                ok, last_error = self._probe("/readyz")
                if ok:
                    return
            time.sleep(0.2)  # polling a process we do not control: nothing to wait on
        raise ClusterError(
            f"the test apiserver was not ready after {timeout:.0f}s ({last_error}):\n"
            f"{self.log_tail()}"
        )

    def _probe(self, path: str) -> tuple[bool, str]:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        request = urllib.request.Request(
            self.server + path, headers={"Authorization": f"Bearer {self.token()}"}
        )
        try:
            with urllib.request.urlopen(request, context=context, timeout=5) as response:
                return response.status == 200, f"HTTP {response.status}"
        except (urllib.error.URLError, OSError) as exc:
            return False, str(exc)

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def _signal(self, sig: signal.Signals) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM and wait; SIGKILL if it does not exit in time."""
        if self.process is None:
            return
        self._signal(signal.SIGCONT)  # a frozen process cannot handle SIGTERM
        self._signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._close_log()

    def kill(self) -> None:
        """SIGKILL, as a crash: etcd data stays for :meth:`restart`."""
        if self.process is None:
            return
        self._signal(signal.SIGKILL)
        self.process.wait()
        self._close_log()

    def freeze(self) -> None:
        """SIGSTOP: the server stops answering but keeps its connections open."""
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def restart(self, timeout: float = 180.0) -> None:
        self.stop()
        self.start(timeout)

    def close(self) -> None:
        """Stop and remove the state directory when this object created it."""
        self.stop()
        if self.owns_data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> TestCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def start_cluster(
    *,
    extra_users: Sequence[str] = (),
    extra_args: Sequence[str] = (),
    data_dir: Path | None = None,
    timeout: float = 180.0,
    release: str = DEFAULT_RELEASE,
    audit_policy: Mapping[str, Any] | None = None,
) -> TestCluster:
    """Build if needed, start, and return a ready cluster (a context manager).

    ``extra_users`` are ``name[=group,group]`` (e.g. ``"system:node:n1=system:nodes"``);
    ``extra_args`` go to kube-apiserver as they are (e.g. ``"--max-requests-inflight=5"``).
    ``release``: the Kubernetes release of the server, one of :func:`releases`.
    ``audit_policy``: an ``audit.k8s.io/v1`` Policy; the events it selects go to
    :attr:`TestCluster.audit_log` (e.g. who wrote what, with the user of each request).
    """
    binary = build_server(release=release)
    owns = data_dir is None
    directory = Path(tempfile.mkdtemp(prefix="resourceslice-cluster-")) if owns else data_dir
    assert directory is not None
    cluster = TestCluster(
        binary=binary,
        data_dir=directory,
        release=release,
        extra_users=tuple(extra_users),
        extra_args=tuple(extra_args),
        audit_policy=audit_policy,
        owns_data_dir=owns,
    )
    try:
        cluster.start(timeout)
    except BaseException:
        cluster.close()
        raise
    return cluster


@contextlib.contextmanager
def running_cluster(**kwargs: Any) -> Iterator[TestCluster]:
    """``with running_cluster() as cluster: ...`` — started, then stopped and removed.

    Takes :func:`start_cluster`'s arguments, e.g. ``running_cluster(release="1.33")``.
    """
    cluster = start_cluster(**kwargs)
    try:
        yield cluster
    finally:
        cluster.close()
