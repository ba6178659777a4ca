"""Which kubeconfig the command uses: kubectl's order, then the in-cluster config."""

from __future__ import annotations

from pathlib import Path

import pytest

from resourceslice import _kubeconfig, cli
from resourceslice.cli import common


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return tmp_path


def test_flag_then_env_then_home_then_in_cluster(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _kubeconfig.kubeconfig_paths(None) is None
    default = home / ".kube" / "config"
    default.parent.mkdir()
    default.write_text("")
    assert _kubeconfig.kubeconfig_paths(None) == str(default)
    monkeypatch.setenv("KUBECONFIG", "/a:/b")
    assert _kubeconfig.kubeconfig_paths(None) == "/a:/b"
    assert _kubeconfig.kubeconfig_paths("/flag") == "/flag"


def test_no_config_anywhere_is_a_user_error(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["status", "--driver", "gpu.example.com"]) == common.EXIT_USAGE
    assert capsys.readouterr().err.startswith("resourceslice: no kubeconfig: pass --kubeconfig")


def test_unreadable_kubeconfig_names_the_file(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = home / "nope"
    code = cli.main(["status", "--driver", "gpu.example.com", "--kubeconfig", str(missing)])
    err = capsys.readouterr().err
    assert code == common.EXIT_USAGE
    assert err.startswith(f"resourceslice: kubeconfig {missing}: ")
    assert "Traceback" not in err
