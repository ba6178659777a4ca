"""Generated device-status entries: the checks and the real apiserver agree on each.

Hypothesis makes entries around every rule's edges (conditions' types, statuses, reasons and
times in Go's lenient RFC 3339; data near 10 KiB with the characters and numbers whose
encoding differs between Python and Go; IPs canonical or not; names and addresses near their
byte limits, in multi-byte characters). Each is applied, unchecked, to a claim that has its
device allocated: the apiserver accepts exactly the entries the checks accept, and refuses
the others at the paths they name.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator
from typing import Any

import kubernetes.client
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from kubernetes.client.exceptions import ApiException

from resourceslice._http import request
from resourceslice.claimstatus import apply_patch_body, device_status_problems
from resourceslice.testing import TestCluster
from support.claim_env import allocated, claims_path, delete, result

pytestmark = pytest.mark.integration

DRIVER = "fuzz.example.com"
_names = itertools.count()

chars = st.sampled_from(["a", "Z", "0", "_", "-", ".", ",", ":", " ", "/", "<", "&", "é", "𝄞",
                         "\u2028", "\x7f", "\x85", "\n", '"', "\\"])  # fmt: skip
texts = st.lists(chars, max_size=12).map("".join)
kinds = st.one_of(
    st.sampled_from(["Ready", "gpu.example.com/Ready", "", "not ready", "a" * 63, "a" * 64,
                     "Example.com/Ready", "a/b/c", "ready-", "r"]),
    texts,
)  # fmt: skip
valid_times = st.builds(
    "{:04d}-{:02d}-{:02d}T{:02d}:{:02d}:{:02d}{}".format,
    st.integers(1970, 2100), st.integers(1, 12), st.integers(1, 28), st.integers(0, 23),
    st.integers(0, 59), st.integers(0, 59), st.sampled_from(["Z", "+01:00", "-23:59", ".5Z"]),
)  # fmt: skip
edge_times = st.one_of(
    st.sampled_from(["2024-01-02T3:04:05Z", "2024-01-02T03:04:05,5Z", "2024-02-30T03:04:05Z",
                     "2024-01-02T03:04:05+24:00", "2024-01-02T03:04:05+24:01",
                     "0001-01-01T00:00:00Z", "0001-01-01T00:00:00.1Z", "2024-01-02t03:04:05Z", ""]),
    st.builds("{:04d}-{:02d}-{:02d}T{:02d}:{:02d}:{:02d}{}".format,
              st.integers(0, 9999), st.integers(0, 13), st.integers(0, 32), st.integers(0, 25),
              st.integers(0, 61), st.integers(0, 61), st.sampled_from(["Z", "+24:60", "-00:00"])),
)  # fmt: skip
condition = st.fixed_dictionaries(
    {
        "type": kinds,
        "status": st.sampled_from(["True", "False", "Unknown", "True", "False", "true", ""]),
        "reason": st.one_of(st.sampled_from(["Prepared", "A,B:c_d", "Ready_"]), texts),
        "lastTransitionTime": st.one_of(valid_times, valid_times, edge_times),
    },
    optional={
        "message": st.one_of(texts, st.integers(32760, 32775).map(lambda n: "m" * n)),
        "observedGeneration": st.integers(-2, 2**63 - 1),
    },
)
conditions = st.one_of(
    st.lists(condition, max_size=10, unique_by=lambda c: c["type"]),
    st.lists(condition, max_size=3),
    st.lists(condition.map(lambda c: {k: v for k, v in c.items() if k != "reason"}), max_size=2),
)
scalars = st.one_of(
    st.none(), st.booleans(), texts,
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([1e-7, 1e21, 1e20, -0.0, 0.1, 1.0, 5e-324, 123456789.125]),
)  # fmt: skip
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=30,
)
# Padded so that some land either side of 10 KiB as the apiserver counts it.
data = st.builds(
    lambda d, pad, c: {**d, "pad": c * pad},
    st.dictionaries(texts, values, max_size=5),
    st.integers(0, 10300),
    st.sampled_from(["x", "<", "é", "\u2028"]),
)


def ipv4(octets: list[int], prefix: int, zeros: bool) -> str:
    return ".".join(f"{o:03d}" if zeros else str(o) for o in octets) + f"/{prefix}"


def ipv6(groups: list[int], prefix: int, style: str) -> str:
    text = ":".join(f"{g:x}" for g in groups)
    if style == "upper":
        text = text.upper()
    elif style == "compress":
        text = text.replace(":0:0:", "::", 1)
    elif style == "padded":
        text = ":".join(f"{g:04x}" for g in groups)
    return f"{text}/{prefix}"


ips = st.one_of(
    st.builds(ipv4, st.lists(st.integers(0, 256), min_size=4, max_size=4), st.integers(0, 33),
              st.booleans()),
    st.builds(ipv6, st.lists(st.sampled_from([0, 0, 1, 0xDB8, 0xFFFF, 0x2001]), min_size=8,
                             max_size=8), st.integers(0, 129),
              st.sampled_from(["plain", "upper", "compress", "padded"])),
    st.sampled_from(["10.9.8.7", "::ffff:10.9.8.7/120", "fe80::1%eth0/64", "", "10.9.8.7/24 "]),
)  # fmt: skip
network = st.fixed_dictionaries(
    {},
    optional={
        "interfaceName": st.one_of(texts, st.integers(60, 66).map(lambda n: "é𝄞" * n)),
        "hardwareAddress": st.one_of(texts, st.integers(20, 23).map(lambda n: "é𝄞" * n)),
        "ips": st.lists(ips, max_size=18),
    },
)
entries = st.fixed_dictionaries(
    {},
    optional={"conditions": conditions, "data": data, "networkData": network},
)


@pytest.fixture(scope="module")
def client(kube_cluster: TestCluster) -> Iterator[kubernetes.client.ApiClient]:
    admin = kube_cluster.api_client("admin")
    try:
        yield admin
    finally:
        admin.close()


def verdict(client: kubernetes.client.ApiClient, entry: dict[str, Any]) -> tuple[bool, set[str]]:
    """Whether the apiserver stores ``entry`` (applied as the writer applies it, unchecked),
    and the paths of a 422's causes, relative to the entry."""
    name = f"fuzz-{next(_names)}"
    allocated(client, name, [result(DRIVER, "pool", "dev")])
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "status": {"devices": [entry]},
    }
    try:
        request(
            client,
            "PATCH",
            f"{claims_path()}/{name}/status",
            query=[("fieldManager", "fuzz")],
            body=apply_patch_body(body),
            content_type="application/apply-patch+yaml",
        )
    except ApiException as exc:
        if exc.status != 422:
            return False, {f"refused before validation: {exc.status}"}
        causes = (json.loads(exc.body).get("details") or {}).get("causes") or []
        prefix = "status.devices[0]"
        return False, {c["field"].removeprefix(prefix).lstrip(".") for c in causes}
    finally:
        delete(client, name)
    return True, set()


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(members=entries)
def test_the_apiserver_accepts_what_the_checks_accept(
    client: kubernetes.client.ApiClient, members: dict[str, Any]
) -> None:
    entry = {"driver": DRIVER, "pool": "pool", "device": "dev", **members}
    problems = device_status_problems(entry)
    stored, paths = verdict(client, entry)
    event("stored" if stored else "refused")
    for path in sorted(paths):
        event(f"refused at {re.sub(r'[0-9]+', 'N', path)}")
    assert stored == (not problems), (problems, paths)
    if paths and not any(p.startswith("refused before") for p in paths):
        assert {p.split(": ", 1)[0] for p in problems} == paths
