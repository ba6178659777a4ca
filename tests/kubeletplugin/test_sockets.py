"""The kubelet plugin's sockets and paths on a hostile node: what is at a socket path and is
not a socket, another instance's socket, a driver name that would leave its directories.

No kubelet is needed: the sockets are looked at on disk, and asked over gRPC.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import grpc
import kubernetes.client
import pytest

from resourceslice import kubeletplugin
from resourceslice.kubeletplugin._pb import (
    pluginregistration_v1_pb2,
    pluginregistration_v1_pb2_grpc,
)

DRIVER = "gpu.example.com"


class Dirs:
    """A node's directories under a short /tmp path (a socket path has at most 107 bytes)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.registry = root / "registry"
        self.data = root / "data"
        self.registry.mkdir()

    def start(self, driver: str = DRIVER) -> kubeletplugin.Helper:
        with kubernetes.client.ApiClient() as client:  # never called: no claim is prepared
            return kubeletplugin.start(
                object(),  # type: ignore[arg-type]
                driver=driver,
                api_client=client,
                registrar_dir=str(self.registry),
                plugin_data_dir=str(self.data),
            )

    def socket(self, which: str, driver: str = DRIVER) -> Path:
        if which == "registration":
            return self.registry / f"{driver}-reg.sock"
        return self.data / "dra.sock"

    def files(self) -> list[str]:
        return sorted(str(p.relative_to(self.root)) for p in self.root.rglob("*"))


@pytest.fixture
def dirs(node_dir: Path) -> Iterator[Dirs]:
    yield Dirs(node_dir)


def registered_name(path: Path) -> str:
    """The driver name the registration socket at ``path`` answers (GetInfo)."""
    with grpc.insecure_channel(f"unix://{path}") as channel:
        stub = pluginregistration_v1_pb2_grpc.RegistrationStub(channel)
        info = stub.GetInfo(pluginregistration_v1_pb2.InfoRequest(), timeout=30)
    return str(info.name)


def serving(path: Path) -> bool:
    with grpc.insecure_channel(f"unix://{path}") as channel:
        grpc.channel_ready_future(channel).result(timeout=30)
    return True


def inode(path: Path) -> tuple[int, int]:
    st = os.lstat(path)
    return st.st_dev, st.st_ino


@pytest.mark.parametrize("which", ["registration", "plugin"])
def test_a_regular_file_at_a_socket_path_is_left_alone(dirs: Dirs, which: str) -> None:
    path = dirs.socket(which)
    path.parent.mkdir(exist_ok=True)
    path.write_text("somebody's data\n")
    with pytest.raises(FileExistsError, match=f"{path} exists and is not a socket"):
        dirs.start()
    assert path.read_text() == "somebody's data\n"


@pytest.mark.parametrize("which", ["registration", "plugin"])
def test_a_symlink_at_a_socket_path_is_left_alone(dirs: Dirs, which: str) -> None:
    """Not followed, not removed: whoever put it there meant something by it."""
    target = dirs.root / "target"
    target.write_text("the target\n")
    path = dirs.socket(which)
    path.parent.mkdir(exist_ok=True)
    path.symlink_to(target)
    with pytest.raises(FileExistsError, match=f"{path} exists and is not a socket"):
        dirs.start()
    assert path.is_symlink() and os.readlink(path) == str(target)
    assert target.read_text() == "the target\n"


def test_a_stale_socket_is_replaced(dirs: Dirs) -> None:
    """A crashed instance's sockets are in the way of a restart: they are taken over."""
    dirs.data.mkdir()
    for which in ("registration", "plugin"):
        # What a crash leaves: a socket nobody listens on any more.
        with socket.socket(socket.AF_UNIX) as left:
            left.bind(str(dirs.socket(which)))
    helper = dirs.start()
    try:
        assert registered_name(dirs.socket("registration")) == DRIVER
        assert serving(dirs.socket("plugin"))
    finally:
        helper.stop()
    assert dirs.files() == ["data", "registry"]


def test_stop_leaves_a_socket_another_instance_bound_since(dirs: Dirs) -> None:
    """A DaemonSet rollout without rolling_update_uid: the new pod binds the same paths while
    the old one still runs; the old pod's stop must not unregister the new pod's driver."""
    old = dirs.start()
    new = dirs.start()
    try:
        bound = {which: inode(dirs.socket(which)) for which in ("registration", "plugin")}
        old.stop()
        for which, ident in bound.items():
            assert inode(dirs.socket(which)) == ident, f"the new instance's {which} socket"
        assert registered_name(dirs.socket("registration")) == DRIVER
        assert serving(dirs.socket("plugin"))
    finally:
        new.stop()
    # The new instance's own stop removes them.
    assert dirs.files() == ["data", "registry"]


BAD_DRIVERS = [
    "/etc",
    "../x",
    "UPPER",
    "",
    "gpu..example.com",
    "gpu.example.com-",
    "_gpu",
    "a" * 64,
]


@pytest.mark.parametrize("driver", BAD_DRIVERS)
def test_start_refuses_a_driver_name_that_is_no_dns_subdomain(dirs: Dirs, driver: str) -> None:
    """Refused before any path is built from it: '/etc' would put the sockets into /etc,
    '../x' next to kubelet's directories."""
    with pytest.raises(
        ValueError, match=re.escape(f"driver name {driver!r} is not a DNS subdomain")
    ):
        helper = dirs.start(driver)
        helper.stop()  # only reached when the name was taken: leave nothing behind
    assert dirs.files() == ["registry"]
    assert not os.path.lexists(dirs.socket("registration", driver))


@pytest.mark.parametrize("driver", BAD_DRIVERS)
def test_cdi_spec_writer_refuses_a_driver_name_that_is_no_dns_subdomain(
    tmp_path: Path, driver: str
) -> None:
    with pytest.raises(
        ValueError, match=re.escape(f"driver name {driver!r} is not a DNS subdomain")
    ):
        kubeletplugin.CDISpecWriter(driver, cdi_dir=tmp_path / "cdi")
    assert list(tmp_path.iterdir()) == []
