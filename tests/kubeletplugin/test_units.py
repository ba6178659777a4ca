"""The kubelet plugin's pieces that need no kubelet: CDI specs, socket names, serialisation."""

from __future__ import annotations

import json
import os
from pathlib import Path

import kubernetes.client
import pytest

from resourceslice import kubeletplugin


def test_cdi_spec_per_claim(tmp_path: Path) -> None:
    writer = kubeletplugin.CDISpecWriter("gpu.example.com", cdi_dir=tmp_path, device_class="gpu")
    ids = writer.write_claim(
        "6f1c-uid",
        {
            "gpu-0": {"env": ["GPU=0"], "deviceNodes": [{"path": "/dev/gpu0"}]},
            "gpu-1": {"env": ["GPU=1"]},
        },
    )
    assert ids == {
        "gpu-0": "gpu.example.com/gpu=6f1c-uid-gpu-0",
        "gpu-1": "gpu.example.com/gpu=6f1c-uid-gpu-1",
    }
    path = tmp_path / "gpu.example.com-6f1c-uid.json"
    assert json.loads(path.read_text()) == {
        "cdiVersion": "0.6.0",
        "kind": "gpu.example.com/gpu",
        "devices": [
            {
                "name": "6f1c-uid-gpu-0",
                "containerEdits": {"env": ["GPU=0"], "deviceNodes": [{"path": "/dev/gpu0"}]},
            },
            {"name": "6f1c-uid-gpu-1", "containerEdits": {"env": ["GPU=1"]}},
        ],
    }
    assert sorted(os.listdir(tmp_path)) == [path.name]  # no temporary file left

    writer.remove_claim("6f1c-uid")
    assert not path.exists()
    writer.remove_claim("6f1c-uid")  # unprepare is repeated: no error


@pytest.mark.parametrize("uid", ["../etc", "a/b", ""])
def test_cdi_claim_uid_stays_in_its_directory(tmp_path: Path, uid: str) -> None:
    writer = kubeletplugin.CDISpecWriter("gpu.example.com", cdi_dir=tmp_path)
    with pytest.raises(ValueError, match="file name"):
        writer.write_claim(uid, {"gpu-0": {}})


# What Go's kubeletplugin.RollingUpdateRegistrarSocketFile (v0.37.2) gives for the same
# input, so that a Python and a Go instance of a driver agree on a node.
@pytest.mark.parametrize(
    ("registry_dir", "name"),
    [
        (
            "/var/lib/kubelet/plugins_registry",
            "a-rather-long-driver-name.example.com-j8d434fhi88-reg.sock",
        ),
        ("/" + "d" * 50, "dra-4IA5BGk6OG8xI2KpbM1GuQ-reg.sock"),
        ("/" + "d" * 70, "dra-4IA5BGk6OG8xI2KpbM1GuQ-reg.sock"),
    ],
)
def test_rolling_update_socket_names(registry_dir: str, name: str) -> None:
    uid = "0b2c7d0e-5f7a-4b8e-9a59-3c1f8f0d2a11"
    driver = "a-rather-long-driver-name.example.com"
    assert kubeletplugin.rolling_update_registrar_socket(registry_dir, driver, uid) == name
    short = kubeletplugin.rolling_update_registrar_socket(
        kubeletplugin.KUBELET_REGISTRY_DIR, "gpu.example.com", uid
    )
    assert short == f"gpu.example.com-{uid}-reg.sock"


def test_start_needs_a_dra_service(tmp_path: Path) -> None:
    with kubernetes.client.ApiClient() as client, pytest.raises(ValueError, match="no DRA service"):
        kubeletplugin.start(
            object(),  # type: ignore[arg-type]
            driver="gpu.example.com",
            api_client=client,
            registrar_dir=str(tmp_path),
            node_v1=False,
            node_v1beta1=False,
        )
    assert os.listdir(tmp_path) == []


def test_start_needs_an_api_client(tmp_path: Path) -> None:
    """As Go's helper: kubelet's claims are read with it."""
    with pytest.raises(ValueError, match="api_client must be given"):
        kubeletplugin.start(
            object(),  # type: ignore[arg-type]
            driver="gpu.example.com",
            api_client=None,  # type: ignore[arg-type]
            registrar_dir=str(tmp_path),
        )
    assert os.listdir(tmp_path) == []


def test_a_missing_registration_directory_is_an_error(tmp_path: Path) -> None:
    """Not made: kubelet would never see a socket in a directory of our own making."""
    registry = tmp_path / "plugins_registry"
    with (
        kubernetes.client.ApiClient() as client,
        pytest.raises(FileNotFoundError, match="registration directory"),
    ):
        kubeletplugin.start(
            object(),  # type: ignore[arg-type]
            driver="gpu.example.com",
            api_client=client,
            registrar_dir=str(registry),
            plugin_data_dir=str(tmp_path / "data"),
        )
    assert not registry.exists()


@pytest.mark.parametrize(
    ("driver", "device_class"),
    [("1gpu.example.com", "gpu"), ("gpu.example.com", "1gpu"), ("gpu.example.com", "gpu/x")],
)  # fmt: skip
def test_cdi_vendor_and_class_start_with_a_letter(
    tmp_path: Path, driver: str, device_class: str
) -> None:
    with pytest.raises(ValueError, match="is not a CDI"):
        kubeletplugin.CDISpecWriter(driver, cdi_dir=tmp_path, device_class=device_class)


def test_the_old_name_of_prepared_device_warns_and_is_the_same_class() -> None:
    """kubeletplugin.Device read as resourceslice.Device (a published device): renamed
    PreparedDevice (CHANGELOG.md); the old name still works, and warns where it is used."""
    with pytest.warns(DeprecationWarning, match="kubeletplugin.PreparedDevice") as warned:
        old = kubeletplugin.Device
    assert old is kubeletplugin.PreparedDevice
    assert warned[0].filename == __file__  # the caller's line, not the package's
    with pytest.warns(DeprecationWarning):
        from resourceslice.kubeletplugin import Device  # noqa: F401
    assert "Device" not in kubeletplugin.__all__ and "PreparedDevice" in kubeletplugin.__all__
    with pytest.raises(AttributeError, match="has no attribute 'Devices'"):
        kubeletplugin.Devices  # noqa: B018
