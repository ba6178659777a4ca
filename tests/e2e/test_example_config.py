"""examples/kubelet_driver.py's opaque configuration as kube-scheduler allocates it: the
DeviceClass's configuration and the claim's, copied into the allocation by the scheduler's own
code, reach the container through the example's prepare with the claim's winning, and a
claim's entry naming a request applies to the device its ``firstAvailable`` alternative got."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pytest

from resourceslice import kubeletplugin
from resourceslice.testing import DRACluster
from support.chain import load_example, plugin_dirs

pytestmark = pytest.mark.integration


@pytest.fixture
def example() -> ModuleType:
    return load_example()


@pytest.fixture
def example_node(dra_cluster: DRACluster, example: ModuleType) -> Iterator[str]:
    node = dra_cluster.add_node("node-0")
    client = dra_cluster.api_client()
    helper: kubeletplugin.Helper = example.run(
        client, node.name, cdi_dir=str(node.cdi_dir), **plugin_dirs(node, example.DRIVER)
    )
    try:
        dra_cluster.wait_registered(node.name, example.DRIVER)
        assert helper.controller is not None and helper.controller.wait_synced(timeout=60)
        yield node.name
    finally:
        helper.stop()
        client.close()


def greeting(driver: str, text: str) -> dict[str, object]:
    parameters = {"apiVersion": f"{driver}/v1", "kind": "DemoConfig", "greeting": text}
    return {"opaque": {"driver": driver, "parameters": parameters}}


def test_class_and_claim_configuration_as_the_scheduler_allocates_them(
    dra_cluster: DRACluster, example: ModuleType, example_node: str
) -> None:
    driver = example.DRIVER
    dra_cluster.create_device_class(
        "demo-first", driver=driver, selectors=[f'device.attributes["{driver}"].index == 0']
    )
    dra_cluster.create_device_class(
        "demo-greeted",
        driver=driver,
        selectors=[f'device.attributes["{driver}"].index == 1'],
        config=[greeting(driver, "from the class")],
    )
    dra_cluster.create_device_class(
        "demo-other", driver=driver, selectors=[f'device.attributes["{driver}"].index == 2']
    )
    spec = {
        "devices": {
            "requests": [
                # The first alternative cannot be had (one device of its class, two asked):
                # the allocation is for "gpu/greeted", which the claim's entry names as "gpu".
                {
                    "name": "gpu",
                    "firstAvailable": [
                        {"name": "two", "deviceClassName": "demo-first", "count": 2},
                        {"name": "greeted", "deviceClassName": "demo-greeted"},
                    ],
                },
                {"name": "other", "exactly": {"deviceClassName": "demo-other"}},
            ],
            "config": [{"requests": ["gpu"], **greeting(driver, "from the claim")}],
        }
    }
    dra_cluster.create(
        f"/apis/{dra_cluster.resource_api}/namespaces/default/resourceclaims",
        {"metadata": {"name": "configured"}, "spec": spec},
    )
    dra_cluster.create_pod("configured-pod", claim="configured")
    pod = dra_cluster.wait_pod_prepared("configured-pod")
    assert pod.node == example_node
    (claim,) = dra_cluster.pod_claims("configured-pod")
    allocation = claim["status"]["allocation"]["devices"]
    assert [(r["request"], r["device"]) for r in allocation["results"]] == [
        ("gpu/greeted", "demo-1"),
        ("other", "demo-2"),
    ]
    # What the scheduler wrote: the class's entry, then the claim's.
    assert [(c["source"], c.get("requests")) for c in allocation["config"]] == [
        ("FromClass", ["gpu/greeted"]),
        ("FromClaim", ["gpu"]),
    ]
    assert sorted(pod.containers["ctr"].env) == [
        "DEMO_DEVICE_1=1",
        "DEMO_DEVICE_1_GREETING=from the claim",
        "DEMO_DEVICE_2=1",
    ]
