"""resourceslice.testing.runtime without runc: the spec it gives runc, runc's error message."""

from __future__ import annotations

from resourceslice.testing.cluster import _is_import_path
from resourceslice.testing.runtime import REPORTER_PATH, base_spec, merge_spec, runc_message


def test_edits_are_merged_into_the_base_spec() -> None:
    base = base_spec([REPORTER_PATH])
    mount = {"destination": "/etc/x", "type": "bind", "source": "/h/x", "options": ["bind"]}
    node = {"path": "/dev/gpu0", "type": "c", "major": 1, "minor": 3}
    rule = {"allow": True, "type": "c", "major": 1, "minor": 3, "access": "rwm"}
    spec = merge_spec(
        base,
        {
            "process": {"env": ["A=1", "PATH=/x", "A=2"]},
            "mounts": [mount],
            "linux": {"devices": [node], "resources": {"devices": [rule]}},
        },
    )
    assert spec["process"]["env"] == ["PATH=/x", "A=2"]
    assert spec["process"]["args"] == [REPORTER_PATH]
    assert spec["mounts"][-1] == mount
    assert [m["destination"] for m in spec["mounts"][:-1]] == [
        m["destination"] for m in base["mounts"]
    ]
    assert spec["linux"]["devices"] == [node]
    # Deny-all first: the allow rule of the edits comes after it, so it wins for its device.
    assert spec["linux"]["resources"]["devices"] == [{"allow": False, "access": "rwm"}, rule]
    assert base["mounts"][-1]["destination"] == "/tmp"  # the base is left as it was
    assert "devices" not in base["linux"]


def test_runcs_error_message_is_its_log_lines_msg() -> None:
    stderr = (
        'time="2026-12-05T03:13:34Z" level=warning msg="not this"\n'
        'time="2026-12-05T03:13:34Z" level=error msg="runc run failed: open \\"/x\\": '
        'no such file or directory"\n'
    )
    assert runc_message(stderr) == 'runc run failed: open "/x": no such file or directory'
    assert runc_message("plain text\n") is None


def test_an_import_path_is_told_from_a_directory_of_the_module() -> None:
    assert _is_import_path("github.com/opencontainers/runc")
    assert not _is_import_path("cmd/oracle")
    assert not _is_import_path(".")
