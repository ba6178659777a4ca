"""The members of the API's ResourceSlice structs in each supported Kubernetes release, read
from the source of its ``k8s.io/api`` module by the Go program in ``apifields/`` (the gates
are comments there: ``+featureGate=``). ``make api-fields`` downloads the modules and builds
the program before the tests run; ``tests/core/test_field_table.py`` checks the field table
(``python/resourceslice/_fields.txt``) against them."""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from resourceslice.testing.cluster import ask_go_program, build_go_binary

#: Each supported release: its ``k8s.io/api`` module and its newest served version of
#: ``resource.k8s.io``, the one the table is checked against.
RELEASES = {
    "1.32": ("v0.32.13", "v1beta1"),
    "1.33": ("v0.33.13", "v1beta2"),
    "1.34": ("v0.34.13", "v1"),
    "1.35": ("v0.35.10", "v1"),
    "1.36": ("v0.36.6", "v1"),
    "1.37": ("v0.37.2", "v1"),
}
#: The structs whose members the table lists, by the table's ``at``.
STRUCTS = {
    "spec": "ResourceSliceSpec",
    "device": "Device",
    "device.consumesCounters": "DeviceCounterConsumption",
    "device.capacity": "DeviceCapacity",
}


def module_dir(release: str) -> Path:
    """The ``k8s.io/api`` module of ``release`` in Go's module cache, downloaded if missing."""
    version, _ = RELEASES[release]
    done = subprocess.run(
        [shutil.which("go") or "go", "mod", "download", "-json", f"k8s.io/api@{version}"],
        cwd=tempfile.gettempdir(),  # outside any module: nothing's go.mod is touched
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(json.loads(done.stdout)["Dir"])


def program() -> Path:
    return build_go_binary(
        Path(__file__).parent / "apifields",
        binary="apifields",
        cache_name="apifields",
        what="the k8s.io/api field reader",
        quiet=True,
    )


@functools.cache
def api_fields(release: str) -> dict[tuple[str, str], dict[str, Any]]:
    """``{(at, name): {"gates": [...], "type": ...}}`` of ``release``'s newest served version.
    v1beta1 nests a device's members in ``basic``: they count as the device's own, as the
    library converts them (``_apiversion``)."""
    _, version = RELEASES[release]
    types_go = module_dir(release) / "resource" / version / "types.go"
    structs = ask_go_program(program(), {"file": str(types_go)})
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for at, struct in STRUCTS.items():
        members = list(structs.get(struct, ()))
        if struct == "Device" and any(m["name"] == "basic" for m in members):
            members = [m for m in members if m["name"] != "basic"] + structs["BasicDevice"]
        for m in members:
            out[(at, m["name"])] = {"gates": m["gates"], "type": m["type"]}
    return out


if __name__ == "__main__":  # make api-fields
    print(program())
    for release in RELEASES:
        print(module_dir(release))
