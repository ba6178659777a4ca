"""Registration with kubelet: where the sockets are, and the service kubelet calls there.

kubelet finds plugins by watching its plugin-registration directory: a plugin creates a Unix
socket there and serves ``pluginregistration.Registration`` on it. kubelet calls ``GetInfo``
(type ``DRAPlugin``, the driver name, the DRA service's socket, and the gRPC services offered:
``v1.DRAPlugin``, ``v1beta1.DRAPlugin``, optionally ``v1.DRAResourceHealth`` /
``v1alpha1.DRAResourceHealth``), picks the newest service it knows, and reports back through
``NotifyRegistrationStatus``. Removing the socket unregisters the plugin.
"""

from __future__ import annotations

import base64
import hashlib
import os
from typing import Protocol

import grpc

from resourceslice._names import MAX_DRIVER_LENGTH, is_driver_name
from resourceslice.kubeletplugin._pb import (
    pluginregistration_v1_pb2,
    pluginregistration_v1_pb2_grpc,
)

#: Where kubelet expects plugins to keep their sockets and data (one directory per driver).
KUBELET_PLUGINS_DIR = "/var/lib/kubelet/plugins"
#: The directory kubelet's plugin manager watches for registration sockets.
KUBELET_REGISTRY_DIR = "/var/lib/kubelet/plugins_registry"

#: The gRPC services, by the names kubelet knows them in ``supported_versions``.
DRA_V1 = "v1.DRAPlugin"
DRA_V1BETA1 = "v1beta1.DRAPlugin"
HEALTH_V1 = "v1.DRAResourceHealth"
HEALTH_V1ALPHA1 = "v1alpha1.DRAResourceHealth"

#: A Unix socket path is at most this long, its terminating NUL included (sun_path).
UNIX_PATH_MAX = 108


def check_driver_name(driver: str) -> None:
    """ValueError unless ``driver`` is a DNS subdomain in lower case, of at most 63 characters.

    The name goes into the sockets', the lock's and the CDI specs' paths: checked before
    any is built, "/etc" or "../x" can never reach one. The rule is the apiserver's for a
    driver name (this library's copy of it), but for upper case, which the apiserver only
    warns about: kubelet, the CDI runtime and the file system take a name as written, so a
    driver keeps one spelling everywhere.
    """
    if not (is_driver_name(driver) and driver == driver.lower()):
        raise ValueError(
            f"driver name {driver!r} is not a DNS subdomain in lower case of at most "
            f"{MAX_DRIVER_LENGTH} characters (letters, digits, '-' and '.'; a letter or "
            "digit at both ends of each dot-separated part)"
        )


def rolling_update_registrar_socket(registry_dir: str, driver: str, uid: str) -> str:
    """The registration socket's file name for the instance ``uid`` (its pod's UID).

    Two instances of a driver, old and new pod of a DaemonSet's rolling update, must not
    share a registration socket; kubelet keeps both registered and calls the newest that is
    connected. The readable name is used when the path fits a Unix socket, else shorter ones
    made of hashes, as Go's helper names them, so both helpers agree on a node.
    """
    uid_hash = hashlib.sha256(uid.encode()).digest()
    driver_uid_hash = hashlib.sha256(f"{driver}\0{uid}".encode()).digest()

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    candidates = [
        f"{driver}-{uid}-reg.sock",
        f"{driver}-{b64(uid_hash[:8])}-reg.sock",
        f"dra-{b64(driver_uid_hash[:16])}-reg.sock",
    ]
    for name in candidates:
        if len(os.path.join(registry_dir, name)) <= UNIX_PATH_MAX:
            return name
    return candidates[-1]


class Registered(Protocol):
    """What the registration service tells kubelet, and where it reports kubelet's answer."""

    driver: str
    plugin_socket_path: str
    services: tuple[str, ...]

    def set_registration_status(
        self, status: pluginregistration_v1_pb2.RegistrationStatus
    ) -> None: ...


class Registrar(pluginregistration_v1_pb2_grpc.RegistrationServicer):
    def __init__(self, helper: Registered) -> None:
        self._helper = helper

    def GetInfo(
        self, request: pluginregistration_v1_pb2.InfoRequest, context: grpc.ServicerContext
    ) -> pluginregistration_v1_pb2.PluginInfo:
        return pluginregistration_v1_pb2.PluginInfo(
            type="DRAPlugin",
            name=self._helper.driver,
            endpoint=self._helper.plugin_socket_path,
            # For DRA, the gRPC services offered, newest first (kubelet takes the first it knows).
            supported_versions=list(self._helper.services),
        )

    def NotifyRegistrationStatus(
        self,
        request: pluginregistration_v1_pb2.RegistrationStatus,
        context: grpc.ServicerContext,
    ) -> pluginregistration_v1_pb2.RegistrationStatusResponse:
        self._helper.set_registration_status(request)
        if not request.plugin_registered:
            # As Go's registration server: the refusal is recorded and answered with an
            # error, so kubelet's log shows the plugin took note of it.
            context.abort(grpc.StatusCode.UNKNOWN, f"failed registration process: {request.error}")
        return pluginregistration_v1_pb2.RegistrationStatusResponse()
