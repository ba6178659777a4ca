"""resourceslice.deviceattribute's own contract, beside what test_against_go.py checks against
Go: its argument checks, its errors, the helper of all three attributes, what it does where Go
leaves the answer to a map's order, and that its attributes are valid devices' attributes."""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import pytest

import resourceslice as rs
from resourceslice import deviceattribute as da
from resourceslice.testing import sysfs
from resourceslice.testing.sysfs import SysfsTree, _cpulist


def test_names() -> None:
    assert (da.PCIE_ROOT, da.PCI_BUS_ID, da.NUMA_NODE) == (
        "resource.kubernetes.io/pcieRoot",
        "resource.kubernetes.io/pciBusID",
        "resource.kubernetes.io/numaNode",
    )
    assert da.SYSFS_ROOT == "/sys"


def test_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="'scalar' or 'list', not 'ints'"):
        da.pci_numa_node_attribute("0000:00:00.0", form="ints", sysfs=tmp_path)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'scalar' or 'list'"):
        da.pci_device_attributes("0000:00:00.0", numa="int", sysfs=tmp_path)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be a str"):
        da.pci_bus_id_attribute(b"0000:00:00.0")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be an int"):
        da.numa_node_attribute(True)
    with pytest.raises(TypeError, match="must be an int"):
        da.numa_node_of_cpu("0", sysfs=tmp_path)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="sysfs root cannot be empty"):
        da.pcie_root_attribute("0000:00:00.0", sysfs="")
    with pytest.raises(ValueError, match=re.escape("invalid PCI Bus ID format: '0000:00:00.0 '")):
        da.pcie_root_attribute("0000:00:00.0 ", sysfs=tmp_path)


def test_sysfs_root_as_str_or_path(tmp_path: Path) -> None:
    SysfsTree(tmp_path).pci_device("0000:3b:00.0", parents=["0000:3a:00.0"], numa_node=1)
    expected = {da.PCIE_ROOT: {"string": "pci0000:3a"}}
    assert da.pcie_root_attribute("0000:3b:00.0", sysfs=tmp_path) == expected
    assert da.pcie_root_attribute("0000:3b:00.0", sysfs=f"{tmp_path}/") == expected


def test_errors_name_their_path_and_pickle(tmp_path: Path) -> None:
    SysfsTree(tmp_path).pci_device("0000:00:02.0", numa_node="x\n")
    SysfsTree(tmp_path).pci_device("0000:00:03.0", numa_node=-1)
    with pytest.raises(da.SysfsError) as malformed:
        da.pci_numa_node_attribute("0000:00:02.0", sysfs=tmp_path)
    with pytest.raises(da.NoNUMAAffinityError) as none:
        da.pci_numa_node_attribute("0000:00:03.0", sysfs=tmp_path)
    for error in (malformed.value, none.value):
        assert isinstance(error, rs.ResourceSliceError)
        assert error.path is not None and error.path in str(error)
        copy = pickle.loads(pickle.dumps(error))
        assert (type(copy), str(copy), copy.path) == (type(error), str(error), error.path)
    assert isinstance(malformed.value, OSError) and isinstance(none.value, ValueError)
    assert str(malformed.value) == (
        "failed to read NUMA node for PCI Bus ID 0000:00:02.0: "
        f"{tmp_path}/bus/pci/devices/0000:00:02.0/numa_node holds 'x', not an integer"
    )


def test_all_three(tmp_path: Path) -> None:
    tree = SysfsTree(tmp_path)
    tree.pci_device("0000:00:01.0", numa_node=0)
    tree.pci_device("0000:00:02.0", numa_node=None)  # no numa_node: an error, not "no affinity"
    # A device out of devices/pci*, its numa_node readable.
    tree.pci_device("0000:00:03.0", root_complex="platform", numa_node=0)
    assert da.pci_device_attributes("0000:00:01.0", sysfs=tmp_path) == {
        da.PCI_BUS_ID: {"string": "0000:00:01.0"},
        da.PCIE_ROOT: {"string": "pci0000:00"},
        da.NUMA_NODE: {"int": 0},
    }
    with pytest.raises(da.SysfsError, match="failed to read NUMA node"):
        da.pci_device_attributes("0000:00:02.0", sysfs=tmp_path)
    assert da.pci_device_attributes("0000:00:02.0", numa=None, sysfs=tmp_path) == {
        da.PCI_BUS_ID: {"string": "0000:00:02.0"},
        da.PCIE_ROOT: {"string": "pci0000:00"},
    }
    with pytest.raises(da.SysfsError, match="failed to resolve PCIe Root Complex"):
        da.pci_device_attributes("0000:00:03.0", sysfs=tmp_path)


def test_socket_of_a_node_is_its_lowest_cpus(tmp_path: Path) -> None:
    """Where a node's CPUs are on several sockets (no real machine's), Go takes any one CPU's
    (a map's order); this package takes the lowest CPU's."""
    tree = SysfsTree(tmp_path)
    tree.numa_node(0, distances=[10, 12, 12], cpus=[0])
    tree.numa_node(1, cpus="1-2\n")
    tree.numa_node(2, cpus="4,3\n")
    for cpu, package in [(0, 0), (1, 0), (2, 1), (3, 1), (4, 0)]:
        tree.cpu(cpu, package=package)
    assert da.numa_node_attribute(0, form="list", sysfs=tmp_path) == {
        da.NUMA_NODE: {"ints": [0, 1]}
    }


def test_attributes_are_valid_device_attributes(tmp_path: Path) -> None:
    tree = SysfsTree(tmp_path)
    tree.numa_node(0, distances=[10, 11], cpus=[0])
    tree.numa_node(1, distances=[11, 10], cpus=[1])
    tree.pci_device("0000:3b:00.0", parents=["0000:3a:00.0"], numa_node=0)
    devices: list[rs.Device] = [
        {
            "name": f"gpu-{form}",
            "attributes": {
                **da.pci_device_attributes("0000:3b:00.0", numa=form, sysfs=tmp_path),
                "model": {"string": "H100"},
            },
        }
        for form in ("scalar", "list")
    ]
    assert devices[1]["attributes"][da.NUMA_NODE] == {"ints": [0, 1]}
    resources = rs.DriverResources(pools={"node-a": rs.Pool(devices=devices)})
    assert rs.validate(resources, driver="gpu.example.com", all_nodes=True) == []


def test_sysfs_tree() -> None:
    assert [_cpulist(c) for c in ([], [3], [0, 1, 2, 5], [0, 2, 3, 4, 9, 10])] == [
        "",
        "3",
        "0-2,5",
        "0,2-4,9-10",
    ]


def test_oracle_pins_the_release_the_module_follows() -> None:
    """The Go oracle is Go's deviceattribute of the release this module says it follows, the
    test apiserver's."""
    testing = Path(sysfs.__file__).resolve().parent
    module = re.compile(r"k8s\.io/dynamic-resource-allocation (v\S+)")
    pinned = module.search((testing / "deviceattrs" / "go.mod").read_text())
    apiserver = module.search((testing / "apiserver" / "go.mod").read_text())
    assert pinned and apiserver and pinned.group(1) == apiserver.group(1)
    assert f"deviceattribute`` ({pinned.group(1)})" in (da.__doc__ or "")
