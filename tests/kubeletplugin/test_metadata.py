"""Device metadata files (KEP-5304) against Go's: the helper's metadata files and CDI specs for
a claim, its answer's CDI device IDs, updates and unprepare, each compared with what Go's own
kubeletplugin helper (k8s.io/dynamic-resource-allocation v0.37.2, EnableDeviceMetadata) does
for the same claim and devices in directories of its own, and read back with Go's own
decoder (devicemetadata.DecodeMetadataFromStream, validation on).

The oracle is resourceslice.testing.devicemetadata (a Go program built once per machine).
The whole chain, in a container's mounts on the DRA cluster, is tests/e2e/test_device_metadata.py.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resourceslice import kubeletplugin
from resourceslice.kubeletplugin import (
    METADATA_V1ALPHA1,
    METADATA_V1BETA1,
    DeviceMetadata,
    PreparedDevice,
    PrepareResult,
)
from resourceslice.kubeletplugin.cdi import journal
from resourceslice.kubeletplugin.metadata import (
    MetadataPlugin,
    MetadataWriter,
    check_versions,
    container_path,
)
from resourceslice.testing.devicemetadata import build_metadata_oracle, go_decode, go_helper

DRIVER = "gpu.example.com"
BOTH = [METADATA_V1BETA1, METADATA_V1ALPHA1]


@pytest.fixture(scope="module", autouse=True)
def oracle() -> None:
    """Built (or found cached) before the first test, so no test's timeout pays for it."""
    build_metadata_oracle()


def make_claim(uid: str, *, name: str = "claim-1", pod_claim: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "team-a", "uid": uid}
    if pod_claim is not None:
        meta["annotations"] = {"resource.kubernetes.io/pod-claim-name": pod_claim}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": meta,
        "spec": {},
        "status": {"allocation": {"devices": {"results": []}}},
    }


class Returns:
    """A driver whose prepare answers every claim with ``devices`` and whose unprepare
    succeeds (or fails with ``unprepare_error``)."""

    def __init__(
        self, devices: Sequence[PreparedDevice], unprepare_error: str | None = None
    ) -> None:
        self.devices = devices
        self.unprepare_error = unprepare_error

    def prepare_resource_claims(self, claims: list[Any]) -> dict[str, PrepareResult]:
        return {c["metadata"]["uid"]: PrepareResult(devices=list(self.devices)) for c in claims}

    def unprepare_resource_claims(self, claims: list[Any]) -> dict[str, str | None]:
        return {c.uid: self.unprepare_error for c in claims}


class Twins:
    """The same claim prepared, updated and unprepared by Go's helper (under ``go/``) and by
    this library's (under ``py/``), each with its plugin data directory and CDI directory."""

    def __init__(self, root: Path, versions: Sequence[str] = (METADATA_V1BETA1,)) -> None:
        self.root = root
        self.versions = list(versions)
        self.writer = MetadataWriter(
            DRIVER,
            plugin_data_dir=root / "py" / "plugin",
            cdi_dir=root / "py" / "cdi",
            versions=self.versions,
        )

    def go(
        self, op: str, claim: dict[str, Any], devices: Sequence[PreparedDevice], **kw: Any
    ) -> Any:
        return go_helper(
            op,
            driver=DRIVER,
            plugin_data_dir=self.root / "go" / "plugin",
            cdi_dir=self.root / "go" / "cdi",
            versions=self.versions,
            claim=claim,
            devices=devices,
            **kw,
        )

    def prepare(self, claim: dict[str, Any], devices: Sequence[PreparedDevice]) -> PrepareResult:
        """Both prepare ``claim`` with ``devices``; their answers to kubelet are equal."""
        go = self.go("prepare", claim, devices)
        assert "error" not in go, go
        got = MetadataPlugin(Returns(devices), self.writer).prepare_resource_claims([claim])
        assert isinstance(got, dict)
        ours: PrepareResult = got[claim["metadata"]["uid"]]
        assert ours.error is None, ours.error
        assert answer(ours.devices) == go["devices"]
        return ours

    def files(self, side: str) -> dict[str, bytes]:
        base = self.root / side
        return {
            str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()
        }

    def assert_equal(self) -> None:
        """The same files: metadata byte for byte, CDI specs equal but for the host paths
        (each names its own plugin data directory)."""
        go, ours = self.files("go"), self.files("py")
        assert sorted(go) == sorted(ours)
        for path, data in go.items():
            if path.startswith("cdi/"):
                go_spec = json.loads(data.decode().replace(f"{self.root}/go/", f"{self.root}/py/"))
                assert json.loads(ours[path]) == go_spec, path
            else:
                assert ours[path] == data, f"{path}:\n{ours[path].decode()}\n---\n{data.decode()}"

    def metadata_file(self, claim: dict[str, Any], request: str) -> Path:
        meta = claim["metadata"]
        return self.writer.file_path(meta["namespace"], meta["name"], request)


def stream(text: str) -> list[dict[str, Any]]:
    """The objects of a JSON stream, each after a newline."""
    objects, position = [], 0
    while position < len(text):
        obj, position = json.JSONDecoder().raw_decode(text, position)
        assert text[position] == "\n"
        objects.append(obj)
        position += 1
    return objects


def answer(devices: Sequence[PreparedDevice]) -> list[dict[str, Any]]:
    """Devices as Go's helper puts them into its answer to kubelet."""
    return [
        {
            "requestNames": [r.split("/")[0] for r in d.requests],
            "poolName": d.pool_name,
            "deviceName": d.device_name,
            "cdiDeviceIds": list(d.cdi_device_ids),
        }
        for d in devices
    ]


EVERY_TYPE = {
    "model": {"string": "H100 <SXM> & more \u2028 é"},
    "memory": {"int": -(2**63)},
    "mig": {"bool": False},
    "driverVersion": {"version": "1.2.3-rc.1+build.5"},
    "resource.kubernetes.io/pciBusID": {"string": "0000:3b:00.0"},
    "gpu.example.com/cores": {"ints": [0, 1, 2**63 - 1]},
    "flags": {"bools": [True, False]},
    "names": {"strings": ["a", ""]},
    "supported": {"versions": ["1.0.0", "2.0.0"]},
    "zero": {"int": 0},
    "empty": {"string": ""},
}

CASES = {
    # From a template: the pod's claim name is the directory; a UID starting with a digit
    # (CDI 0.5.0 allows such a device name).
    "template claim, every attribute type": (
        make_claim("0a1b2c3d-0000-4000-8000-000000000001", pod_claim="gpus"),
        [
            PreparedDevice(
                "node-1",
                "gpu-0",
                ["req"],
                ["gpu.example.com/device=x"],
                metadata=DeviceMetadata(attributes=EVERY_TYPE),
            )
        ],
        [METADATA_V1BETA1],
    ),
    # By name: the claim's name is the directory. Two requests, a device in both, a
    # subrequest, both versions.
    "named claim, requests and a subrequest": (
        make_claim("ab1b2c3d-0000-4000-8000-000000000002"),
        [
            PreparedDevice(
                "pool/a", "gpu-0", ["gpu/big"], metadata=DeviceMetadata({"m": {"int": 1}})
            ),
            PreparedDevice("pool/a", "gpu-1", ["gpu/big", "nic"], ["x.example.com/c=1"]),
            PreparedDevice(
                "pool/a",
                "nic-0",
                ["nic"],
                metadata=DeviceMetadata(
                    network_data={
                        "interfaceName": "net1",
                        "ips": ["10.9.8.7/24", "2001:db8::7/64"],
                        "hardwareAddress": "02:00:00:00:00:01",
                    }
                ),
            ),
        ],
        BOTH,
    ),
    # Metadata without attributes, empty network data (Go writes "networkData": {}), empty
    # fields left out, and a device naming no request (in no file, as in Go).
    "empty metadata and a device of no request": (
        make_claim("cd1b2c3d-0000-4000-8000-000000000003", pod_claim="nics"),
        [
            PreparedDevice("p", "nic-0", ["req"], metadata=DeviceMetadata(network_data={})),
            PreparedDevice(
                "p",
                "nic-1",
                ["req"],
                metadata=DeviceMetadata(network_data={"interfaceName": "", "ips": []}),
            ),
            PreparedDevice("p", "nic-2", ["req"], metadata=DeviceMetadata()),
            PreparedDevice("p", "nic-3", []),
        ],
        [METADATA_V1BETA1],
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_prepare_writes_what_gos_helper_writes(case: str, tmp_path: Path) -> None:
    claim, devices, versions = CASES[case]
    twins = Twins(tmp_path, versions)
    twins.prepare(claim, devices)
    twins.assert_equal()
    assert twins.files("py"), "nothing written"


def test_the_files_and_mounts_are_where_the_api_says(tmp_path: Path) -> None:
    """The host file, the CDI spec's mount and its device ID, and the answer, spelled out
    (the twin tests compare with Go; this says what both are)."""
    twins = Twins(tmp_path, BOTH)
    uid = "1b2b3c4d-0000-4000-8000-000000000004"
    claim = make_claim(uid, pod_claim="gpus")
    result = twins.prepare(
        claim, [PreparedDevice("p", "gpu-0", ["req/sub"], ["v.example.com/c=1"])]
    )
    host = tmp_path / "py/plugin/dra-device-metadata/team-a_claim-1/req/metadata.json"
    assert twins.metadata_file(claim, "req/sub") == host
    assert result.devices[0].cdi_device_ids == ["v.example.com/c=1", f"{DRIVER}/metadata={uid}_req"]
    spec = json.loads((tmp_path / f"py/cdi/{DRIVER}_metadata_{uid}_req.json").read_text())
    mount = {
        "hostPath": str(host),
        "containerPath": "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/"
        f"gpus/req/{DRIVER}-metadata.json",
        "options": ["ro", "bind"],
    }
    assert spec == {
        "cdiVersion": "0.5.0",
        "kind": f"{DRIVER}/metadata",
        "devices": [{"name": f"{uid}_req", "containerEdits": {"mounts": [mount]}}],
        "containerEdits": {},
    }
    assert container_path(DRIVER, "req", claim_name="c") == (
        f"/var/run/kubernetes.io/dra-device-attributes/resourceclaims/c/req/{DRIVER}-metadata.json"
    )
    assert [o["apiVersion"] for o in stream(host.read_text())] == BOTH
    assert oct(host.stat().st_mode & 0o777) == "0o644"
    assert sorted(p.name for p in host.parent.iterdir()) == ["metadata.json"]  # no temporary


# Attributes as a ResourceSlice accepts them, network data as a claim's status does.
_IDENT = st.from_regex(r"[a-z][A-Za-z0-9_]{0,20}", fullmatch=True)
_DOMAIN = st.from_regex(r"[a-z][a-z0-9-]{0,10}[a-z0-9]", fullmatch=True)
_NAMES = st.one_of(_IDENT, st.builds(lambda d, n: f"{d}.example.com/{n}", _DOMAIN, _IDENT))
_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=20).filter(
    lambda s: len(s.encode()) <= 64
)
_VERSION = st.builds(lambda *n: ".".join(map(str, n)), *[st.integers(0, 99)] * 3)
_INT = st.integers(-(2**63), 2**63 - 1)
_ATTRIBUTE = st.one_of(
    st.builds(lambda v: {"int": v}, _INT),
    st.builds(lambda v: {"bool": v}, st.booleans()),
    st.builds(lambda v: {"string": v}, _TEXT),
    st.builds(lambda v: {"version": v}, _VERSION),
    st.builds(lambda v: {"ints": v}, st.lists(_INT, min_size=1, max_size=3)),
    st.builds(lambda v: {"strings": v}, st.lists(_TEXT, min_size=1, max_size=3)),
)
_IP = st.one_of(
    st.builds(
        lambda a, n: f"{ipaddress.IPv4Address(a)}/{n}",
        st.integers(0, 2**32 - 1),
        st.integers(0, 32),
    ),
    st.builds(
        lambda a, n: f"{ipaddress.IPv6Address(a).compressed}/{n}",
        st.integers(2**33, 2**128 - 1),
        st.integers(0, 128),
    ),
)
_NETWORK = st.fixed_dictionaries(
    {},
    optional={
        "interfaceName": _TEXT,
        "ips": st.lists(_IP, max_size=4, unique=True),
        "hardwareAddress": _TEXT,
    },
)
_METADATA = st.builds(
    DeviceMetadata,
    attributes=st.dictionaries(_NAMES, _ATTRIBUTE, max_size=6),
    network_data=st.one_of(st.none(), _NETWORK),
)


@settings(max_examples=20, deadline=None)
@given(st.lists(st.one_of(st.none(), _METADATA), min_size=1, max_size=3), st.booleans())
def test_any_valid_metadata_is_written_as_gos_helper_writes_it(
    metadata: list[DeviceMetadata | None], both: bool
) -> None:
    devices = [PreparedDevice("p", f"d{i}", ["req"], metadata=m) for i, m in enumerate(metadata)]
    with tempfile.TemporaryDirectory() as root:
        twins = Twins(Path(root), BOTH if both else [METADATA_V1BETA1])
        claim = make_claim("ef1b2c3d-0000-4000-8000-000000000005")
        twins.prepare(claim, devices)
        twins.assert_equal()
        decoded = go_decode(twins.metadata_file(claim, "req"))
        assert decoded["validationError"] == ""


def test_gos_decoder_reads_the_file_first_version_first(tmp_path: Path) -> None:
    twins = Twins(tmp_path, BOTH)
    uid = "2b2b3c4d-0000-4000-8000-000000000006"
    claim = make_claim(uid, name="shared-gpus")
    network = {"interfaceName": "net1", "ips": ["10.9.8.7/24"]}
    twins.prepare(
        claim,
        [PreparedDevice("p", "gpu-0", ["req"], metadata=DeviceMetadata(EVERY_TYPE, network))],
    )
    decoded = go_decode(twins.metadata_file(claim, "req"))
    assert decoded["decodedFrom"] == METADATA_V1BETA1
    assert decoded["validationError"] == ""
    assert decoded["object"] == {
        "kind": "DeviceMetadata",
        "apiVersion": METADATA_V1BETA1,
        "metadata": {"name": "shared-gpus", "namespace": "team-a", "uid": uid, "generation": 1},
        "requests": [
            {
                "name": "req",
                "devices": [
                    {
                        "driver": DRIVER,
                        "pool": "p",
                        "name": "gpu-0",
                        "attributes": EVERY_TYPE,
                        "networkData": network,
                    }
                ],
            }
        ],
    }


def test_update_rewrites_the_file_as_gos_helper_does(tmp_path: Path) -> None:
    """An update after prepare (the network's data, once the sandbox exists): the same bytes
    as Go's update, one generation further each time, the pod's claim name kept; by the
    request or by its subrequest, which names the request in the file."""
    twins = Twins(tmp_path, BOTH)
    claim = make_claim("3b2b3c4d-0000-4000-8000-000000000007", pod_claim="nics")
    meta = claim["metadata"]
    first = [PreparedDevice("p", "nic-0", ["nic/fast"], metadata=DeviceMetadata({"m": {"int": 1}}))]
    twins.prepare(claim, first)
    before = twins.metadata_file(claim, "nic").read_bytes()
    for generation, request, ip in ((2, "nic/fast", "10.0.0.2/24"), (3, "nic", "10.0.0.3/24")):
        later = [
            PreparedDevice(
                "p",
                "nic-0",
                metadata=DeviceMetadata({"m": {"int": 1}}, {"interfaceName": "eth1", "ips": [ip]}),
            )
        ]
        assert twins.go("update", claim, later, request=request) == {}
        twins.writer.update(meta["namespace"], meta["name"], meta["uid"], request, later)
        twins.assert_equal()
        decoded = go_decode(twins.metadata_file(claim, "nic"))["object"]
        assert decoded["metadata"]["generation"] == generation
        assert decoded["podClaimName"] == "nics"
        assert decoded["requests"][0]["name"] == request
        assert decoded["requests"][0]["devices"][0]["networkData"]["ips"] == [ip]
    assert twins.metadata_file(claim, "nic").read_bytes() != before


def test_unprepare_removes_what_gos_helper_removes(tmp_path: Path) -> None:
    twins = Twins(tmp_path)
    uid = "4b2b3c4d-0000-4000-8000-000000000008"
    claim, other = make_claim(uid), make_claim("5b2b3c4d-0000-4000-8000-000000000009", name="o")
    devices = [PreparedDevice("p", "d0", ["a"]), PreparedDevice("p", "d1", ["b"])]
    twins.prepare(claim, devices)
    twins.prepare(other, devices)
    assert twins.go("unprepare", claim, []) == {}
    ref = kubeletplugin.ClaimRef("team-a", "claim-1", uid)
    results = MetadataPlugin(Returns([]), twins.writer).unprepare_resource_claims([ref])
    assert results == {uid: None}
    twins.assert_equal()
    assert sorted(twins.files("py")) == [
        f"cdi/{DRIVER}_metadata_5b2b3c4d-0000-4000-8000-000000000009_a.json",
        f"cdi/{DRIVER}_metadata_5b2b3c4d-0000-4000-8000-000000000009_b.json",
        "plugin/dra-device-metadata/team-a_o/a/metadata.json",
        "plugin/dra-device-metadata/team-a_o/b/metadata.json",
    ]


def test_a_failed_unprepare_keeps_the_files(tmp_path: Path) -> None:
    """As in Go: the files go only once the driver unprepared the claim."""
    twins = Twins(tmp_path)
    uid = "6b2b3c4d-0000-4000-8000-00000000000a"
    twins.prepare(make_claim(uid), [PreparedDevice("p", "d0", ["a"])])
    plugin = MetadataPlugin(Returns([], unprepare_error="busy"), twins.writer)
    ref = kubeletplugin.ClaimRef("team-a", "claim-1", uid)
    assert plugin.unprepare_resource_claims([ref]) == {uid: "busy"}
    assert len(twins.files("py")) == 2


@pytest.mark.parametrize(
    ("metadata", "problem"),
    [
        (DeviceMetadata({"model": {"int": "x"}}), 'attributes["model"].int: must be an integer'),
        (DeviceMetadata({"a": {"int": 1, "bool": True}}), "must have exactly one of"),
        (DeviceMetadata({"a": {"string": "x", "strng": "y"}}), "unknown fields ['strng']"),
        (DeviceMetadata({"Bad Name": {"bool": True}}), "C identifier"),
        (DeviceMetadata({"v": {"version": "1.x"}}), "semantic version"),
        (DeviceMetadata({f"a{i}": {"int": i} for i in range(33)}), "at most 32 attributes"),
        (DeviceMetadata(network_data={"ips": ["10.9.8.7"]}), "networkData.ips[0]"),
        (DeviceMetadata(network_data={"interfaceName": "x" * 257}), "at most 256 bytes"),
    ],
)
def test_metadata_a_reader_would_refuse_fails_the_claim(
    metadata: DeviceMetadata, problem: str, tmp_path: Path
) -> None:
    """Go's types cannot hold what its decoder would refuse; a dict can. Such a claim fails
    with the reason (kubelet shows it and retries), and nothing of it is left on disk."""
    writer = MetadataWriter(
        DRIVER, plugin_data_dir=tmp_path / "p", cdi_dir=tmp_path / "c", versions=BOTH
    )
    uid = "7b2b3c4d-0000-4000-8000-00000000000b"
    devices = [
        PreparedDevice("p", "ok", ["a"]),
        PreparedDevice("p", "bad", ["b"], metadata=metadata),
    ]
    plugin = MetadataPlugin(Returns(devices), writer)
    result = plugin.prepare_resource_claims([make_claim(uid)])
    assert isinstance(result, dict)
    error = str(result[uid].error)
    assert error.startswith("writing the device metadata: the metadata of device p/bad: ")
    assert problem in error
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_a_write_that_fails_fails_the_claim_and_leaves_nothing(tmp_path: Path) -> None:
    """Go logs the error and answers without the mount (the pod runs without its file); here
    the claim fails, and kubelet retries."""
    writer = MetadataWriter(
        DRIVER, plugin_data_dir=tmp_path / "p", cdi_dir=tmp_path / "c", versions=[METADATA_V1BETA1]
    )
    uid = "8b2b3c4d-0000-4000-8000-00000000000c"
    blocked = tmp_path / "p/dra-device-metadata/team-a_claim-1/b"
    blocked.parent.mkdir(parents=True)
    blocked.write_text("in the way")  # the second request's directory cannot be made
    plugin = MetadataPlugin(
        Returns([PreparedDevice("p", "d0", ["a"]), PreparedDevice("p", "d1", ["b"])]), writer
    )
    result = plugin.prepare_resource_claims([make_claim(uid)])
    assert isinstance(result, dict)
    assert "writing the device metadata" in str(result[uid].error)
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_the_specs_are_recorded_with_the_claim_from_a_coroutine_too(tmp_path: Path) -> None:
    """The metadata specs are noted in the journal of the prepare call, on the thread that
    writes them for a coroutine callback too: the checkpoint records them with the claim (and
    restores them after a reboot, removes them with it)."""
    writer = MetadataWriter(
        DRIVER, plugin_data_dir=tmp_path / "p", cdi_dir=tmp_path / "c", versions=[METADATA_V1BETA1]
    )
    uid = "9b2b3c4d-0000-4000-8000-00000000000d"

    class Async(Returns):
        async def prepare_resource_claims(  # type: ignore[override]
            self, claims: list[Any]
        ) -> dict[str, PrepareResult]:
            await asyncio.sleep(0)
            return super().prepare_resource_claims(claims)

    with journal() as written:
        prepared = MetadataPlugin(Async([PreparedDevice("p", "d0", ["a"])]), writer)
        answered = asyncio.run(prepared.prepare_resource_claims([make_claim(uid)]))  # type: ignore[arg-type]
    spec_path = str(tmp_path / f"c/{DRIVER}_metadata_{uid}_a.json")
    assert written.claims[uid] == {spec_path: json.loads(Path(spec_path).read_text())}
    assert answered[uid].devices[0].cdi_device_ids == [f"{DRIVER}/metadata={uid}_a"]


def test_update_refuses_what_gos_helper_refuses_and_another_uid(tmp_path: Path) -> None:
    twins = Twins(tmp_path)
    uid = "ab2b3c4d-0000-4000-8000-00000000000e"
    claim = make_claim(uid)
    twins.prepare(claim, [PreparedDevice("p", "d0", ["a"])])
    go = twins.go("update", claim, [PreparedDevice("p", "d0")], request="b")
    with pytest.raises(ValueError) as missing:
        twins.writer.update("team-a", "claim-1", uid, "b", [PreparedDevice("p", "d0")])
    assert (
        str(missing.value)
        == go["error"]
        == 'request "b" not found in prepared claim team-a/claim-1'
    )
    # A claim of the same name that replaced it: its file is not this UID's to change.
    with pytest.raises(ValueError, match="is of its UID"):
        twins.writer.update("team-a", "claim-1", "another-uid", "a", [PreparedDevice("p", "d0")])
    with pytest.raises(ValueError, match="not a DNS label"):
        twins.writer.update("team-a", "claim-1", uid, "../a", [PreparedDevice("p", "d0")])


@pytest.mark.parametrize(
    ("versions", "error"),
    [
        ([], "must be explicitly selected"),
        ([METADATA_V1ALPHA1], "the latest metadata version is metadata.resource.k8s.io/v1beta1"),
        (["metadata.resource.k8s.io/v1"], "is not supported"),
        ([METADATA_V1BETA1, METADATA_V1BETA1], "name one twice"),
        (METADATA_V1BETA1, "a list of versions"),
    ],
)
def test_versions_are_checked_at_start(versions: Any, error: str, tmp_path: Path) -> None:
    """As Go's Start: the newest version named by the driver itself, no unknown one."""
    with pytest.raises(ValueError, match=error):
        check_versions(versions)
    (tmp_path / "registry").mkdir()
    with pytest.raises(ValueError, match=error):
        kubeletplugin.start(
            Returns([]),
            driver=DRIVER,
            api_client=kubernetes.client.ApiClient(),
            registrar_dir=str(tmp_path / "registry"),
            plugin_data_dir=str(tmp_path / "plugin"),
            device_metadata=versions,
        )
    assert not (tmp_path / "plugin").exists()  # refused before anything was made


def test_update_without_the_feature_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "r").mkdir()
    client = kubernetes.client.ApiClient()
    with kubeletplugin.start(
        Returns([]),
        driver=DRIVER,
        api_client=client,
        registrar_dir=str(tmp_path / "r"),
        plugin_data_dir=str(tmp_path / "p"),
    ) as helper:
        assert helper.device_metadata is None
        with pytest.raises(RuntimeError, match="device metadata is not enabled"):
            helper.update_request_metadata("ns", "c", "uid", "req", [])
    client.close()
