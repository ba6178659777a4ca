"""resourceslice.types: the TypedDicts a driver annotates its devices with. mypy checks them
(a misspelt field is an error), and at run time they are the plain dicts the API takes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import resourceslice as rs

REPO = Path(__file__).resolve().parents[2]

DRIVER = """
from __future__ import annotations

import resourceslice as rs

devices: list[rs.Device] = [
    {
        "name": "gpu-0",
        "attributes": {"model": {"string": "a100"}, "cores": {"int": 108}},
        "capacity": {
            "memory": {"value": "80Gi"},
            "bandwidth": {
                "value": 1000,
                "requestPolicy": {"default": "100", "validRange": {"min": "1"}},
            },
        },
        "taints": [{"key": "example.com/unhealthy", "effect": "NoSchedule"}],
        "consumesCounters": [
            {"counterSet": "gpu-0-memory", "counters": {"memory": {"value": "80Gi"}}}
        ],
        "allowMultipleAllocations": True,
    },
]
counters: list[rs.CounterSet] = [
    {"name": "gpu-0-memory", "counters": {"memory": {"value": "80Gi"}}}
]
selector: rs.NodeSelector = {
    "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}]
}
pool = rs.Pool(
    slices=[rs.Slice(shared_counters=counters), rs.Slice(devices=devices)], node_selector=selector
)
"""


def mypy(tmp_path: Path, **modules: str) -> dict[str, list[str]]:
    """mypy --strict's errors in each of ``modules`` (name -> code), checked in one run."""
    pytest.importorskip("mypy", reason="mypy is in the dev extra")
    for name, code in modules.items():
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(code))
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", os.devnull,
         "--python-version", "3.9", "--follow-imports", "silent",
         *(str(tmp_path / f"{name}.py") for name in modules)],
        capture_output=True, text=True, timeout=300, cwd=REPO,  # its pyproject.toml's settings
    )  # fmt: skip
    assert result.returncode in (0, 1), result.stdout + result.stderr
    return {
        name: [
            line for line in result.stdout.splitlines() if line.startswith(f"{tmp_path / name}.py:")
        ]
        for name in modules
    }


def test_mypy_accepts_a_typed_driver_and_finds_a_misspelt_field(tmp_path: Path) -> None:
    errors = mypy(
        tmp_path,
        typed=DRIVER,
        misspelt=DRIVER.replace('{"int": 108}', '{"integer": 108}'),
        unnamed=DRIVER.replace('"name": "gpu-0",', ""),
    )
    assert errors["typed"] == []
    (misspelt,) = errors["misspelt"]
    assert '"integer"' in misspelt and "DeviceAttribute" in misspelt, misspelt
    (unnamed,) = errors["unnamed"]
    assert 'Missing key "name" for TypedDict "Device"' in unnamed, unnamed


def test_typed_devices_are_plain_dicts_the_core_publishes() -> None:
    namespace: dict[str, object] = {}
    exec(DRIVER, namespace)
    pool = namespace["pool"]
    assert isinstance(pool, rs.Pool)
    ctrl = rs.start_controller(None, driver="gpu.example.com", resources=rs.DriverResources())
    with ctrl:
        ctrl.update(rs.DriverResources(pools={"p": pool}))  # raises ValidationError if not


def test_required_keys() -> None:
    assert rs.Device.__required_keys__ == {"name"}
    assert rs.DeviceCapacity.__required_keys__ == {"value"}
    assert rs.DeviceTaint.__required_keys__ == {"key", "effect"}
    assert rs.NodeSelector.__required_keys__ == {"nodeSelectorTerms"}
    assert rs.DeviceAttribute.__required_keys__ == frozenset()
