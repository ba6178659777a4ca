"""Sysfs trees for tests, and Go's own answers about them.

:class:`SysfsTree` makes, in a directory of the test's, the sysfs entries that
:mod:`resourceslice.deviceattribute` (and a driver's own discovery code) reads: PCI devices in
the hardware hierarchy with the ``bus/pci/devices`` symlinks real sysfs has, NUMA nodes and
CPUs::

    tree = SysfsTree(tmp_path)
    tree.pci_device("0000:3b:00.0", parents=["0000:3a:00.0"], numa_node=1)  # behind a bridge
    deviceattribute.pcie_root_attribute("0000:3b:00.0", sysfs=tmp_path)  # ... "pci0000:3a"

:func:`go_device_attributes` asks Go's ``k8s.io/dynamic-resource-allocation/deviceattribute``
(``deviceattrs/``, a Go module pinned to its v0.37.2) the same questions about a tree, the
oracle this package's helpers are tested against. It is built once per machine like the test
apiserver (Go needed; ``RESOURCESLICE_DEVICEATTRS_BIN`` names a prebuilt one).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from resourceslice.testing.cluster import ClusterError, ask_go_program, build_go_binary

_PACKAGE_DIR = Path(__file__).resolve().parent


def build_deviceattrs(*, quiet: bool = False) -> Path:
    """The Go oracle's binary (``deviceattrs/``), built once per machine (cached as the test
    apiserver)."""
    prebuilt = os.environ.get("RESOURCESLICE_DEVICEATTRS_BIN")
    if prebuilt:
        if not os.access(prebuilt, os.X_OK):
            raise ClusterError(f"RESOURCESLICE_DEVICEATTRS_BIN={prebuilt} is not executable")
        return Path(prebuilt)
    return build_go_binary(
        _PACKAGE_DIR / "deviceattrs",
        binary="deviceattrs",
        cache_name="deviceattrs",
        what="the deviceattribute oracle (Go's k8s.io/dynamic-resource-allocation/deviceattribute)",
        quiet=quiet,
    )


def go_device_attributes(
    sysfs: str | os.PathLike[str] | None,
    *,
    pci: Iterable[str] = (),
    numa_nodes: Iterable[int] = (),
    cpus: Iterable[int] = (),
) -> dict[str, Any]:
    """What Go's ``deviceattribute`` answers about the tree at ``sysfs`` (``None``: its default,
    ``/sys``), in the order asked::

        {"pci": [{"pciBusID": R, "pcieRoot": R, "numaNode": R, "numaNodeList": R}, ...],
         "numaNodes": [{"scalar": R, "list": R}, ...],         # GetNUMANodeAttribute
         "cpus": [{"node": 0} or {"error": "..."}, ...]}       # GetNUMANodeForCPU

    where ``R`` is ``{"attribute": {name: value}}`` (the value as REST JSON) or ``{"error":
    "..."}``. ``numaNode`` is ``GetNUMANodeAttributeByPCIBusID`` in the scalar form,
    ``numaNodeList`` in the list form.
    """
    request = {
        "sysfs": "" if sysfs is None else os.fspath(sysfs),
        "pci": list(pci),
        "numaNodes": list(numa_nodes),
        "cpus": list(cpus),
    }
    return ask_go_program(build_deviceattrs(), request)


class SysfsTree:
    """Sysfs entries under ``root``, made as the kernel lays them out (each method returns the
    directory or file it made; what exists already is kept)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def pci_device(
        self,
        address: str,
        *,
        parents: Sequence[str] = (),
        root_complex: str | None = None,
        numa_node: int | str | bytes | None = -1,
    ) -> Path:
        """The device ``address``: ``devices/<root_complex>/<parents...>/<address>/`` and the
        symlink ``bus/pci/devices/<address>`` to it (relative, as the kernel's).

        ``parents``: the bridges above it, topmost first (directories only: make a bridge a
        device of its own by calling this for it too). ``root_complex`` defaults to
        ``pci<domain>:<bus>`` of the topmost. ``numa_node``: what its ``numa_node`` file
        holds (str or bytes as they are, an int with a newline), none if ``None``.
        """
        top = parents[0] if parents else address
        complex_dir = root_complex if root_complex is not None else f"pci{top[:7]}"
        device_dir = self.root / "devices" / complex_dir
        for parent in parents:
            device_dir /= parent
        device_dir /= address
        device_dir.mkdir(parents=True, exist_ok=True)
        if numa_node is not None:
            _write(device_dir / "numa_node", numa_node)
        self.pci_link(address, os.path.relpath(device_dir, self.root / "bus/pci/devices"))
        return device_dir

    def pci_link(self, address: str, target: str) -> Path:
        """``bus/pci/devices/<address>``, a symlink to ``target`` as given (for links that
        real sysfs does not make)."""
        link = self.root / "bus/pci/devices" / address
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink():
            link.unlink()
        link.symlink_to(target)
        return link

    def numa_node(
        self,
        node: int,
        *,
        distances: Sequence[int] | str | bytes | None = None,
        cpus: Iterable[int] | str | bytes | None = None,
    ) -> Path:
        """``devices/system/node/node<node>/``, with its SLIT row ``distance`` (str or bytes
        as they are; numbers space-separated) and ``cpulist`` (str or bytes as they are;
        numbers as the kernel's list of ranges, each CPU given its ``cpu<N>/node<node>``
        link) when given."""
        node_dir = self.root / "devices/system/node" / f"node{node}"
        node_dir.mkdir(parents=True, exist_ok=True)
        if isinstance(distances, (str, bytes)):
            _write(node_dir / "distance", distances)
        elif distances is not None:
            _write(node_dir / "distance", " ".join(map(str, distances)) + "\n")
        if isinstance(cpus, (str, bytes)):
            _write(node_dir / "cpulist", cpus)
        elif cpus is not None:
            listed = sorted(set(cpus))
            _write(node_dir / "cpulist", _cpulist(listed) + "\n")
            for cpu in listed:
                self.cpu(cpu, node=node)
        return node_dir

    def cpu(
        self, cpu: int, *, node: int | None = None, package: int | str | bytes | None = None
    ) -> Path:
        """``devices/system/cpu/cpu<cpu>/``, with the link ``node<node>`` to its node's
        directory and ``topology/physical_package_id`` (its socket; str or bytes as they
        are) when given."""
        cpu_dir = self.root / "devices/system/cpu" / f"cpu{cpu}"
        cpu_dir.mkdir(parents=True, exist_ok=True)
        if node is not None:
            link = cpu_dir / f"node{node}"
            if not link.is_symlink():
                link.symlink_to(f"../../node/node{node}")
        if package is not None:
            (cpu_dir / "topology").mkdir(exist_ok=True)
            _write(cpu_dir / "topology/physical_package_id", package)
        return cpu_dir


def _write(path: Path, value: int | str | bytes) -> None:
    """bytes as they are, a str in UTF-8, an int as the kernel writes one (a line)."""
    if isinstance(value, int):
        value = f"{value}\n"
    path.write_bytes(value if isinstance(value, bytes) else value.encode())


def _cpulist(cpus: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` as the kernel writes it: ``0-2,5``."""
    ranges: list[str] = []
    start = previous = None
    for cpu in [*cpus, None]:
        if previous is not None and cpu == previous + 1:
            previous = cpu
            continue
        if start is not None:
            ranges.append(str(start) if start == previous else f"{start}-{previous}")
        start = previous = cpu
    return ",".join(ranges)
