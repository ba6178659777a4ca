"""The device-status checks against Kubernetes' own validation (tests/vectors/claimstatus.json).

Each vector is one ``status.devices`` entry as DeviceStatusWriter applies it, with the verdict
of the apiserver's status-update code on a claim that has its device allocated (see
tests/vectors/claimstatusgen). The checks must accept every entry Kubernetes accepts and
refuse every other, with an error at each path Kubernetes reports. The same vectors go to the
real apiserver in tests/integration/test_claim_status_vectors.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from resourceslice.claimstatus import data_size, device_status_problems

ROOT = Path(__file__).resolve().parents[2]
FILE = json.loads((ROOT / "tests/vectors/claimstatus.json").read_text())
VECTORS: list[dict[str, Any]] = FILE["vectors"]


def our_path(server_path: str) -> str:
    """Our path of the server's ``status.devices[0]...``: relative to the entry."""
    return re.sub(r"^status\.devices\[0\]\.?", "", server_path)


def paths(problems: list[str]) -> set[str]:
    return {problem.split(": ", 1)[0] for problem in problems}


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_vector(vector: dict[str, Any]) -> None:
    problems = device_status_problems(vector["entry"])
    if vector["valid"]:
        assert problems == []
        return
    assert problems, "Kubernetes refuses this entry"
    if vector.get("decodeError"):
        return  # refused before validation: a member of the wrong type or unknown
    assert paths(problems) == {our_path(e["path"]) for e in vector["errors"]}, problems


def test_the_vectors_cover_every_rule() -> None:
    """Every path Kubernetes validates in an entry has a vector refused there, and one
    accepted at its limit (the numbers of the API's own limits)."""
    refused = {re.sub(r"\[\d+\]", "[]", our_path(e["path"])) for v in VECTORS for e in v["errors"]}
    assert refused >= {
        "driver",
        "pool",
        "device",
        "shareID",
        "conditions",
        "conditions[]",
        "conditions[].type",
        "conditions[].status",
        "conditions[].observedGeneration",
        "conditions[].lastTransitionTime",
        "conditions[].reason",
        "conditions[].message",
        "data",
        "networkData.interfaceName",
        "networkData.hardwareAddress",
        "networkData.ips",
        "networkData.ips[]",
    }
    names = {v["name"]: v["valid"] for v in VECTORS}
    for limit in (
        "conditions-8",
        "data-10240",
        "network-interface-256",
        "network-hardware-address-128",
        "network-ips-16",
        "condition-reason-1024",
        "condition-message-32768",
    ):
        assert names[limit] is True, limit
    assert sum(1 for v in VECTORS if v["name"].startswith("go-")) == 10
    assert FILE["kubernetes"] == apiserver_pin()
    main = (ROOT / "python/resourceslice/testing/apiserver/main.go").read_text()
    block = re.search(r"var sliceFeatureGates = \[\]string\{(.*?)\n\}", main, re.S)
    assert block is not None
    # GA and locked on in the vectors' release: it changes no verdict.
    server = set(re.findall(r'"(\w+)"', block.group(1))) - {"DynamicResourceAllocation"}
    assert set(FILE["featureGates"]) == server, "regenerate with the test apiserver's gates"


def apiserver_pin() -> str:
    """The k8s.io/kubernetes version the test apiserver is built from."""
    gomod = ROOT / "python/resourceslice/testing/apiserver/go.mod"
    [version] = re.findall(r"^\s*k8s\.io/kubernetes (v\S+)", gomod.read_text(), re.M)
    return version


BOUNDARIES = [v for v in VECTORS if re.search(r"^data-.*-1024[01]$", v["name"])]


@pytest.mark.parametrize("vector", BOUNDARIES, ids=[v["name"] for v in BOUNDARIES])
def test_data_is_measured_as_the_apiserver_encodes_it(vector: dict[str, Any]) -> None:
    """The boundary vectors are 10240 and 10241 bytes as the apiserver encodes them (HTML
    escapes, Go's numbers), which Python's json.dumps would count otherwise."""
    expected = int(vector["name"][-5:])
    assert data_size(vector["entry"]["data"]) == expected
    python = len(json.dumps(vector["entry"]["data"], separators=(",", ":"), ensure_ascii=False))
    if any(s in vector["name"] for s in ("html", "small-floats", "whole-floats", "separators")):
        assert python != expected  # what a naive count would get wrong


def test_data_that_is_not_json_is_refused() -> None:
    assert device_status_problems(
        {
            "driver": "gpu.example.com",
            "pool": "p",
            "device": "d",
            "data": {"a": [1, float("nan")], "b": {"c": b"x"}, "d": "\ud800", 1: 2},
        }
    ) == ["data: keys must be strings, not int"]
    problems = device_status_problems(
        {"driver": "gpu.example.com", "pool": "p", "device": "d", "data": {"a": [1, float("inf")]}}
    )
    assert problems == ['data["a"][1]: must be a finite number']
    problems = device_status_problems(
        {"driver": "gpu.example.com", "pool": "p", "device": "d", "data": {"a": {"b": b"x"}}}
    )
    assert problems == ['data["a"]["b"]: must be JSON data, not bytes']
    problems = device_status_problems(
        {"driver": "gpu.example.com", "pool": "p", "device": "d", "data": {"a": "\ud800"}}
    )
    assert problems == ['data["a"]: must be valid Unicode (no lone surrogates)']


def test_deep_data_is_measured_without_recursion() -> None:
    deep: Any = {}
    for _ in range(5000):
        deep = {"a": deep}
    assert data_size(deep) == 5000 * len('{"a":}') + 2
