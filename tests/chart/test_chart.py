"""The chart (deploy/chart/resourceslice-driver) by Helm's own code: ``helm lint`` passes it,
``helm template`` renders what its values say, and refuses what no driver can run.
tests/security/test_deploy.py applies the renders to the real apiserver."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from chart.renders import CHART, RENDERS, TEST_IMAGE, find, manifests, roles_of
from resourceslice.cli.command import build_parser
from resourceslice.testing.helm import HELM_VERSION, HelmError, build_helm, lint, template
from security.test_deploy import WITH_KUBELET_PLUGIN, WITH_PUBLISHER

ROOT = Path(__file__).resolve().parents[2]
REQUIRED = {"driver": "gpu.example.com", "image": TEST_IMAGE}


def render(values: dict[str, Any], *files: str) -> list[dict[str, Any]]:
    return template(
        CHART, release="r", namespace="ns", values=values, values_files=[CHART / f for f in files]
    )


def refusal(values: dict[str, Any], *files: str) -> str:
    """Helm's message when it refuses to render the chart with ``values``."""
    with pytest.raises(HelmError) as refused:
        render(values, *files)
    return refused.value.output


def test_helm_is_the_pinned_release() -> None:
    """The binary is Helm's own command, built from helm.sh/helm/v4 at the pinned version."""
    info = subprocess.run(
        ["go", "version", "-m", str(build_helm())], capture_output=True, text=True, check=True
    ).stdout
    assert re.search(rf"^\s+dep\s+helm\.sh/helm/v4\s+{re.escape(HELM_VERSION)}\s", info, re.M)
    go_mod = (ROOT / "python/resourceslice/testing/helmcli/go.mod").read_text()
    assert f"require helm.sh/helm/v4 {HELM_VERSION}\n" in go_mod


@pytest.mark.parametrize("name", list(RENDERS))
def test_lint_passes_every_render(name: str) -> None:
    """``helm lint --strict`` (a warning fails it) with the values of each tested render."""
    spec = RENDERS[name]
    report = lint(CHART, values=spec.values(), values_files=[CHART / f for f in spec.values_files])
    assert "1 chart(s) linted, 0 chart(s) failed" in report


def test_every_values_file_is_rendered_by_a_test() -> None:
    """The chart's ci/ values files (chart-testing's convention) are the tested variations."""
    files = {str(p.relative_to(CHART)) for p in (CHART / "ci").glob("*.yaml")}
    assert files == {f for spec in RENDERS.values() for f in spec.values_files}


def test_the_renders_have_the_halves_the_deploy_tests_expect() -> None:
    for name in RENDERS:
        kinds = {d["kind"] for d in manifests(name)}
        assert ("Deployment" in kinds) == (name in WITH_PUBLISHER), name
        assert ("DaemonSet" in kinds) == (name in WITH_KUBELET_PLUGIN), name


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"image": TEST_IMAGE}, "driver is required: your driver's name"),
        ({"driver": "gpu.example.com"}, "image.repository is required: your driver's image"),
        (
            {"driver": "gpu.example.com", "image": {"repository": "registry.example.com/gpu"}},
            "image.tag (or image.digest) is required: pin your driver's image",
        ),
        (
            {"driver": "GPU_example", "image": TEST_IMAGE},
            'driver "GPU_example" is not a DNS subdomain in lower case',
        ),
        ({**REQUIRED, "driver": f"{'a' * 60}.com"}, "is not a DNS subdomain in lower case"),
        (
            {**REQUIRED, "publisher": {"enabled": True}},
            "publisher.pools is required (or publisher.existingConfigMap.name)",
        ),
    ],
    ids=["no driver", "no image", "no tag", "driver name", "driver too long", "no pools"],
)
def test_what_no_driver_can_run_is_refused(values: dict[str, Any], message: str) -> None:
    """No default image (the chart names no image that does not exist), no unpinned image,
    no driver name that kubeletplugin.start would refuse: Helm says which value is wrong."""
    assert message in refusal(values)


def test_the_chart_defaults_lint_only_with_a_driver_and_an_image() -> None:
    with pytest.raises(HelmError) as refused:
        lint(CHART)
    assert "driver is required" in refused.value.output
    assert "1 chart(s) failed" in refused.value.output


def test_a_digest_pins_the_image() -> None:
    digest = "sha256:" + "0" * 64
    image = {"repository": "registry.example.com/gpu", "tag": "1.0", "digest": digest}
    docs = render({"driver": "gpu.example.com", "image": image, "publisher": {"image": {
        "repository": "registry.example.com/publisher", "digest": ""}}},
        "ci/sharded-values.yaml")  # fmt: skip
    images = {
        d["kind"]: d["spec"]["template"]["spec"]["containers"][0]["image"]
        for d in docs
        if d["kind"] in ("DaemonSet", "Deployment")
    }
    assert images == {
        "DaemonSet": f"registry.example.com/gpu@{digest}",
        "Deployment": "registry.example.com/publisher:1.0",  # its own repository, the tag
    }


def test_the_kubelet_plugin_mounts_kubelets_directories_where_the_host_has_them() -> None:
    """kubelet dials the socket path the plugin registers: each host directory is mounted at
    its own path, the driver's plugin directory named after the driver, and the container
    told each path, in the variables examples/kubelet_driver.py reads."""
    docs = render({**REQUIRED, "kubeletPlugin": {"kubeletDir": "/var/lib/k0s/kubelet"}})
    spec = find(docs, "DaemonSet")["spec"]["template"]["spec"]
    [container] = spec["containers"]
    hosts = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert (
        mounts
        == hosts
        == {
            "plugins-registry": "/var/lib/k0s/kubelet/plugins_registry",
            "plugin-data": "/var/lib/k0s/kubelet/plugins/gpu.example.com",
            "cdi": "/var/run/cdi",
        }
    )
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["KUBELET_REGISTRAR_DIR"] == hosts["plugins-registry"]
    assert env["KUBELET_PLUGIN_DATA_DIR"] == hosts["plugin-data"]
    assert env["CDI_DIR"] == hosts["cdi"]
    assert env["DRIVER_NAME"] == "gpu.example.com"
    example = (ROOT / "examples" / "kubelet_driver.py").read_text()
    for name in env:
        assert f'"{name}"' in example, name
    # maxSurge: old and new pod side by side, told apart by POD_UID (rolling_update_uid).
    daemonset = find(docs, "DaemonSet")
    assert daemonset["spec"]["updateStrategy"]["rollingUpdate"] == {
        "maxSurge": 1,
        "maxUnavailable": 0,
    }
    assert "rolling_update_uid=pod_uid" in example and 'pod_uid=env.get("POD_UID")' in example


def test_the_policy_names_the_kubelet_plugins_account() -> None:
    docs = manifests("default")
    account = find(docs, "DaemonSet")["spec"]["template"]["spec"]["serviceAccountName"]
    [condition] = find(docs, "ValidatingAdmissionPolicy")["spec"]["matchConditions"]
    user = f"system:serviceaccount:{RENDERS['default'].namespace}:{account}"
    assert condition["expression"] == f'request.userInfo.username == "{user}"'
    binding = find(docs, "ValidatingAdmissionPolicyBinding")
    assert (
        binding["spec"]["policyName"] == find(docs, "ValidatingAdmissionPolicy")["metadata"]["name"]
    )
    off = render({**REQUIRED, "kubeletPlugin": {"ownNodeSlicesPolicy": {"enabled": False}}})
    assert not [d for d in off if d["kind"].startswith("ValidatingAdmissionPolicy")]


def test_the_device_class_selects_the_drivers_devices() -> None:
    model = 'device.attributes["gpu.example.com"].model == "H100"'
    docs = render({**REQUIRED, "deviceClass": {"extraSelectors": [{"cel": {"expression": model}}]}})
    device_class = find(docs, "DeviceClass")
    assert device_class["metadata"]["name"] == "gpu.example.com"
    assert [s["cel"]["expression"] for s in device_class["spec"]["selectors"]] == [
        'device.driver == "gpu.example.com"',
        model,
    ]
    off = render({**REQUIRED, "deviceClass": {"enabled": False}})
    assert not [d for d in off if d["kind"] == "DeviceClass"]


@pytest.mark.parametrize("shards", [1, 3])
def test_the_lease_role_names_the_lease_the_publisher_takes(shards: int) -> None:
    """With a lease name and duration of one's own: the command says them, and the Role grants
    that Lease (by name without shards; every Lease of the namespace, listed, with them)."""
    docs = render(
        {**REQUIRED, "publisher": {"leaderElection": {
            "leaseName": "my-lease", "leaseDuration": 30, "shards": shards}}},
        "ci/publisher-values.yaml",
    )  # fmt: skip
    [container] = find(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    args = build_parser().parse_args(container["command"][1:])
    assert (args.lease_name, args.lease_duration, args.shards) == ("my-lease", 30, shards)
    account = find(docs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
    roles = roles_of(docs, "ns", account)
    [lease_role] = [r for r in roles if r["kind"] == "Role"]
    rules = lease_role["rules"]
    if shards == 1:
        assert [r.get("resourceNames") for r in rules] == [["my-lease"], None]
        assert sorted(v for r in rules for v in r["verbs"]) == ["create", "get", "update"]
    else:
        [rule] = rules
        assert "resourceNames" not in rule
        assert sorted(rule["verbs"]) == ["create", "get", "list", "update"]


def test_an_existing_config_map_is_mounted_and_none_made() -> None:
    docs = render(
        {**REQUIRED, "kubeletPlugin": {"enabled": False}, "publisher": {
            "enabled": True, "existingConfigMap": {"name": "fabric", "key": "fabric.yaml"}}},
    )  # fmt: skip
    assert not [d for d in docs if d["kind"] == "ConfigMap"]
    spec = find(docs, "Deployment")["spec"]["template"]["spec"]
    assert spec["volumes"] == [{"name": "pools", "configMap": {"name": "fabric"}}]
    [container] = spec["containers"]
    assert "/etc/pools/fabric.yaml" in container["command"]


def test_metrics_off_means_no_port_no_probes_no_policy() -> None:
    docs = render({**REQUIRED, "publisher": {"metrics": {"enabled": False}}},
                  "ci/publisher-values.yaml")  # fmt: skip
    [container] = find(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert not any(a.startswith("--metrics-address") for a in container["command"])
    assert {"ports", "livenessProbe", "readinessProbe"}.isdisjoint(container)
    assert not [d for d in docs if d["kind"] == "NetworkPolicy"]


def test_the_chart_is_the_only_source_of_manifests() -> None:
    """deploy/ and examples/ hold no Kubernetes manifest but the chart's templates: there is
    one source of what is deployed, and it is tested (tests/security/test_deploy.py)."""
    found = []
    for path in [*ROOT.glob("deploy/**/*.yaml"), *ROOT.glob("examples/**/*.yaml")]:
        if CHART in path.parents:
            continue
        documents = [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
        if any("apiVersion" in d and "kind" in d for d in documents):
            found.append(str(path.relative_to(ROOT)))
    assert found == []


# Values whose content is Kubernetes' own (a pod's resources, a DaemonSet's update strategy)
# or a pool file: documented as one row, not key by key.
WHOLE = {"resources", "updateStrategy", "pools"}


def leaves(values: dict[str, Any], prefix: str = "") -> set[str]:
    """The dotted names of a values tree's leaves (lists, scalars, empty maps, WHOLE)."""
    found = set()
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value and key not in WHOLE:
            found |= leaves(value, f"{name}.")
        else:
            found.add(name)
    return found


def test_the_docs_name_every_value() -> None:
    """docs/helm.md's table: one row per value (a row may name several, comma-separated)."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    page = (ROOT / "docs" / "helm.md").read_text()
    table = page.split("## Values\n", 1)[1].split("\n## ", 1)[0]
    documented = {
        name
        for cell in re.findall(r"^\| ([^|]+) \|", table, flags=re.MULTILINE)
        for name in re.findall(r"`([\w.]+)`", cell)
    }
    assert documented == leaves(values)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"kubeletPlugin": {"enable": False}},
            "at '/kubeletPlugin': additional properties 'enable'",
        ),
        ({"publisher": {"leaderElection": {"shards": 0}}}, "at '/publisher/leaderElection/shards'"),
        ({"namespace": {"podSecurity": "strict"}}, "at '/namespace/podSecurity'"),
    ],
    ids=["misspelt", "no shards", "no such level"],
)
def test_values_the_chart_does_not_know_are_refused(values: dict[str, Any], message: str) -> None:
    """values.schema.json: a misspelt key (kubeletPlugin.enable) would otherwise be ignored,
    and the default (the plugin enabled) deployed in silence."""
    assert message in refusal({**REQUIRED, **values})


def test_the_schema_knows_every_value() -> None:
    """The schema's properties are values.yaml's (the docs' table is checked against it too)."""
    import json

    schema = json.loads((CHART / "values.schema.json").read_text())

    def names(node: dict[str, Any], prefix: str = "") -> set[str]:
        found = set()
        for key, sub in node.get("properties", {}).items():
            name = f"{prefix}{key}"
            if "properties" in sub and key not in WHOLE:
                found |= names(sub, f"{name}.")
            else:
                found.add(name)
        return found

    values = yaml.safe_load((CHART / "values.yaml").read_text())
    overrides = {"kubeletPlugin.image", "publisher.image"}  # {} in values.yaml: image's fields
    schema_names = {n for n in names(schema) if n.rsplit(".", 1)[0] not in overrides}
    assert schema_names | overrides == leaves(values)


def test_extra_volumes_are_mounted_beside_kubelets_directories() -> None:
    config = {"name": "config", "configMap": {"name": "gpu-config"}}
    mount = {"name": "config", "mountPath": "/etc/gpu", "readOnly": True}
    docs = render({**REQUIRED, "kubeletPlugin": {
        "extraVolumes": [config], "extraVolumeMounts": [mount]}})  # fmt: skip
    spec = find(docs, "DaemonSet")["spec"]["template"]["spec"]
    assert spec["volumes"][-1] == config and len(spec["volumes"]) == 4
    assert spec["containers"][0]["volumeMounts"][-1] == mount
