"""Fixtures that tests of several directories share, found by pytest here instead of imported
by each module (an import a linter takes for unused). Helpers are in :mod:`support`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import kubernetes.client
import pytest

from resourceslice.testing import TestCluster
from support.controller_env import ControllerEnv, close_library_twins, driver_name


@pytest.fixture(autouse=True)
def close_twins() -> Iterator[None]:
    """Closes the connections :func:`support.controller_env.library_twin` made for a test."""
    try:
        yield
    finally:
        close_library_twins()


@pytest.fixture(name="env")
def env_fixture(
    kube_cluster: TestCluster, request: pytest.FixtureRequest
) -> Iterator[ControllerEnv]:
    environment = ControllerEnv(kube_cluster, driver_name(request.node.name))
    try:
        yield environment
    finally:
        environment.close()


@pytest.fixture
def node(env: ControllerEnv) -> Any:
    """A Node named after ``env``'s driver (tests/integration/test_controller.py's scenarios,
    run again on each release by tests/versions)."""
    core = kubernetes.client.CoreV1Api(env.admin)
    name = env.driver.split(".")[0][:40] + "-node"
    response = core.create_node(
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}, _preload_content=False
    )
    yield json.loads(response.data)
    core.delete_node(name, _preload_content=False)


@pytest.fixture
def lease_name(request: pytest.FixtureRequest) -> str:
    """A Lease of the test's own (tests/integration/test_leaderelection.py, tests/versions)."""
    return "le-" + request.node.name.lower().replace("_", "-")[5:50].strip("-")
