"""The library's own connection to the apiserver, and the error of a refused request.

A node agent runs once per node, so each megabyte repeats on every node. The ``kubernetes``
package costs about 35 MB and 0.4 s of import (it loads every generated model), and the
library uses three things of it: a TLS connection pool, a bearer token, an error type.
:class:`Connection` is those three for the common cases (a Pod's service account, a
kubeconfig with a token or a client certificate). A ``kubernetes.client.ApiClient`` is
accepted wherever a Connection is, and is the way for what this does not cover: exec
credential plugins, auth providers, proxies; :func:`connect` picks one.
"""

from __future__ import annotations

import os
import ssl
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Union

import urllib3

# Raised here and by the kubeconfig readers; public as this module's.
from resourceslice._configerror import ConfigError as ConfigError
from resourceslice._configerror import UnsupportedConfig as UnsupportedConfig
from resourceslice._version import VERSION

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from resourceslice._kubeclient import ClosingApiClient

    #: What every call that talks to the apiserver takes.
    Client = Union[ApiClient, "Connection"]

#: Where a Pod's service account is mounted (client-go's ``rest.InClusterConfig``).
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
#: How long a token read from a file is used before the file is read again: client-go's
#: ``NewCachedFileTokenSource`` (a minute, less its 10 s leeway). kubelet rewrites a bound
#: token at 80% of its lifetime, so a re-read each 50 s never sends an expired one.
TOKEN_FILE_PERIOD = 50.0


class ApiError(Exception):
    """The apiserver answered with a status that is not 2xx (or the request failed so).

    ``status``, ``reason`` (the HTTP reason phrase), ``body`` (text: usually a Status
    object's JSON), ``headers``: as ``kubernetes.client.exceptions.ApiException`` has them.
    When the ``kubernetes`` package is loaded, what the library raises is also an
    ApiException (see :func:`api_error`), so code that catches that still does.
    """

    def __init__(
        self,
        status: int | None = None,
        reason: str | None = None,
        body: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(status, reason)
        self.status = status
        self.reason = reason
        self.body = body
        self.headers = headers

    def __str__(self) -> str:
        text = f"({self.status})\nReason: {self.reason}\n"
        if self.headers:
            text += f"HTTP response headers: {dict(self.headers)}\n"
        if self.body:
            text += f"HTTP response body: {self.body}\n"
        return text


_compat_lock = threading.Lock()
_compat: type[ApiError] | None = None


def api_error(
    status: int | None,
    reason: str | None,
    body: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> ApiError:
    """The error of a refused request: an :class:`ApiError`, which is also the client's
    ``ApiException`` when the ``kubernetes`` package is loaded.

    Code written against the client catches ``ApiException``; such code has imported it
    before the request fails, so checking at the raise is enough, and a driver that never
    imports ``kubernetes`` never loads it for an error.
    """
    module = sys.modules.get("kubernetes.client.exceptions")
    if module is None:
        return ApiError(status, reason, body, headers)
    global _compat
    with _compat_lock:
        if _compat is None:
            _compat = type("ApiError", (ApiError, module.ApiException), {})
            _compat.__module__ = __name__
        kind = _compat
    return kind(status, reason, body, headers)


def is_api_error(exc: BaseException) -> bool:
    """Whether ``exc`` is an apiserver's refusal: an :class:`ApiError`, or an ApiException
    that the driver's own ``kubernetes`` calls raised."""
    if isinstance(exc, ApiError):
        return True
    module = sys.modules.get("kubernetes.client.exceptions")
    return module is not None and isinstance(exc, module.ApiException)


class Connection:
    """HTTPS to one apiserver: a connection pool, its CA, and a bearer token or a client
    certificate. Thread-safe; :meth:`close` (or ``with``) closes its connections.

    ``token_file``: read again every :data:`TOKEN_FILE_PERIOD` seconds and after the
    apiserver refused the token (401), as client-go does: bound service-account tokens
    rotate. A file that cannot be read then keeps the token in use. ``ca_file`` or
    ``ca_data`` (PEM): whom to trust, else the system's CAs. ``cert_file``/``key_file`` or
    ``cert_data``/``key_data``: a client certificate. ``insecure``: no server verification.
    ``pool_size``: connections kept for reuse (default: the ``kubernetes`` client's, five a
    CPU).
    """

    def __init__(
        self,
        host: str,
        *,
        token: str | None = None,
        token_file: str | os.PathLike[str] | None = None,
        ca_file: str | os.PathLike[str] | None = None,
        ca_data: str | None = None,
        cert_file: str | os.PathLike[str] | None = None,
        key_file: str | os.PathLike[str] | None = None,
        cert_data: str | None = None,
        key_data: str | None = None,
        insecure: bool = False,
        pool_size: int | None = None,
        token_period: float = TOKEN_FILE_PERIOD,
    ) -> None:
        self.host = host.rstrip("/")
        self._token = token
        self._token_file = Path(token_file) if token_file is not None else None
        self._token_period = token_period
        self._token_read_at = -float("inf")
        self._token_lock = threading.Lock()
        context = _ssl_context(ca_file, ca_data, insecure)
        _load_client_cert(context, cert_file, key_file, cert_data, key_data)
        # The kubernetes client's size: connections beyond it are not kept for reuse.
        size = pool_size or (os.cpu_count() or 1) * 5
        self.pool_manager = urllib3.PoolManager(num_pools=4, maxsize=size, ssl_context=context)
        self.default_headers = {"User-Agent": _user_agent()}
        if self._token_file is not None:
            self._read_token(initial=True)

    @classmethod
    def in_cluster(cls, service_account_dir: str | os.PathLike[str] | None = None) -> Connection:
        """The Pod's own service account, as client-go's ``rest.InClusterConfig``: the
        apiserver of ``KUBERNETES_SERVICE_HOST``/``_PORT``, the mounted token (re-read as it
        rotates) and CA."""
        host = os.environ.get("KUBERNETES_SERVICE_HOST", "")
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "")
        if not host or not port:
            raise ConfigError(
                "not in a Pod: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set"
            )
        directory = Path(service_account_dir or SERVICE_ACCOUNT_DIR)
        if ":" in host:
            host = f"[{host}]"
        return cls(
            f"https://{host}:{port}",
            token_file=directory / "token",
            ca_file=directory / "ca.crt",
        )

    @classmethod
    def from_kubeconfig(cls, paths: str, context: str | None = None) -> Connection:
        """The user and cluster of ``context`` (default: the current one) in the kubeconfig
        ``paths`` (``:``-separated files, merged as kubectl merges them). Raises
        :class:`UnsupportedConfig` for what needs the ``kubernetes`` client."""
        from resourceslice._kubeconfig import connection_options

        host, options = connection_options(paths, context)
        return cls(host, **options)

    def headers(self) -> dict[str, str]:
        """The headers of a request: the user agent and, with a token, its Authorization."""
        headers = dict(self.default_headers)
        token = self._current_token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def token_refused(self) -> None:
        """The apiserver answered 401: read the token file again before the next request."""
        with self._token_lock:
            self._token_read_at = -float("inf")

    def close(self) -> None:
        self.pool_manager.clear()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Connection({self.host!r})"

    def _current_token(self) -> str | None:
        if self._token_file is None:
            return self._token
        with self._token_lock:
            if time.monotonic() - self._token_read_at >= self._token_period:
                self._read_token(initial=False)
            return self._token

    def _read_token(self, *, initial: bool) -> None:
        assert self._token_file is not None
        try:
            token = self._token_file.read_text().strip()
        except OSError as exc:
            if initial:
                raise ConfigError(f"token file {self._token_file}: {exc}") from None
            return  # client-go's choice: keep the token in use; the next request tries again
        if not token:
            if initial:
                raise ConfigError(f"token file {self._token_file} is empty")
            return
        self._token = token
        self._token_read_at = time.monotonic()


def connect(
    kubeconfig: str | None = None, context: str | None = None
) -> Connection | ClosingApiClient:
    """A client of the cluster that kubectl would talk to: ``kubeconfig`` (``:``-separated
    files), else ``KUBECONFIG``, else ``~/.kube/config``, else the Pod's service account.

    A :class:`Connection` when it can do the job (the ``kubernetes`` package is not
    loaded), else the ``kubernetes`` client's ApiClient (an exec plugin, an auth provider, a
    proxy). Raises :class:`ConfigError` when there is no configuration to load.
    """
    from resourceslice._kubeconfig import in_cluster, kubeconfig_paths

    paths = kubeconfig_paths(kubeconfig)
    if paths is None:
        if not in_cluster():
            raise ConfigError(
                "no kubeconfig: set KUBECONFIG, create ~/.kube/config, or run in a Pod "
                "(in-cluster config)"
            )
        return Connection.in_cluster()
    try:
        return Connection.from_kubeconfig(paths, context)
    except UnsupportedConfig:
        from resourceslice._kubeclient import kubeconfig_client

        return kubeconfig_client(paths, context)


def _ssl_context(
    ca_file: str | os.PathLike[str] | None, ca_data: str | None, insecure: bool
) -> ssl.SSLContext:
    if insecure:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    # Neither given: the system's CAs.
    cafile = None if ca_file is None else os.fspath(ca_file)
    return ssl.create_default_context(cafile=cafile, cadata=ca_data)


def _load_client_cert(
    context: ssl.SSLContext,
    cert_file: str | os.PathLike[str] | None,
    key_file: str | os.PathLike[str] | None,
    cert_data: str | None,
    key_data: str | None,
) -> None:
    if cert_data is None and key_data is None:
        if cert_file is not None:
            context.load_cert_chain(cert_file, key_file)
        return
    # The ssl module loads a certificate from files only: a private file, gone once read.
    with tempfile.TemporaryDirectory(prefix="resourceslice-cert-") as directory:
        pair = []
        for name, data, path in (("cert", cert_data, cert_file), ("key", key_data, key_file)):
            if data is not None:
                path = Path(directory) / name
                path.touch(mode=0o600)
                path.write_text(data)
            pair.append(path)
        context.load_cert_chain(pair[0], pair[1])  # type: ignore[arg-type]


def _user_agent() -> str:
    return f"resourceslice/{VERSION} (python {sys.version_info[0]}.{sys.version_info[1]})"
