"""Kubernetes' standard device attributes of a PCI device, read from sysfs.

The counterpart of Go's ``k8s.io/dynamic-resource-allocation/deviceattribute`` (v0.37.2): the
same attribute names, values and errors, read from the same sysfs entries. Each helper returns
the attribute as a one-entry dict in the REST shape of a device's ``attributes``, ready to
merge into it::

    from resourceslice import deviceattribute

    device = {"name": "gpu-0", "attributes": {
        **deviceattribute.pci_device_attributes("0000:3b:00.0"),  # pciBusID, pcieRoot, numaNode
        "model": {"string": "H100"},
    }}

Go's functions and options, and theirs here:

- ``GetPCIBusIDAttribute``: :func:`pci_bus_id_attribute`
- ``GetPCIeRootAttributeByPCIBusID``: :func:`pcie_root_attribute`
- ``GetNUMANodeAttributeByPCIBusID``: :func:`pci_numa_node_attribute`
- ``GetNUMANodeAttribute``: :func:`numa_node_attribute`
- ``GetNUMANodeForCPU``: :func:`numa_node_of_cpu`
- (none): :func:`pci_device_attributes`, the first three together
- ``WithFSFromRoot(root)``: ``sysfs=root``; ``ScalarAttribute`` / ``ListAttribute``:
  ``form="scalar"`` (the default) / ``form="list"``

A PCI bus ID is the extended BDF notation ``<domain>:<bus>:<device>.<function>`` in lower-case
hex, as sysfs names devices (``0000:3b:00.0``); anything else is a ``ValueError``. A sysfs
entry that is missing or malformed raises :class:`SysfsError`, whose ``path`` (and message)
names it under the configured root. A device whose ``numa_node`` is ``-1`` (no NUMA affinity:
many single-node machines and VMs say so of every device) raises
:class:`NoNUMAAffinityError`: such a device must publish no ``numaNode`` attribute, because
``-1`` would match every other NUMA-less device under ``matchAttribute``;
:func:`pci_device_attributes` leaves it out.

Where this differs from Go: the list form of ``numaNode`` takes a NUMA node's socket from its
lowest CPU, where Go takes any one of them (a map's order); the two agree whenever a node's
CPUs are on one socket, as on real machines. Errors name the whole path (most of Go's name it
relative to the sysfs root); their text up to the first ``": "`` is Go's. Go's types are
checked here at run time (``TypeError``).
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import re
from typing import Literal, Union

from resourceslice.api import ResourceSliceError
from resourceslice.types import DeviceAttribute

__all__ = [
    "NUMA_NODE",
    "PCIE_ROOT",
    "PCI_BUS_ID",
    "STANDARD_PREFIX",
    "SYSFS_ROOT",
    "AttributeForm",
    "NoNUMAAffinityError",
    "SysfsError",
    "numa_node_attribute",
    "numa_node_of_cpu",
    "pci_bus_id_attribute",
    "pci_device_attributes",
    "pci_numa_node_attribute",
    "pcie_root_attribute",
]

#: The prefix of the standard device attributes (Go's ``StandardDeviceAttributePrefix``).
STANDARD_PREFIX = "resource.kubernetes.io/"
#: The PCIe Root Complex of a PCIe device: a string ``pci<domain>:<bus>``; devices with the same
#: value share a root complex.
PCIE_ROOT = STANDARD_PREFIX + "pcieRoot"
#: The PCI bus address of a PCI device: a string in extended BDF notation, ``0000:3b:00.0``.
PCI_BUS_ID = STANDARD_PREFIX + "pciBusID"
#: The NUMA node of a device: an int (its node), or, in the list form, which needs the
#: ``DRAListTypeAttributes`` feature gate in the cluster, an int list: its node first, then
#: the nodes of the same socket at the least ACPI SLIT distance from it.
NUMA_NODE = STANDARD_PREFIX + "numaNode"
#: Where sysfs is mounted, unless ``sysfs=`` says otherwise (a test tree, a container's mount).
SYSFS_ROOT = "/sys"

#: ``"scalar"``: ``{"int": node}``, which every cluster takes. ``"list"``: ``{"ints": [node,
#: ...]}``, which needs ``DRAListTypeAttributes`` enabled in the cluster (an apiserver without
#: it drops the value and rejects the device). The driver cannot tell which the cluster has:
#: its operator says so.
AttributeForm = Literal["scalar", "list"]

SysfsPath = Union[str, "os.PathLike[str]"]

# Linux's MAX_NUMNODES bound, as Go's maxNUMANodes: node IDs are below it.
_MAX_NUMA_NODES = 1024
_BDF = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]")
# Go's unicode.IsSpace, which its strings.TrimSpace and strings.Fields use (Python's
# str.isspace() takes more: \x1c-\x1f).
_GO_SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
_GO_FIELD_SEPARATORS = re.compile(f"[{re.escape(_GO_SPACE)}]+")
_GO_INT = re.compile(r"[+-]?[0-9]+")
_INT64 = range(-(2**63), 2**63)
_NODE_ENTRY = re.compile(rb"node[0-9].*", re.DOTALL)


class SysfsError(OSError, ResourceSliceError):
    """A sysfs entry is missing, unreadable or malformed; ``path`` names it (under the sysfs
    root given), as does the message. An ``OSError``; what the system raised, if anything, is
    its ``__cause__``."""

    def __init__(self, message: str, path: str) -> None:
        super().__init__(message)
        self.path = path

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (str(self), self.path))


class NoNUMAAffinityError(ValueError, ResourceSliceError):
    """The device has no NUMA affinity (sysfs says ``numa_node`` ``-1``), or a node below 0 was
    given: publish no ``numaNode`` attribute for it. ``path`` is the ``numa_node`` file read,
    if any."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (str(self), self.path))


def pci_bus_id_attribute(pci_bus_id: str) -> dict[str, DeviceAttribute]:
    """``{"resource.kubernetes.io/pciBusID": {"string": pci_bus_id}}``; reads nothing.

    ``ValueError`` if ``pci_bus_id`` is not in extended BDF notation (``0000:3b:00.0``).
    """
    _check_pci_bus_id(pci_bus_id)
    return {PCI_BUS_ID: {"string": pci_bus_id}}


def pcie_root_attribute(
    pci_bus_id: str, *, sysfs: SysfsPath = SYSFS_ROOT
) -> dict[str, DeviceAttribute]:
    """``{"resource.kubernetes.io/pcieRoot": {"string": "pci<domain>:<bus>"}}``: the PCIe Root
    Complex of the device, from where sysfs places it.

    ``<sysfs>/bus/pci/devices/<pci_bus_id>`` is a symlink to the device's directory in the
    hardware hierarchy, ``<sysfs>/devices/pci<domain>:<bus>/<bridges...>/<pci_bus_id>``; its
    first directory under ``devices/`` is the root. As Go: the link is read, not followed, and
    its target must be relative (real sysfs makes them so). ``SysfsError`` if the link is missing
    or points elsewhere than to ``devices/pci*/.../<pci_bus_id>``, as on a Hyper-V VM, where a
    bus comes between ``devices/`` and the root complex (Go's v0.37.2 fails there too);
    ``ValueError`` for a malformed ``pci_bus_id``.
    """
    _check_pci_bus_id(pci_bus_id)
    root = _root(sysfs)
    what = f"failed to resolve PCIe Root Complex for PCI Bus ID {pci_bus_id}"
    link_dir = "bus/pci/devices"
    link = os.path.join(root, link_dir, pci_bus_id)
    try:
        target = os.readlink(link)
    except OSError as exc:
        raise SysfsError(f"{what}: cannot read the symlink {link}: {_reason(exc)}", link) from exc
    # Relative to the link's directory, within the sysfs root (Go's filepath.Clean of the
    # join); an absolute target is taken as it is, and so fails the test below.
    resolved = target if target.startswith("/") else posixpath.normpath(f"{link_dir}/{target}")
    if not resolved.startswith("devices/pci"):
        raise SysfsError(
            f"{what}: the symlink {link} points to {target!r}, not into "
            f"{os.path.join(root, 'devices')}/pci*",
            link,
        )
    if posixpath.basename(resolved) != pci_bus_id:
        raise SysfsError(
            f"{what}: the symlink {link} points to {target!r}, another device than {pci_bus_id}",
            link,
        )
    return {PCIE_ROOT: {"string": resolved[len("devices/") :].split("/")[0]}}


def pci_numa_node_attribute(
    pci_bus_id: str, *, form: AttributeForm = "scalar", sysfs: SysfsPath = SYSFS_ROOT
) -> dict[str, DeviceAttribute]:
    """``{"resource.kubernetes.io/numaNode": {"int": node}}`` (or ``{"ints": [node, ...]}``
    with ``form="list"``: see :data:`AttributeForm`), ``node`` being what
    ``<sysfs>/bus/pci/devices/<pci_bus_id>/numa_node`` holds.

    :class:`NoNUMAAffinityError` if it holds a negative number (``-1``: no NUMA affinity);
    ``SysfsError`` if it is missing or not an integer; ``ValueError`` for a malformed
    ``pci_bus_id``. The list form adds the nodes the SLIT distances of
    ``devices/system/node/node<N>/distance`` put nearest (each on the same socket, as the
    ``physical_package_id`` of a CPU of its ``cpulist`` says, where both are known); when
    those files are missing or malformed it is ``[node]``, as in Go.
    """
    _check_form(form)
    _check_pci_bus_id(pci_bus_id)
    root = _root(sysfs)
    path = os.path.join(root, "bus/pci/devices", pci_bus_id, "numa_node")
    what = f"failed to read NUMA node for PCI Bus ID {pci_bus_id}"
    node = _read_int(path, what)
    if node < 0:
        raise NoNUMAAffinityError(
            f"PCI device {pci_bus_id} has no NUMA affinity (numa_node={node}); "
            f"do not publish the numaNode attribute for it ({path})",
            path,
        )
    return _numa_node_value(node, form, root)


def numa_node_attribute(
    numa_node: int, *, form: AttributeForm = "scalar", sysfs: SysfsPath = SYSFS_ROOT
) -> dict[str, DeviceAttribute]:
    """The ``numaNode`` attribute of a device that knows its node (a CPU, memory): ``{"int":
    numa_node}``, or with ``form="list"`` the list :func:`pci_numa_node_attribute` makes
    (reading sysfs for it; the scalar form reads nothing).

    :class:`NoNUMAAffinityError` for a negative node; ``ValueError`` for one of 1024 or more.
    """
    _check_form(form)
    if isinstance(numa_node, bool) or not isinstance(numa_node, int):
        raise TypeError(f"numa_node must be an int, not {type(numa_node).__name__}")
    if numa_node < 0:
        raise NoNUMAAffinityError(
            f"invalid NUMA node {numa_node}: do not publish the numaNode attribute for a "
            "device with no NUMA affinity"
        )
    if numa_node >= _MAX_NUMA_NODES:
        raise ValueError(
            f"invalid NUMA node {numa_node}: exceeds maximum supported ({_MAX_NUMA_NODES - 1})"
        )
    if form == "scalar":
        return {NUMA_NODE: {"int": numa_node}}
    return _numa_node_value(numa_node, form, _root(sysfs))


def numa_node_of_cpu(cpu: int, *, sysfs: SysfsPath = SYSFS_ROOT) -> int:
    """The NUMA node of CPU ``cpu``: the ``N`` of the ``node<N>`` entry in
    ``<sysfs>/devices/system/cpu/cpu<cpu>/`` (the first in name order, as Go's glob).

    ``SysfsError`` if there is none (no such CPU, or a kernel without NUMA) or it is not
    ``node`` and a number.
    """
    if isinstance(cpu, bool) or not isinstance(cpu, int):
        raise TypeError(f"cpu must be an int, not {type(cpu).__name__}")
    cpu_dir = os.path.join(_root(sysfs), "devices/system/cpu", f"cpu{cpu}")
    try:
        names = sorted(os.fsencode(name) for name in os.listdir(cpu_dir))
    except OSError:  # as Go's fs.Glob: an unreadable directory has no matches
        names = []
    entries = [name for name in names if _NODE_ENTRY.fullmatch(name)]
    if not entries:
        raise SysfsError(
            f"CPU {cpu} not found in any NUMA node: no node<N> entry in {cpu_dir}", cpu_dir
        )
    entry = os.path.join(cpu_dir, os.fsdecode(entries[0]))
    node = _go_atoi(os.fsdecode(entries[0][len(b"node") :]))
    if node is None:
        raise SysfsError(
            f"failed to parse NUMA node number from {os.fsdecode(entries[0])}: "
            f"{entry} is not node<N>",
            entry,
        )
    return node


def pci_device_attributes(
    pci_bus_id: str,
    *,
    numa: AttributeForm | None = "scalar",
    sysfs: SysfsPath = SYSFS_ROOT,
) -> dict[str, DeviceAttribute]:
    """Every standard attribute of a PCI device: ``pciBusID``, ``pcieRoot`` and, unless the
    device has no NUMA affinity (or ``numa=None``), ``numaNode`` in the form ``numa`` names.

    Go has no such helper; it is the three above, with :class:`NoNUMAAffinityError` taken as
    "no ``numaNode``" (as Go's documentation tells drivers to). Any other error of theirs is
    raised: a driver that publishes a device without ``pcieRoot`` where it cannot be resolved
    (a Hyper-V VM) calls the helpers one at a time.
    """
    if numa is not None:
        _check_form(numa)
    attributes = {
        **pci_bus_id_attribute(pci_bus_id),
        **pcie_root_attribute(pci_bus_id, sysfs=sysfs),
    }
    if numa is not None:
        with contextlib.suppress(NoNUMAAffinityError):
            attributes.update(pci_numa_node_attribute(pci_bus_id, form=numa, sysfs=sysfs))
    return attributes


def _check_pci_bus_id(pci_bus_id: str) -> None:
    if not isinstance(pci_bus_id, str):
        raise TypeError(f"a PCI Bus ID must be a str, not {type(pci_bus_id).__name__}")
    if pci_bus_id == "":
        raise ValueError("PCI Bus ID cannot be empty")
    if not _BDF.fullmatch(pci_bus_id):
        raise ValueError(
            f"invalid PCI Bus ID format: {pci_bus_id!r} (want <domain>:<bus>:<device>.<function>"
            " in lower-case hex, as 0000:3b:00.0)"
        )


def _check_form(form: str) -> None:
    if form not in ("scalar", "list"):
        raise ValueError(f"the form of numaNode is 'scalar' or 'list', not {form!r}")


def _root(sysfs: SysfsPath) -> str:
    root = os.fspath(sysfs)
    if not isinstance(root, str):
        raise TypeError(f"the sysfs root must be a str path, not {type(root).__name__}")
    if root == "":
        raise ValueError("the sysfs root cannot be empty (the default is /sys)")
    return root


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _go_trim_space(data: bytes) -> str:
    """Go's strings.TrimSpace of the bytes (bytes that are not UTF-8 are no space)."""
    return data.decode("utf-8", "surrogateescape").strip(_GO_SPACE)


def _go_atoi(text: str) -> int | None:
    """Go's strconv.Atoi (64-bit): an optional sign and decimal digits, no spaces or
    underscores, within int64; None where it fails."""
    if not _GO_INT.fullmatch(text):
        return None
    value = int(text)
    return value if value in _INT64 else None


def _read_sysfs_int(path: str) -> int | None:
    """Go's readSysfsInt: None if the file cannot be read or holds no integer."""
    try:
        with open(path, "rb") as file:
            data = file.read()
    except OSError:
        return None
    return _go_atoi(_go_trim_space(data))


def _read_int(path: str, what: str) -> int:
    try:
        with open(path, "rb") as file:
            data = file.read()
    except OSError as exc:
        raise SysfsError(f"{what}: cannot read {path}: {_reason(exc)}", path) from exc
    text = _go_trim_space(data)
    value = _go_atoi(text)
    if value is None:
        raise SysfsError(f"{what}: {path} holds {text!r}, not an integer", path)
    return value


def _numa_node_value(node: int, form: str, root: str) -> dict[str, DeviceAttribute]:
    if form == "scalar":
        return {NUMA_NODE: {"int": node}}
    nearest = _equidistant_numa_nodes(root, node)
    if nearest is None or len(nearest) <= 1:
        return {NUMA_NODE: {"ints": [node]}}
    return {NUMA_NODE: {"ints": [node, *(n for n in nearest if n != node)]}}


def _equidistant_numa_nodes(root: str, node: int) -> list[int] | None:
    """Go's getEquidistantNUMANodes: ``node`` and the nodes at the least distance from it in
    its SLIT row, less those known to be on another socket, in order; None where Go errs."""
    node_dir = os.path.join(root, "devices/system/node")
    try:
        with open(os.path.join(node_dir, f"node{node}", "distance"), "rb") as file:
            data = file.read()
    except OSError:
        return None
    fields = [f for f in _GO_FIELD_SEPARATORS.split(_go_trim_space(data)) if f]
    if not fields or node >= len(fields):
        return None
    distances = []
    for text in fields:
        distance = _go_atoi(text)
        if distance is None:
            return None
        distances.append(distance)
    # Go's search, with -1 as "none yet" (so a distance of -1 in the row is skipped over).
    least = -1
    for i, d in enumerate(distances):
        if i != node and (least == -1 or d < least):
            least = d
    if least == -1:
        return [node]
    socket = _socket_of_numa_node(node_dir, root, node)
    nodes = []
    for i, d in enumerate(distances):
        if i != node:
            if d != least:
                continue
            if socket is not None:
                # A candidate whose socket is unknown is kept, as in Go.
                other = _socket_of_numa_node(node_dir, root, i)
                if other is not None and other != socket:
                    continue
        nodes.append(i)
    return sorted(nodes)


def _socket_of_numa_node(node_dir: str, root: str, node: int) -> int | None:
    """The ``physical_package_id`` of the node's lowest CPU (Go's: of any one of its CPUs)."""
    try:
        with open(os.path.join(node_dir, f"node{node}", "cpulist"), "rb") as file:
            cpu = _lowest_cpu(_go_trim_space(file.read()))
    except OSError:
        return None
    if cpu is None:
        return None
    return _read_sysfs_int(
        os.path.join(root, "devices/system/cpu", f"cpu{cpu}", "topology/physical_package_id")
    )


def _lowest_cpu(cpulist: str) -> int | None:
    """The lowest CPU of a cpulist (``0-5,34,46-48``) as k8s.io/utils/cpuset.Parse reads it;
    None if it is empty or Parse fails."""
    if cpulist == "":
        return None
    lowest: int | None = None
    for part in cpulist.split(","):
        bounds = part.split("-", 1)
        start = _go_atoi(bounds[0])
        if start is None:
            return None
        if len(bounds) == 2:
            end = _go_atoi(bounds[1])
            if end is None or start > end:
                return None
        lowest = start if lowest is None else min(lowest, start)
    return lowest
