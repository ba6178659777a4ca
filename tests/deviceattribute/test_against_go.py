"""resourceslice.deviceattribute against Go's k8s.io/dynamic-resource-allocation/deviceattribute
(v0.37.2), both reading the same sysfs trees: the trees these tests make (symlinks as the kernel
makes them, malformed entries, random file contents) and this machine's own /sys.

The oracle is resourceslice.testing.sysfs.go_device_attributes (a Go program built once per
machine). For every question both must give the same attribute, or both an error: Python's
error text starts as Go's does (up to its first ": "), is of the kind Go's text says
(NoNUMAAffinityError, ValueError for an argument, else SysfsError), and a SysfsError names
its path, under the sysfs root asked.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resourceslice import DeviceAttribute
from resourceslice import deviceattribute as da
from resourceslice.testing.sysfs import SysfsTree, build_deviceattrs, go_device_attributes


@pytest.fixture(scope="module", autouse=True)
def oracle() -> None:
    """Built (or found cached) before the first test, so no test's timeout pays for it."""
    build_deviceattrs()


def _answer(
    helper: Callable[..., dict[str, DeviceAttribute]], *args: Any, **kw: Any
) -> dict[str, Any]:
    try:
        return {"attribute": helper(*args, **kw)}
    except (ValueError, OSError) as exc:
        return {"exception": exc}


def python_answers(
    sysfs: str | os.PathLike[str] | None,
    *,
    pci: Iterable[str] = (),
    numa_nodes: Iterable[int] = (),
    cpus: Iterable[int] = (),
) -> dict[str, Any]:
    """Python's answers in the shape of go_device_attributes', exceptions kept as raised."""
    kw: dict[str, Any] = {} if sysfs is None else {"sysfs": sysfs}
    cpu_answers: list[dict[str, Any]] = []
    for cpu in cpus:
        try:
            cpu_answers.append({"node": da.numa_node_of_cpu(cpu, **kw)})
        except (ValueError, OSError) as exc:
            cpu_answers.append({"exception": exc})
    return {
        "pci": [
            {
                "pciBusID": _answer(da.pci_bus_id_attribute, a),
                "pcieRoot": _answer(da.pcie_root_attribute, a, **kw),
                "numaNode": _answer(da.pci_numa_node_attribute, a, **kw),
                "numaNodeList": _answer(da.pci_numa_node_attribute, a, form="list", **kw),
            }
            for a in pci
        ],
        "numaNodes": [
            {
                "scalar": _answer(da.numa_node_attribute, n, **kw),
                "list": _answer(da.numa_node_attribute, n, form="list", **kw),
            }
            for n in numa_nodes
        ],
        "cpus": cpu_answers,
    }


def check_error(go_text: str, exc: BaseException, root: str, where: str) -> None:
    head = go_text.split(": ")[0]
    assert str(exc).startswith(head), f"{where}: Go says {go_text!r}, Python {exc}"
    if "no NUMA affinity" in go_text:
        assert isinstance(exc, da.NoNUMAAffinityError), where
    elif go_text.startswith(("invalid PCI Bus ID", "PCI Bus ID cannot", "invalid NUMA node")):
        assert isinstance(exc, ValueError), where
        assert not isinstance(exc, (da.SysfsError, da.NoNUMAAffinityError)), where
    else:
        assert isinstance(exc, da.SysfsError), f"{where}: {exc!r}"
        assert exc.path in str(exc), where
        assert exc.path.startswith(root.rstrip("/") + "/"), where
    if isinstance(exc, da.NoNUMAAffinityError) and exc.path is not None:
        assert exc.path.startswith(root.rstrip("/") + "/") and exc.path in str(exc), where


def assert_agree(go: dict[str, Any], py: dict[str, Any], root: str) -> None:
    """Each answer the same: the same attribute, or an error of the kind Go's text says."""
    assert {k: len(v) for k, v in go.items()} == {k: len(v) for k, v in py.items()}
    for section, go_items in go.items():
        for index, (go_item, py_item) in enumerate(zip(go_items, py[section])):
            results = (
                [("", go_item, py_item)]
                if section == "cpus"
                else [(name, go_item[name], py_item[name]) for name in go_item]
            )
            for name, go_result, py_result in results:
                where = f"{section}[{index}].{name}"
                if "error" in go_result:
                    assert "exception" in py_result, (
                        f"{where}: Go: {go_result}, Python: {py_result}"
                    )
                    check_error(go_result["error"], py_result["exception"], root, where)
                else:
                    assert py_result == go_result, where


def agree(
    root: str | os.PathLike[str] | None,
    *,
    pci: Iterable[str] = (),
    numa_nodes: Iterable[int] = (),
    cpus: Iterable[int] = (),
) -> dict[str, Any]:
    """Asks both; asserts they agree; returns Go's answers."""
    pci, numa_nodes, cpus = list(pci), list(numa_nodes), list(cpus)
    go = go_device_attributes(root, pci=pci, numa_nodes=numa_nodes, cpus=cpus)
    py = python_answers(root, pci=pci, numa_nodes=numa_nodes, cpus=cpus)
    assert_agree(go, py, "/sys" if root is None else os.fspath(root))
    return go


def values(go: dict[str, Any], name: str) -> list[Any]:
    """One result of each PCI answer: the attribute's value, or "error"."""
    return [
        next(iter(a[name]["attribute"].values())) if "attribute" in a[name] else "error"
        for a in go["pci"]
    ]


def two_socket_machine(tree: SysfsTree) -> None:
    """Four NUMA nodes on two sockets (nodes 0, 1 on socket 0; 2, 3 on socket 1), PCI devices
    under three root complexes of two domains, behind bridges, with and without affinity."""
    tree.numa_node(0, distances=[10, 12, 20, 20], cpus=[0, 1])
    tree.numa_node(1, distances=[12, 10, 20, 20], cpus=[2, 3])
    tree.numa_node(2, distances=[20, 20, 10, 12], cpus=[4, 5])
    tree.numa_node(3, distances=[20, 20, 12, 10], cpus=[6, 7])
    for cpu in range(8):
        tree.cpu(cpu, package=cpu // 4)
    tree.pci_device("0000:00:00.0", numa_node=0)  # host bridge
    tree.pci_device("0000:00:01.0", numa_node=0)  # root port
    tree.pci_device("0000:01:00.0", parents=["0000:00:01.0"], numa_node=0)  # switch
    tree.pci_device("0000:02:08.0", parents=["0000:00:01.0", "0000:01:00.0"], numa_node=1)
    tree.pci_device(
        "0000:03:00.0", parents=["0000:00:01.0", "0000:01:00.0", "0000:02:08.0"], numa_node=1
    )
    tree.pci_device("0000:80:02.0", numa_node=2)
    tree.pci_device("0000:81:00.1", parents=["0000:80:02.0"], numa_node=3)
    tree.pci_device("0001:00:00.0", numa_node=-1)
    tree.pci_device("0001:3b:00.0", parents=["0001:3a:00.0"], numa_node=-1)


PCI_OF_MACHINE = [
    "0000:00:00.0",
    "0000:00:01.0",
    "0000:01:00.0",
    "0000:02:08.0",
    "0000:03:00.0",
    "0000:80:02.0",
    "0000:81:00.1",
    "0001:00:00.0",
    "0001:3b:00.0",
]


def test_a_two_socket_machine(tmp_path: Path) -> None:
    two_socket_machine(SysfsTree(tmp_path))
    go = agree(tmp_path, pci=PCI_OF_MACHINE, numa_nodes=[0, 1, 2, 3, 4, 1023], cpus=range(9))
    # What both said, spelt out (Go's answers: agree() checked Python's are the same).
    assert values(go, "pcieRoot") == [
        {"string": r}
        for r in ["pci0000:00"] * 5 + ["pci0000:80", "pci0000:80", "pci0001:00", "pci0001:3a"]
    ]
    assert values(go, "pciBusID") == [{"string": a} for a in PCI_OF_MACHINE]
    assert values(go, "numaNode") == [{"int": n} for n in [0, 0, 0, 1, 1, 2, 3]] + ["error"] * 2
    assert (
        values(go, "numaNodeList")
        == [{"ints": n} for n in [[0, 1], [0, 1], [0, 1], [1, 0], [1, 0], [2, 3], [3, 2]]]
        + ["error"] * 2
    )
    assert [n["list"]["attribute"][da.NUMA_NODE] for n in go["numaNodes"][:5]] == [
        {"ints": [0, 1]},
        {"ints": [1, 0]},
        {"ints": [2, 3]},
        {"ints": [3, 2]},
        {"ints": [4]},  # no distance row: the node alone
    ]
    assert go["cpus"] == [{"node": cpu // 2} for cpu in range(8)] + [
        {"error": "CPU 8 not found in any NUMA node"}
    ]
    # The device without NUMA affinity gets no numaNode from the helper of all three.
    assert da.pci_device_attributes("0001:3b:00.0", sysfs=tmp_path) == {
        da.PCI_BUS_ID: {"string": "0001:3b:00.0"},
        da.PCIE_ROOT: {"string": "pci0001:3a"},
    }
    assert da.pci_device_attributes("0000:81:00.1", numa="list", sysfs=tmp_path) == {
        da.PCI_BUS_ID: {"string": "0000:81:00.1"},
        da.PCIE_ROOT: {"string": "pci0000:80"},
        da.NUMA_NODE: {"ints": [3, 2]},
    }
    assert da.NUMA_NODE not in da.pci_device_attributes("0000:81:00.1", numa=None, sysfs=tmp_path)


def test_the_same_socket_filter(tmp_path: Path) -> None:
    """Nodes at the least distance on another socket are left out; a node whose socket is
    unknown (no cpulist, a CPU-less memory node) is kept; so are all when the device's own
    node's socket is unknown."""
    tree = SysfsTree(tmp_path)
    tree.numa_node(0, distances="10 12 12 12 12 20\n", cpus=[0])
    tree.numa_node(1, cpus=[1])
    tree.numa_node(2, cpus=[2])
    tree.numa_node(3)  # memory only
    tree.numa_node(4, cpus="4-5\n")  # its CPUs' socket unreadable: malformed
    tree.numa_node(5, distances="20 12 12 10\n")  # a row too short for node 5, and no CPUs
    tree.numa_node(6, distances="12 12 20 12 20 20 10 ", cpus=[])  # empty cpulist: unknown
    for cpu, package in [(0, 0), (1, 0), (2, 1), (4, "x"), (5, "x")]:
        tree.cpu(cpu, package=package)
    go = agree(tmp_path, numa_nodes=range(7))
    assert [n["list"]["attribute"][da.NUMA_NODE]["ints"] for n in go["numaNodes"]] == [
        [0, 1, 3, 4],
        [1],
        [2],
        [3],
        [4],
        [5],
        [6, 0, 1, 3],  # node 6's row: 12 to nodes 0, 1, 3 (its socket unknown: no filter)
    ]


def test_pcie_root_links(tmp_path: Path) -> None:
    """How Go reads the bus/pci/devices link: only its text (the target need not exist), and
    only a relative target into devices/pci*/.../<address>."""
    tree = SysfsTree(tmp_path)
    cases = {
        "0000:10:00.0": "../../../devices/pci0000:10/0000:10:00.0",  # no such directory: fine
        "0000:11:00.0": str(tmp_path / "devices/pci0000:11/0000:11:00.0"),  # absolute
        "0000:12:00.0": "../../../devices/platform/0000:12:00.0",
        "0000:13:00.0": "../../../devices/pci0000:13/0000:13:00.1",  # another device
        "0000:14:00.0": "../../../../devices/pci0000:14/0000:14:00.0",  # above the root
        "0000:15:00.0": "../../../devices/pci0000:00/../pci0000:15/./0000:15:00.0/",
        "0000:16:00.0": "../../../devices/pci/0000:16:00.0",  # Go takes "pci"
        "0000:17:00.0": "../../../devices/pcifoo:bar/x/0000:17:00.0",  # and any pci* name
        "0000:18:00.0": "devices/pci0000:18/0000:18:00.0",  # relative to bus/pci/devices
        "0000:19:00.0": "../../../devices/0000:19:00.0",
        "0000:1a:00.0": "../../../devices/pci0000:1a",
        "0000:1b:00.0": "../../../devices/pci0000:1b/0000:1b:00.0/../0000:1b:00.0",
        "0000:1c:00.0": "../../../devices//pci0000:1c//0000:1c:00.0",
        "0000:1d:00.0": "../../../devices/pci0000:1d/0000:1d:00.0\n",
        # A Hyper-V VM's (Azure): a bus between devices/ and the root complex. An error in
        # v0.37.2; kubernetes/kubernetes#134076 (open) would take it.
        "0000:21:00.0": "../../../devices/LNXSYSTM:00/LNXSYBUS:00/ACPI0004:00/VMBUS:00/"
        "000000c1-0001-0000-3130-444532304235/pci0000:21/0000:21:00.0",
    }
    for address, target in cases.items():
        tree.pci_link(address, target)
    (tmp_path / "bus/pci/devices/0000:1e:00.0").mkdir()  # a directory, not a link
    (tmp_path / "bus/pci/devices/0000:1f:00.0").write_text("")  # a file
    addresses = [*cases, "0000:1e:00.0", "0000:1f:00.0", "0000:20:00.0"]  # the last: none
    go = agree(tmp_path, pci=addresses)
    roots = values(go, "pcieRoot")
    assert roots == [
        {"string": "pci0000:10"},
        "error",
        "error",
        "error",
        "error",
        {"string": "pci0000:15"},
        {"string": "pci"},
        {"string": "pcifoo:bar"},
        "error",
        "error",
        "error",
        {"string": "pci0000:1b"},
        {"string": "pci0000:1c"},
        "error",
        "error",
        "error",
        "error",
        "error",
    ]
    with pytest.raises(da.SysfsError) as missing:
        da.pcie_root_attribute("0000:20:00.0", sysfs=tmp_path)
    assert missing.value.path == str(tmp_path / "bus/pci/devices/0000:20:00.0")
    assert isinstance(missing.value.__cause__, FileNotFoundError)


NUMA_NODE_FILES = [
    "0",
    "7\n",
    " 1 \n",
    "+2\n",
    "-0\n",
    "0005\n",
    "\xa03\u3000",  # spaces to Go (unicode.IsSpace)
    "\x1c3\n",  # a space to Python's str.strip, not to Go
    "-1\n",
    "-2\n",
    "",
    "\n",
    "abc\n",
    "1_0\n",
    "0x1\n",
    "1.0\n",
    "\u0663\n",  # an Arabic-Indic digit: int() takes it, Go does not
    "1 2\n",
    "9223372036854775807\n",
    "9223372036854775808\n",
    "-9223372036854775808\n",
    "-9223372036854775809\n",
    "1024\n",  # above Linux's bound: Go checks it only for a node given, not one read
]


def test_numa_node_files(tmp_path: Path) -> None:
    tree = SysfsTree(tmp_path)
    addresses = [f"0000:{i + 0x40:02x}:00.0" for i in range(len(NUMA_NODE_FILES))]
    for address, text in zip(addresses, NUMA_NODE_FILES):
        tree.pci_device(address, numa_node=text)
    tree.pci_device("0000:70:00.0", numa_node=None)  # no numa_node file
    tree.pci_device("0000:71:00.0", numa_node=None)
    (tmp_path / "devices/pci0000:71/0000:71:00.0/numa_node").mkdir()  # a directory
    (tmp_path / "devices/pci0000:72/0000:72:00.0").mkdir(parents=True)  # a device, no link
    (tmp_path / "devices/pci0000:72/0000:72:00.0/numa_node").write_text("0\n")
    tree.pci_device("0000:73:00.0", numa_node=b"\xff1\n")  # not UTF-8
    tree.pci_device("0000:74:00.0", numa_node="\x851\x85")  # U+0085: a space to Go
    more = ["0000:70:00.0", "0000:71:00.0", "0000:72:00.0", "0000:73:00.0", "0000:74:00.0"]
    go = agree(tmp_path, pci=[*addresses, *more])
    scalars = values(go, "numaNode")
    assert scalars[:8] == [{"int": n} for n in [0, 7, 1, 2, 0, 5, 3]] + ["error"]
    assert scalars[18] == {"int": 2**63 - 1} and scalars[22] == {"int": 1024}
    assert scalars[-5:] == ["error"] * 4 + [{"int": 1}]
    with pytest.raises(da.SysfsError, match="holds 'abc', not an integer") as malformed:
        da.pci_numa_node_attribute("0000:4c:00.0", sysfs=tmp_path)
    assert malformed.value.path == str(tmp_path / "bus/pci/devices/0000:4c:00.0/numa_node")
    with pytest.raises(da.NoNUMAAffinityError) as none:
        da.pci_numa_node_attribute("0000:48:00.0", form="list", sysfs=tmp_path)
    assert none.value.path == str(tmp_path / "bus/pci/devices/0000:48:00.0/numa_node")


def test_distance_rows(tmp_path: Path) -> None:
    """Node 0's list, from its distance row: the node alone on any fault of the row, as Go."""
    rows = {
        "10 12 12\n": [0, 1, 2],
        "10\t12  12\n": [0, 1, 2],
        "10 12 20 12\n": [0, 1, 3],
        "12 10 12\n": [0, 1],  # the node's own distance is not the least
        "10\n": [0],
        "10 abc 12\n": [0],
        "": [0],
        "\n": [0],
        # Go's search for the least starts again after a -1 (its "none yet"); not after -2.
        "10 -1 20 20\n": [0, 2, 3],
        "10 12 -1 20\n": [0, 3],
        "10 12 -2 20\n": [0, 2],
        "-1 -1\n": [0],
        "10 12 +12 012\n": [0, 1, 2, 3],
        "10 12 12 1_2\n": [0],
        "10 12\u300012\n": [0, 1, 2],  # U+3000 separates fields to Go
        "10 12\x1c12\n": [0],  # \x1c does not (str.split would)
        "10 9223372036854775808\n": [0],
    }
    for index, (row, expected) in enumerate(rows.items()):
        root = tmp_path / str(index)
        SysfsTree(root).numa_node(0, distances=row)
        go = agree(root, numa_nodes=[0])
        assert go["numaNodes"][0]["list"]["attribute"][da.NUMA_NODE] == {"ints": expected}, row


def test_cpulists_and_packages(tmp_path: Path) -> None:
    """How a node's socket is read: its cpulist as cpuset.Parse reads it, then a CPU's
    physical_package_id. Node 0 is on socket 0; nodes 1-9 at the least distance list CPUs 4
    and 5, on socket 1: well read, the node is dropped; misread, its socket is unknown and it
    is kept."""
    cpulists = ["4-5\n", "+4\n", "5-4\n", "4,,5\n", "4-\n", "-5\n", " 4 \n", "4 ,5\n", "4-+5\n"]
    tree = SysfsTree(tmp_path)
    tree.numa_node(0, distances=[10, *[12] * len(cpulists), 12, 12], cpus=[0, 1])
    for node, text in enumerate(cpulists, 1):
        tree.numa_node(node, cpus=text)
    for cpu, package in [(0, 0), (1, 0), (4, 1), (5, 1)]:
        tree.cpu(cpu, package=package)
    tree.numa_node(10, cpus=[20])  # its only CPU on socket 1
    tree.cpu(20, package=1)
    tree.numa_node(11, cpus=[21])  # its only CPU's package malformed
    tree.cpu(21, package=" 1x\n")
    go = agree(tmp_path, numa_nodes=[0])
    assert go["numaNodes"][0]["list"]["attribute"][da.NUMA_NODE] == {"ints": [0, 3, 4, 5, 6, 8, 11]}


def test_cpu_node_entries(tmp_path: Path) -> None:
    tree = SysfsTree(tmp_path)
    entries = {
        0: ["node1"],
        1: ["node10", "node2"],  # the first by name
        2: ["node1abc"],
        3: ["nodex", "node"],
        4: ["node-1", "node+1"],
        5: ["node05"],
        6: ["node99999999999999999999"],
        7: [],
    }
    for cpu, names in entries.items():
        cpu_dir = tree.cpu(cpu)
        for name in names:
            (cpu_dir / name).mkdir()
    (tmp_path / "devices/system/cpu/cpu8").write_text("")  # not a directory
    go = agree(tmp_path, cpus=[*entries, 8, 9, -1])
    assert go["cpus"][:2] == [{"node": 1}, {"node": 10}] and go["cpus"][5] == {"node": 5}
    with pytest.raises(da.SysfsError) as bad:
        da.numa_node_of_cpu(2, sysfs=tmp_path)
    assert bad.value.path == str(tmp_path / "devices/system/cpu/cpu2/node1abc")


def test_malformed_pci_bus_ids(tmp_path: Path) -> None:
    SysfsTree(tmp_path).pci_device("0000:00:1f.7", numa_node=0)
    malformed = [
        "",
        "bad",
        "0000:00:1F.7",  # sysfs is lower case, and so is Go's pattern
        "0000:00:1f.7 ",
        " 0000:00:1f.7",
        "0000:00:1f.7\n",
        "000:00:1f.7",
        "00000:00:1f.7",
        "0000:00:1f.10",
        "0000:00:1f:7",
        "0000:0g:00.0",
        "0000:00:1f.",
        "\uff10000:00:1f.7",
        "0000/00:1f.7",
        "../0000:00:1f.7",
    ]
    go = agree(tmp_path, pci=["0000:00:1f.7", *malformed])
    assert all("error" not in result for result in go["pci"][0].values())
    for answer in go["pci"][1:]:
        assert all("error" in result for result in answer.values())
    # Go's pattern takes device and function numbers that PCI has not (> 0x1f, > 7).
    assert agree(tmp_path, pci=["0000:00:ff.f"])["pci"][0]["pciBusID"] == {
        "attribute": {da.PCI_BUS_ID: {"string": "0000:00:ff.f"}}
    }


def test_numa_nodes_given(tmp_path: Path) -> None:
    SysfsTree(tmp_path).numa_node(1, distances=[12, 10, 12])
    go = agree(tmp_path, numa_nodes=[0, 1, 1023, 1024, -1, -5, 2**40])
    assert go["numaNodes"][1]["list"]["attribute"][da.NUMA_NODE] == {"ints": [1, 0, 2]}
    with pytest.raises(da.NoNUMAAffinityError):
        da.numa_node_attribute(-1)
    assert da.numa_node_attribute(5) == {da.NUMA_NODE: {"int": 5}}  # reads nothing


# --- random trees -------------------------------------------------------------------------

# Pieces of file contents: numbers, signs, Go's spaces and others', bytes that are not UTF-8.
_PIECES = [b"0", b"1", b"3", b"12", b"-", b"+", b" ", b"\n", b"\t", b"\x1c", b"\xc2\xa0"]
_PIECES += [b"\xc2\x85", b"\xe3\x80\x80", b"_", b"x", b"\xff", b"\xd9\xa3", b"-1"]
_CONTENTS = st.lists(st.sampled_from(_PIECES), max_size=5).map(b"".join)
_SEPARATORS = st.sampled_from([" ", "  ", "\t", " \u3000", "\x1c", ""])
# A cpulist of numbers from one node's own CPUs (10k..10k+9), each followed by a separator.
_CPU_SEPARATORS = st.sampled_from([",", "-", ",,", "--", "+", " ,", ", "])


@st.composite
def _cpulist(draw: st.DrawFn, node: int) -> str:
    numbers = draw(st.lists(st.integers(10 * node, 10 * node + 9), max_size=3))
    parts = [f"{n}{draw(_CPU_SEPARATORS)}" for n in numbers]
    text = "".join(parts)
    if draw(st.booleans()):
        text = text[:-1] if text else text  # usually well formed: drop the last separator
    return draw(st.sampled_from(["", " ", "\n"])) + text + draw(st.sampled_from(["", "\n"]))


@st.composite
def _machine(draw: st.DrawFn) -> dict[str, Any]:
    nodes = draw(st.integers(1, 5))
    machine: dict[str, Any] = {"nodes": {}, "devices": [], "cpus": {}}
    for node in range(nodes):
        row = draw(st.lists(st.sampled_from([-1, 10, 11, 12, 20, 21]), min_size=0, max_size=6))
        separator = draw(_SEPARATORS)
        distance = draw(st.one_of(st.just(separator.join(map(str, row)) + "\n"), st.none()))
        cpulist = draw(st.one_of(_cpulist(node), st.none()))
        # Every CPU of a node is on one socket (Go reads the socket of any one of them).
        package = draw(st.one_of(st.integers(0, 2), _CONTENTS, st.none()))
        machine["nodes"][node] = (distance, cpulist, package)
    for _ in range(draw(st.integers(0, 6))):
        if draw(st.booleans()):
            content = draw(_CONTENTS)
        else:
            content = f"{draw(st.integers(-1, nodes))}\n".encode()
        machine["devices"].append(content)
    for cpu in range(draw(st.integers(0, 4))):
        machine["cpus"][cpu] = draw(
            st.lists(st.sampled_from(["node0", "node1", "node12", "node1x", "nodex"]), max_size=2)
        )
    return machine


@settings(max_examples=40, deadline=None)
@given(_machine())
def test_random_trees(machine: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory(prefix="sysfs-") as root:
        tree = SysfsTree(root)
        for node, (distance, cpulist, package) in machine["nodes"].items():
            tree.numa_node(node, distances=distance, cpus=cpulist)
            if package is not None:
                for cpu in range(10 * node, 10 * node + 10):
                    tree.cpu(cpu, package=package)
        addresses = []
        for i, content in enumerate(machine["devices"]):
            address = f"0000:{i:02x}:00.0"
            bridges = [f"0000:{i:02x}:01.0"][: i % 2]
            tree.pci_device(address, parents=bridges, numa_node=content)
            addresses.append(address)
        for cpu, names in machine["cpus"].items():
            for name in names:
                (tree.cpu(100 + cpu) / name).mkdir(exist_ok=True)
        cpus = [100 + cpu for cpu in machine["cpus"]]
        agree(root, pci=addresses, numa_nodes=range(len(machine["nodes"]) + 1), cpus=cpus)


# --- this machine ---------------------------------------------------------------------------

SYS = Path("/sys")


def _real_pci() -> list[str]:
    devices = SYS / "bus/pci/devices"
    return sorted(p.name for p in devices.iterdir()) if devices.is_dir() else []


def _real_numbered(directory: str, prefix: str) -> list[int]:
    path = SYS / directory
    names = [p.name[len(prefix) :] for p in path.glob(f"{prefix}*")] if path.is_dir() else []
    return sorted(int(n) for n in names if n.isdigit())


def test_this_machine_agrees() -> None:
    """Go (with its default, /sys) and Python (with theirs) say the same of every PCI device,
    CPU and NUMA node of this machine, and of some it has not: whatever is there."""
    pci = _real_pci()
    cpus = _real_numbered("devices/system/cpu", "cpu")
    nodes = _real_numbered("devices/system/node", "node")
    agree(
        None,
        pci=[*pci, "ffff:ff:1f.7"],
        numa_nodes=[*nodes, max(nodes, default=0) + 1],
        cpus=[*cpus, max(cpus, default=0) + 1],
    )


def test_this_machines_pci_devices() -> None:
    """Each PCI device's root is the first directory of its real path under /sys/devices."""
    pci = _real_pci()
    if not pci:
        pytest.skip("this machine has no PCI devices (/sys/bus/pci/devices is empty or absent)")
    for address in pci:
        real = Path(os.path.realpath(SYS / "bus/pci/devices" / address))
        expected = real.relative_to(SYS / "devices").parts[0]
        assert da.pcie_root_attribute(address) == {da.PCIE_ROOT: {"string": expected}}
        assert real.name == address


def test_this_machines_numa_affinity() -> None:
    """A device with NUMA affinity has its numa_node, as /sys says, in both forms' first."""
    pci = _real_pci()
    with_node = [
        a for a in pci if (SYS / "bus/pci/devices" / a / "numa_node").read_text().strip() != "-1"
    ]
    if not with_node:
        pytest.skip(
            f"none of this machine's {len(pci)} PCI devices has NUMA affinity (numa_node -1: "
            "a single-node machine or a VM); their NoNUMAAffinityError is checked against Go "
            "in test_this_machine_agrees"
        )
    for address in with_node:
        node = int((SYS / "bus/pci/devices" / address / "numa_node").read_text())
        assert da.pci_numa_node_attribute(address) == {da.NUMA_NODE: {"int": node}}
        assert da.pci_numa_node_attribute(address, form="list")[da.NUMA_NODE]["ints"][0] == node
