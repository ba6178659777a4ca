"""What mypy --strict (the project's settings) tells a driver about its claims: a misspelt
key of the v1 claim, a configuration used as another type, a prepared device built wrong."""

from __future__ import annotations

from pathlib import Path

from typecheck import mypy

SNIPPET = """
import dataclasses

from resourceslice import kubeletplugin


@dataclasses.dataclass
class Config:
    greeting: str


def prepare(claim: kubeletplugin.ResourceClaim) -> list[kubeletplugin.PreparedDevice]:
    uid: str = claim["metadata"]["uid"]
    allocation = claim["status"]["allocation"]["devices"]
    results = allocation["resutls"]  # error
    devices = kubeletplugin.allocated_devices(claim, "gpu.example.com", Config)
    count: int = devices[0].configs[0].greeting  # error
    if devices[0].config is not None:
        text: str = devices[0].config.greeting
    return [d.prepared([len(uid)]) for d in devices]  # error
"""


def test_mypy_reports_what_a_driver_gets_wrong(tmp_path: Path) -> None:
    reported = mypy(tmp_path, driver=SNIPPET)["driver"]
    errors = [line.split(": error: ", 1)[1] for line in reported]
    lines = [int(line.split(":")[0]) for line in reported]
    marked = [i for i, line in enumerate(SNIPPET.splitlines(), 1) if line.endswith("# error")]
    assert lines == marked, reported
    assert 'TypedDict "DeviceAllocationResult" has no key "resutls"' in errors[0]
    assert 'expression has type "str", variable has type "int"' in errors[1]
    assert 'List item 0 has incompatible type "int"; expected "str"' in errors[2]
