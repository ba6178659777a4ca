"""The kubelet plugin of a DRA driver: :func:`start` and the :class:`Helper` it returns.

The helper ties the parts together: registration with kubelet
(:mod:`~resourceslice.kubeletplugin.registration`), the DRA service kubelet calls to prepare
claims (:mod:`~resourceslice.kubeletplugin.service`), health streams
(:mod:`~resourceslice.kubeletplugin.healthstream`), one call at a time
(:mod:`~resourceslice.kubeletplugin.serialize`), the driver's coroutines
(:mod:`~resourceslice.kubeletplugin.callbacks`), and publishing the node's devices (this
library's controller). The DRA service lives on a socket of its own, in the driver's plugin
data directory.

Go drivers get this from ``k8s.io/dynamic-resource-allocation/kubeletplugin``; this module
follows its behaviour and defaults (read there for facts).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent import futures
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote

import grpc

from resourceslice._apiversion import GROUP, ServedVersion
from resourceslice._http import REQUEST_TIMEOUT, get_json, request
from resourceslice.api import DriverResources, Owner
from resourceslice.claimstatus import DeviceStatusWriter
from resourceslice.connection import ApiError
from resourceslice.controller import Controller, ErrorHandler, start_controller
from resourceslice.kubeletplugin._pb import (
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2_grpc,
    health_v1_pb2,
    health_v1_pb2_grpc,
    health_v1alpha1_pb2,
    health_v1alpha1_pb2_grpc,
    pluginregistration_v1_pb2,
    pluginregistration_v1_pb2_grpc,
)
from resourceslice.kubeletplugin.callbacks import CallbackLoop, Iteration
from resourceslice.kubeletplugin.cdi import DEFAULT_CDI_DIR
from resourceslice.kubeletplugin.claims import ResourceClaim
from resourceslice.kubeletplugin.healthstream import health_servicer
from resourceslice.kubeletplugin.interceptors import (
    Interceptor,
    InterceptorFunction,
    server_interceptors,
)
from resourceslice.kubeletplugin.metadata import MetadataPlugin, MetadataWriter
from resourceslice.kubeletplugin.prepared import Checkpoint
from resourceslice.kubeletplugin.registration import (
    DRA_V1,
    DRA_V1BETA1,
    HEALTH_V1,
    HEALTH_V1ALPHA1,
    KUBELET_PLUGINS_DIR,
    KUBELET_REGISTRY_DIR,
    Registrar,
    check_driver_name,
    rolling_update_registrar_socket,
)
from resourceslice.kubeletplugin.serialize import Serializer
from resourceslice.kubeletplugin.service import DRAService, error_text
from resourceslice.kubeletplugin.sockets import SocketId, listen, remove_if_ours
from resourceslice.kubeletplugin.types import (
    ClaimRef,
    DeviceHealth,
    HealthReporter,
    Plugin,
    PreparedDevice,
    PrepareResult,
)

if TYPE_CHECKING:
    from resourceslice.connection import Client

log = logging.getLogger("resourceslice.kubeletplugin")


class Helper:
    """A running kubelet plugin: built by :func:`start`; ``stop()``, ``with`` or ``async with``
    ends it.

    ``registrar_socket_path`` and ``plugin_socket_path`` are where it serves, ``services``
    what it offers kubelet, ``registration_status`` what kubelet answered last,
    ``checkpoint`` the checkpoint of prepared claims (None when turned off),
    ``device_metadata`` the writer of the claims' metadata files (None unless turned on).
    """

    def __init__(
        self,
        plugin: Plugin,
        *,
        driver: str,
        api_client: Client | None,
        node_name: str,
        node_uid: str,
        registrar_dir: str,
        registrar_socket: str,
        plugin_data_dir: str,
        plugin_socket: str,
        lock_file: Path | None,
        serialize: bool,
        services: Sequence[str],
        loop: asyncio.AbstractEventLoop | None,
        error_handler: ErrorHandler | None,
        reconcile_pool_with_name: str | None,
        max_workers: int,
        checkpoint: bool = False,
        metadata: MetadataWriter | None = None,
        interceptors: Sequence[grpc.ServerInterceptor] = (),
    ) -> None:
        self.driver = driver
        self.node_name = node_name
        self.node_uid = node_uid
        self.registrar_socket_path = os.path.join(registrar_dir, registrar_socket)
        self.plugin_socket_path = os.path.join(plugin_data_dir, plugin_socket)
        self.services = tuple(services)
        #: What kubelet last said in ``NotifyRegistrationStatus`` (None: not yet).
        self.registration_status: pluginregistration_v1_pb2.RegistrationStatus | None = None
        self._registered = threading.Event()
        self._plugin = plugin
        self.device_metadata = metadata
        # What prepare and unprepare call: with metadata, the files are written and removed
        # around the driver's callbacks, so the checkpoint records them as the driver's work.
        self._claims_plugin: Plugin = (
            plugin if metadata is None else MetadataPlugin(plugin, metadata)
        )
        self._api_client = api_client
        # Claims are read in the newest resource.k8s.io version served, which the slices'
        # discovery finds (one group, one answer).
        self._served = ServedVersion(api_client) if api_client is not None else None
        self._device_status = (
            DeviceStatusWriter(api_client, driver=driver, node_name=node_name)
            if api_client is not None
            else None
        )
        self._serializer = Serializer(serialize, lock_file)
        self._loop = CallbackLoop(loop)
        self._error_handler = error_handler or _log_error
        self._reconcile_pool_with_name = reconcile_pool_with_name
        self._max_workers = max_workers
        self._interceptors = list(interceptors)
        self._controller: Controller | None = None
        self._controller_lock = threading.Lock()
        #: Each server, its socket's path, and the socket file it bound there.
        self._servers: list[tuple[grpc.Server, str, SocketId]] = []
        self._stopped = threading.Event()
        self.checkpoint: Checkpoint | None = None
        if checkpoint:
            self.checkpoint = Checkpoint(
                plugin_data_dir,
                driver=driver,
                plugin=self._claims_plugin,
                loop=self._loop,
                serializer=self._serializer,
                error_handler=self._error_handler,
            )

    # -- lifecycle ---------------------------------------------------------------------------

    def _serve(self, path: str, register: Callable[[grpc.Server], None]) -> None:
        # The driver's own data directory is made if missing; kubelet's registration
        # directory is not (Go's helper makes neither): a socket in a directory of our own
        # making would never be seen by kubelet, a missing host mount made silent.
        directory = Path(path).parent
        if path == self.registrar_socket_path and not directory.is_dir():
            raise FileNotFoundError(
                f"kubelet's plugin registration directory {directory} does not exist "
                "(is it mounted from the host? see registrar_dir)"
            )
        directory.mkdir(parents=True, exist_ok=True)
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=self._max_workers),
            interceptors=self._interceptors,
        )
        register(server)
        self._servers.append((server, path, listen(server, path)))

    def _start(self) -> None:
        dra = DRAService(self)

        def register_dra(server: grpc.Server) -> None:
            if DRA_V1 in self.services:
                _add(dra_v1_pb2_grpc.add_DRAPluginServicer_to_server, dra.v1(), server)
            if DRA_V1BETA1 in self.services:
                _add(dra_v1beta1_pb2_grpc.add_DRAPluginServicer_to_server, dra.v1beta1(), server)
            if HEALTH_V1 in self.services:
                _add(
                    health_v1_pb2_grpc.add_DRAResourceHealthServicer_to_server,
                    health_servicer(self, health_v1_pb2),
                    server,
                )
            if HEALTH_V1ALPHA1 in self.services:
                _add(
                    health_v1alpha1_pb2_grpc.add_DRAResourceHealthServicer_to_server,
                    health_servicer(self, health_v1alpha1_pb2),
                    server,
                )

        def register_registrar(server: grpc.Server) -> None:
            _add(
                pluginregistration_v1_pb2_grpc.add_RegistrationServicer_to_server,
                Registrar(self),
                server,
            )

        if self.checkpoint is not None:
            self.checkpoint.start(self._read_claim, self._stopped)  # before kubelet can call
        # The DRA service first: kubelet connects to it as soon as registration succeeds.
        self._serve(self.plugin_socket_path, register_dra)
        self._serve(self.registrar_socket_path, register_registrar)
        log.info(
            "kubelet plugin of %s: registration at %s, %s at %s",
            self.driver,
            self.registrar_socket_path,
            ", ".join(self.services),
            self.plugin_socket_path,
        )

    def stop(self) -> None:
        """Unregister (the registration socket goes first), stop serving, stop publishing.

        The ResourceSlices stay: kubelet removes a node's slices of a driver that stays
        away, and a restarted plugin finds them in place.
        """
        if self._stopped.is_set():
            return
        self._stopped.set()
        for server, path, socket_id in reversed(self._servers):
            server.stop(grace=None).wait()
            remove_if_ours(path, socket_id)
        self._servers.clear()
        if self.checkpoint is not None:
            self.checkpoint.join()  # before the loop closes: it may wait for a callback on it
        with self._controller_lock:
            if self._controller is not None:
                self._controller.stop()
        self._loop.close()

    def __enter__(self) -> Helper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> Helper:
        return self

    async def __aexit__(self, *exc: object) -> None:
        # stop() waits for the calls in flight, and a coroutine callback among them ends only
        # if this loop goes on: it runs on a thread meanwhile.
        await asyncio.to_thread(self.stop)

    def wait_registered(self, timeout: float | None = None) -> bool:
        """Block until kubelet reported a successful registration (True), or time out."""
        return self._registered.wait(timeout)

    # -- publishing --------------------------------------------------------------------------

    def publish_resources(self, resources: DriverResources) -> None:
        """Publish the node's devices: this library's controller with the Node as owner.

        The first call starts the controller; later ones update it (non-blocking, validated:
        ValidationError as :meth:`Controller.update`). ``controller`` gives the controller
        itself (``wait_synced``, ``stats``).
        """
        if self._api_client is None:
            raise ValueError("publish_resources needs the api_client given to start()")
        if not self.node_name:
            raise ValueError("publish_resources needs the node_name given to start()")
        with self._controller_lock:
            if self._stopped.is_set():
                raise RuntimeError("the kubelet plugin is stopped")
            if self._controller is None:
                self._controller = start_controller(
                    self._api_client,
                    driver=self.driver,
                    owner=Owner("v1", "Node", self.node_name, uid=self.node_uid),
                    resources=resources,
                    error_handler=self._error_handler,
                    reconcile_pool_with_name=self._reconcile_pool_with_name,
                )
            else:
                self._controller.update(resources)

    @property
    def device_status(self) -> DeviceStatusWriter:
        """Writes this driver's entries of a claim's ``status.devices`` (conditions, data,
        network data of a device), as this node's plugin: each entry's field manager is
        ``<driver>/<node>/<pool>/<device>``. See :mod:`resourceslice.claimstatus`.
        ValueError without an ``api_client``."""
        if self._device_status is None:
            raise ValueError("no api_client: device status cannot be written")
        return self._device_status

    def update_request_metadata(
        self, namespace: str, name: str, uid: str, request: str, devices: Sequence[PreparedDevice]
    ) -> None:
        """Rewrite the metadata file of ``request`` of a prepared claim with ``devices``, one
        generation further (Go's ``Helper.UpdateRequestMetadata``): for what is known only
        after prepare, such as the network's data once the pod's sandbox exists. Give the
        request's devices as prepare returned them, their ``metadata`` now complete (the
        file's devices are replaced). Containers created afterwards see it; a running one
        keeps the file it was given (its bind mount holds the replaced file).

        RuntimeError when the helper writes no metadata; ValueError when the claim's request
        has no file here, the file is of another claim UID, or the metadata is not valid.
        """
        if self.device_metadata is None:
            raise RuntimeError(
                "device metadata is not enabled (kubeletplugin.start(..., device_metadata=...))"
            )
        self.device_metadata.update(namespace, name, uid, request, devices)

    @property
    def controller(self) -> Controller | None:
        """The ResourceSlice controller once :meth:`publish_resources` started it."""
        return self._controller

    # -- what the services call --------------------------------------------------------------

    def _read_claim(
        self, namespace: str, name: str, deadline: float | None = None
    ) -> ResourceClaim | None:
        """The claim as the apiserver has it now (v1); None when there is none."""
        if self._api_client is None or self._served is None:
            raise ValueError("no api_client: claims cannot be read")
        version = self._served.current(self._left(deadline))
        path = (
            f"/apis/{GROUP}/{version.version}/namespaces/{quote(namespace, safe='')}"
            f"/resourceclaims/{quote(name, safe='')}"
        )
        try:
            # In v1 whatever the cluster serves, as Go's helper hands its drivers v1 claims.
            return cast(ResourceClaim, version.claim_to_v1(json.loads(self._get(path, deadline))))
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def _fetch_claim(self, ref: ClaimRef, deadline: float | None) -> ResourceClaim:
        """The claim as the apiserver has it now; ValueError when it is not the one kubelet
        means (gone, replaced by one of the same name, not allocated)."""
        claim = self._read_claim(ref.namespace, ref.name, deadline)
        if claim is None:
            raise ValueError(f"claim {ref.namespace}/{ref.name} not found")
        uid = claim["metadata"].get("uid")
        if uid != ref.uid:
            raise ValueError(
                f"claim {ref.namespace}/{ref.name} got replaced: UID {uid}, not {ref.uid}"
            )
        if not (claim.get("status") or {}).get("allocation"):
            raise ValueError(f"claim {ref.namespace}/{ref.name} is not allocated")
        return claim

    @staticmethod
    def _left(deadline: float | None) -> float | None:
        """Seconds to kubelet's ``deadline`` (None: it set none); TimeoutError once passed."""
        if deadline is None:
            return None
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("kubelet's deadline passed before the claim was read")
        return left

    def _get(self, path: str, deadline: float | None) -> bytes:
        """GET ``path``, over by kubelet's ``deadline`` when it set one (sent once then)."""
        assert self._api_client is not None
        left = self._left(deadline)
        if left is None:
            return get_json(self._api_client, path)
        timeout = (min(REQUEST_TIMEOUT[0], left), min(REQUEST_TIMEOUT[1], left))
        data: bytes = request(self._api_client, "GET", path, timeout=timeout, total=left).data
        return data

    def prepare(
        self, refs: Sequence[ClaimRef], deadline: float | None = None
    ) -> dict[str, PrepareResult]:
        """Fetch and check the claims, then the driver's callback for those that passed.

        ``deadline`` (``time.monotonic()``): kubelet's for this call. The claim reads, the
        wait for the lock and a coroutine callback end by then (Go's helper passes the
        call's context to all three); a plain callback cannot be interrupted.
        """
        results: dict[str, PrepareResult] = {}
        claims: list[ResourceClaim] = []
        for ref in refs:
            try:
                claims.append(self._fetch_claim(ref, deadline))
            except Exception as exc:
                results[ref.uid] = PrepareResult(error=exc)
        if claims:
            uids = [claim["metadata"]["uid"] for claim in claims]
            got: Mapping[str, PrepareResult]
            try:
                with self._serializer.hold(deadline):
                    if self.checkpoint is not None:
                        got = self.checkpoint.prepare(claims, deadline)
                    else:
                        callback = self._claims_plugin.prepare_resource_claims(claims)
                        got = self._loop.resolve(callback, deadline)
            except Exception as exc:
                self._error_handler(exc, "prepare_resource_claims failed")
                got = {uid: PrepareResult(error=exc) for uid in uids}
            for uid in uids:
                results[uid] = got.get(uid) or PrepareResult(
                    error="the driver returned no result for this claim"
                )
        return results

    def unprepare(self, refs: Sequence[ClaimRef], deadline: float | None = None) -> dict[str, str]:
        """The driver's callback; per claim UID the error text, empty when unprepared.
        ``deadline``: as :meth:`prepare`'s."""
        if not refs:
            return {}
        try:
            with self._serializer.hold(deadline):
                if self.checkpoint is not None:
                    got = self.checkpoint.unprepare(refs, deadline)
                else:
                    callback = self._claims_plugin.unprepare_resource_claims(list(refs))
                    got = self._loop.resolve(callback, deadline)
        except Exception as exc:
            self._error_handler(exc, "unprepare_resource_claims failed")
            got = {ref.uid: exc for ref in refs}
        results = {}
        for ref in refs:
            if ref.uid not in got:
                results[ref.uid] = "the driver returned no result for this claim"
            else:
                error = got[ref.uid]
                results[ref.uid] = "" if error is None else error_text(error)
        return results

    def offers_health(self) -> bool:
        return callable(getattr(self._plugin, "watch_health", None))

    def health_reports(self) -> Iteration[Sequence[DeviceHealth]]:
        """The plugin's health reports, for one stream to kubelet."""
        return Iteration(self._loop, cast(HealthReporter, self._plugin).watch_health())

    def report_error(self, exc: BaseException, message: str) -> None:
        self._error_handler(exc, message)

    def set_registration_status(self, status: pluginregistration_v1_pb2.RegistrationStatus) -> None:
        self.registration_status = status
        if status.plugin_registered:
            log.info("kubelet registered the plugin of %s", self.driver)
            self._registered.set()
        else:
            self._registered.clear()
            self._error_handler(
                RuntimeError(status.error), "kubelet refused the plugin's registration"
            )


def _add(add_servicer: Any, servicer: object, server: grpc.Server) -> None:
    """Call a generated ``add_*Servicer_to_server`` (generated untyped)."""
    add_servicer(servicer, server)


def _log_error(exc: BaseException, message: str) -> None:
    log.error("%s: %s", message, exc, exc_info=exc)


def start(
    plugin: Plugin,
    *,
    driver: str,
    api_client: Client,
    node_name: str = "",
    node_uid: str = "",
    registrar_dir: str = KUBELET_REGISTRY_DIR,
    registrar_socket: str | None = None,
    plugin_data_dir: str | None = None,
    plugin_socket: str | None = None,
    rolling_update_uid: str | None = None,
    serialize: bool = True,
    lock_dir: str | None = None,
    node_v1: bool = True,
    node_v1beta1: bool = True,
    health: bool | None = None,
    loop: asyncio.AbstractEventLoop | None = None,
    error_handler: ErrorHandler | None = None,
    reconcile_pool_with_name: str | None = None,
    max_workers: int = 4,
    checkpoint: bool = True,
    device_metadata: Sequence[str] | None = None,
    cdi_dir: str = DEFAULT_CDI_DIR,
    interceptors: Sequence[Interceptor] = (),
    stream_interceptors: Sequence[InterceptorFunction] = (),
) -> Helper:
    """Serve ``plugin`` to kubelet and register it; returns the running :class:`Helper`.

    ``driver``: a DNS subdomain in lower case (ValueError otherwise): it names the paths.
    ``api_client``: reads the claims kubelet names, and publishes (``publish_resources``).
    ``node_name`` (and optionally ``node_uid``): the node, owner of the published slices.

    Sockets: registration at ``<registrar_dir>/<driver>-reg.sock``, the DRA service at
    ``<plugin_data_dir>/dra.sock``, with ``plugin_data_dir`` by default
    ``/var/lib/kubelet/plugins/<driver>`` (kubelet's defaults; names can be overridden). A
    stale socket at either path is replaced, anything else there is a FileExistsError; at
    stop, a path is removed only while it is still this instance's socket
    (:mod:`~resourceslice.kubeletplugin.sockets`).

    ``rolling_update_uid``: the pod's UID (downward API). Then the sockets carry it, so the
    old and new pod of a DaemonSet's rolling update can both be registered (kubelet calls the
    newest one connected), and calls are serialised across them through a lock file in
    ``lock_dir`` (default: the plugin data directory, which both pods mount).
    ``serialize``: one prepare or unprepare at a time (the default, as Go's helper).

    ``node_v1`` / ``node_v1beta1``: which versions of the DRA service to offer (kubelet 1.34+
    speaks v1, 1.32-1.33 only v1beta1). ``health``: offer the health service; by default when
    ``plugin`` has ``watch_health``.

    ``loop``: the event loop for coroutine callbacks: by default the running loop when
    called in a coroutine (then prefer ``async with``, whose exit stops the helper without
    blocking that loop), else a thread with a loop of its own (see the package doc for which
    thread runs what).
    ``error_handler(exc, message)``: failed callbacks, registration refused, the controller's
    errors (default: logged). ``max_workers``: gRPC threads per socket, so calls served at once
    (an open health stream holds one).

    ``checkpoint``: record each prepared claim in ``<plugin_data_dir>/resourceslice-checkpoint
    .json``, answer a repeated prepare from it, hand unprepare the record, and reconcile at
    start (:mod:`~resourceslice.kubeletplugin.prepared`); False for a driver that keeps its
    own. It needs ``serialize``.

    ``device_metadata``: the metadata versions to write (``[kubeletplugin.METADATA_V1BETA1]``,
    the newest named explicitly, as Go's ``EnableDeviceMetadata`` wants it; older ones after
    it for readers not updated): then each prepared claim's requests get a metadata file
    mounted into their containers, through a CDI spec in ``cdi_dir``
    (:mod:`~resourceslice.kubeletplugin.metadata`; Go's ``CDIDirectory``, used for nothing
    else: the driver's own specs go where its :class:`CDISpecWriter` writes them).
    ``helper.update_request_metadata`` completes a file later.

    ``interceptors``, ``stream_interceptors``: around every call kubelet makes, on both
    sockets, as Go's ``GRPCInterceptor`` / ``GRPCStreamInterceptor``: functions
    ``f(request, context, method, handler)``, or ``grpc.ServerInterceptor`` objects
    (:mod:`~resourceslice.kubeletplugin.interceptors`).
    """
    if api_client is None:
        # As Go's helper refuses to start without a client: claims are read with it.
        raise ValueError("api_client must be given: kubelet's claims are read with it")
    # First: every default path below is made of the name.
    check_driver_name(driver)
    if rolling_update_uid and registrar_socket:
        raise ValueError("rolling_update_uid and registrar_socket exclude each other")
    if checkpoint and not serialize:
        # A record is read, the driver called and the record written as one step.
        raise ValueError("the checkpoint needs serialize=True (or checkpoint=False)")
    if registrar_socket is None:
        registrar_socket = (
            rolling_update_registrar_socket(registrar_dir, driver, rolling_update_uid)
            if rolling_update_uid
            else f"{driver}-reg.sock"
        )
    if plugin_data_dir is None:
        plugin_data_dir = os.path.join(KUBELET_PLUGINS_DIR, driver)
    if plugin_socket is None:
        # The directory is the driver's: "dra" with the instance's UID is unique.
        plugin_socket = f"dra-{rolling_update_uid}.sock" if rolling_update_uid else "dra.sock"
    services = []
    if node_v1:
        services.append(DRA_V1)
    if node_v1beta1:
        services.append(DRA_V1BETA1)
    if not services:
        raise ValueError("node_v1 and node_v1beta1 are both off: no DRA service to offer")
    if health is None:
        health = callable(getattr(plugin, "watch_health", None))
    # Offered without watch_health, the service answers Unimplemented, and kubelet stops
    # asking.
    if health:
        services += [HEALTH_V1, HEALTH_V1ALPHA1]
    if loop is None:
        # Started in a coroutine (``async with kubeletplugin.start(...)``): coroutine callbacks
        # run on that loop, where the driver's own loop-bound objects (locks, queues, clients)
        # work; a private loop would fail them.
        with contextlib.suppress(RuntimeError):
            loop = asyncio.get_running_loop()
    chain = server_interceptors(interceptors, stream_interceptors)
    metadata = None
    if device_metadata is not None:
        metadata = MetadataWriter(
            driver, plugin_data_dir=plugin_data_dir, cdi_dir=cdi_dir, versions=device_metadata
        )
    lock_file = None
    if rolling_update_uid:
        lock_file = Path(lock_dir or plugin_data_dir) / "serialize.lock"
    helper = Helper(
        plugin,
        driver=driver,
        api_client=api_client,
        node_name=node_name,
        node_uid=node_uid,
        registrar_dir=registrar_dir,
        registrar_socket=registrar_socket,
        plugin_data_dir=plugin_data_dir,
        plugin_socket=plugin_socket,
        lock_file=lock_file,
        serialize=serialize,
        services=services,
        loop=loop,
        error_handler=error_handler,
        reconcile_pool_with_name=reconcile_pool_with_name,
        max_workers=max_workers,
        checkpoint=checkpoint,
        metadata=metadata,
        interceptors=chain,
    )
    try:
        helper._start()
    except BaseException:
        helper.stop()
        raise
    return helper


__all__ = ["Helper", "start"]
