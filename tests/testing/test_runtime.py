"""resourceslice.testing.runtime: the reporter, run by runc, sees what its spec gives it."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from resourceslice.testing.runtime import RuncError, run_container, runtime_available

_WHY_NOT = runtime_available()
pytestmark = [
    pytest.mark.runtime,
    pytest.mark.skipif(_WHY_NOT is not None, reason=_WHY_NOT or ""),
]


def test_an_env_var_reaches_the_process() -> None:
    with run_container({"process": {"env": ["GPU_VISIBLE=gpu-0", "PATH=/x"]}}) as container:
        assert container.report.env["GPU_VISIBLE"] == "gpu-0"
        # A variable of the edits replaces the base spec's.
        assert container.report.env["PATH"] == "/x"


def test_a_character_device_node_is_seen_with_its_type_and_numbers(tmp_path: Path) -> None:
    # As CDI does: the container's node takes the numbers of the host's (here /dev/null's).
    host = tmp_path / "gpu0"
    os.mknod(host, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    rdev = host.stat().st_rdev
    major, minor = os.major(rdev), os.minor(rdev)
    spec = {
        "linux": {
            "devices": [{"path": "/dev/gpu0", "type": "c", "major": major, "minor": minor}],
            "resources": {
                "devices": [
                    {"allow": True, "type": "c", "major": major, "minor": minor, "access": "rwm"}
                ]
            },
        }
    }
    with run_container(spec) as container:
        node = container.report.device("/dev/gpu0")
    assert node is not None, container.report.devices
    assert (node.type, node.major, node.minor) == ("c", 1, 3)


def test_a_bind_mounted_file_is_read_by_the_process(tmp_path: Path) -> None:
    source = tmp_path / "config"
    source.write_text("gpu-0 ready\n")
    spec = {
        "mounts": [
            {
                "destination": "/etc/gpu/config",
                "type": "bind",
                "source": str(source),
                "options": ["bind", "ro"],
            }
        ]
    }
    with run_container(spec, files=["/etc/gpu/config", "/etc/missing"]) as container:
        report = container.report
    assert report.files["/etc/gpu/config"] == "gpu-0 ready\n"
    assert report.files["/etc/missing"] is None
    mount = report.mount("/etc/gpu/config")
    assert mount is not None and mount.root.endswith("/config"), report.mounts


def test_a_mount_of_a_missing_source_fails_with_runcs_message(tmp_path: Path) -> None:
    missing = tmp_path / "not-there"
    spec = {
        "mounts": [
            {"destination": "/etc/x", "type": "bind", "source": str(missing), "options": ["bind"]}
        ]
    }
    with pytest.raises(RuncError) as caught:
        run_container(spec)
    assert f"open {missing}: no such file or directory" in caught.value.stderr
    assert caught.value.message is not None
    assert caught.value.message.endswith(f"open {missing}: no such file or directory")
    assert caught.value.message in str(caught.value)


def test_stop_ends_the_container_on_sigterm_and_leaves_no_runc_state() -> None:
    container = run_container()
    state = container.state()
    assert state is not None and state["status"] == "running"
    pid = state["pid"]
    assert Path(f"/proc/{pid}").exists()
    started = time.monotonic()
    container.stop(grace=60.0)
    # Well within the grace period: the reporter exits on SIGTERM, no SIGKILL was needed.
    assert time.monotonic() - started < 30.0
    assert container.state() is None
    assert not container.state_root.exists()
    assert not container.bundle.exists()
    assert not Path(f"/proc/{pid}").exists() or _is_zombie_or_other(pid)
    container.stop()  # idempotent


def _is_zombie_or_other(pid: int) -> bool:
    """A pid still listed after stop: reused by another process, or not yet reaped."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    return "reporter" not in status.split("\n", 1)[0] or "State:\tZ" in status
