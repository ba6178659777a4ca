"""What mypy --strict (the project's settings) tells a driver about its claims: a misspelt
key of the v1 claim, a configuration used as another type, a prepared device built wrong."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SNIPPET = """
import dataclasses

from resourceslice import kubeletplugin


@dataclasses.dataclass
class Config:
    greeting: str


def prepare(claim: kubeletplugin.ResourceClaim) -> list[kubeletplugin.Device]:
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
    path = tmp_path / "driver.py"
    path.write_text(SNIPPET)
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    errors = [line.split(": ", 1)[1] for line in run.stdout.splitlines() if ": error:" in line]
    lines = [int(line.split(":")[1]) for line in run.stdout.splitlines() if ": error:" in line]
    marked = [i for i, line in enumerate(SNIPPET.splitlines(), 1) if line.endswith("# error")]
    assert lines == marked, run.stdout
    assert 'TypedDict "DeviceAllocationResult" has no key "resutls"' in errors[0]
    assert 'expression has type "str", variable has type "int"' in errors[1]
    assert 'List item 0 has incompatible type "int"; expected "str"' in errors[2]
