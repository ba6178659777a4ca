"""`publish --leader-elect`: the Lease it uses; two replicas hand over on a real apiserver."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import kubernetes.client
import pytest
import yaml

import resourceslice
from resourceslice import cli
from resourceslice.cli import command, common
from resourceslice.cli import publish as cli_publish
from support.cli import TIMEOUT, Output, slices

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts:
- {name: plain, context: {cluster: c, user: u}}
- {name: team, context: {cluster: c, user: u, namespace: dra-team}}
current-context: %s
"""


def election(*args: str) -> resourceslice.LeaderElection:
    parsed = command.build_parser().parse_args(
        ["publish", "pools.yaml", "--driver", "gpu.example.com", "--leader-elect", *args]
    )
    return cli_publish.leader_election_of(parsed)


def test_the_lease_is_the_drivers_in_the_contexts_namespace(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text(KUBECONFIG % "team")
    chosen = election("--kubeconfig", str(config))
    assert (chosen.namespace, chosen.name) == ("dra-team", "resourceslice-gpu.example.com")
    # client-go's defaults, and an identity of its own per replica.
    assert (chosen.lease_duration, chosen.renew_deadline, chosen.retry_period) == (15, 10, 2)
    assert chosen.identity and chosen.identity != election("--kubeconfig", str(config)).identity
    # Another context; per node; everything given.
    assert election("--kubeconfig", str(config), "--context", "plain").namespace == "default"
    per_node = election("--kubeconfig", str(config), "--node", "n1")
    assert per_node.name == "resourceslice-gpu.example.com-n1"
    given = election(
        "--kubeconfig", str(config), "--lease-namespace", "ns", "--lease-name", "x",
        "--lease-duration", "3",
    )  # fmt: skip
    assert (given.namespace, given.name, given.lease_duration) == ("ns", "x", 3)
    assert given.renew_deadline == 2 and given.retry_period == pytest.approx(0.4)
    assert given.shards == 1
    assert election("--kubeconfig", str(config), "--shards", "12").shards == 12


def test_in_a_pod_the_lease_is_in_the_pods_namespace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    namespace_file = tmp_path / "namespace"
    namespace_file.write_text("drivers\n")
    monkeypatch.setattr(cli_publish, "SERVICE_ACCOUNT_NAMESPACE", namespace_file)
    assert election().namespace == "drivers"
    monkeypatch.setattr(cli_publish, "SERVICE_ACCOUNT_NAMESPACE", tmp_path / "missing")
    assert election().namespace == "default"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--once"], "--once and --leader-elect"),
        (["--lease-duration", "1"], "must be whole seconds, at least 2"),
        (["--lease-duration", "2.5"], "must be whole seconds, at least 2"),
        (["--shards", "0"], "must be a whole number, at least 1"),
    ],
)
def test_bad_leader_election_arguments(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    path = tmp_path / "pools.yaml"
    path.write_text("pools: {}\n")
    publish = ["publish", str(path), "--driver", "gpu.example.com", "--all-nodes"]
    with pytest.raises(SystemExit) if args[0] != "--once" else _nothing():
        code = cli.main([*publish, "--leader-elect", *args, "--kubeconfig", "/nonexistent"])
        assert code == common.EXIT_USAGE
    assert message in capsys.readouterr().err


def test_shards_need_leader_election(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "pools.yaml"
    path.write_text("pools: {}\n")
    code = cli.main(
        ["publish", str(path), "--driver", "gpu.example.com", "--all-nodes", "--shards", "3"]
    )
    assert code == common.EXIT_USAGE
    assert "--shards needs --leader-elect" in capsys.readouterr().err


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


@pytest.mark.integration
def test_two_replicas_one_publishes_and_hands_over_on_stop(
    tmp_path: Path,
    kubeconfig: str,
    resource_api: kubernetes.client.ResourceV1Api,
    driver: str,
    kube_client: kubernetes.client.ApiClient,
) -> None:
    path = tmp_path / "pools.yaml"
    devices = [{"name": f"port-{i}"} for i in range(3)]
    path.write_text(yaml.safe_dump({"pools": {"fabric": {"devices": devices}}}))
    env = dict(os.environ, PYTHONPATH=str(Path(resourceslice.__file__).parents[1]))
    lease = driver.replace(".", "-")
    # Long enough that a loaded machine does not make the leader miss its renewals: the
    # handover here is by release, which does not wait for the Lease to expire.

    def replica() -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "resourceslice.cli", "publish", str(path), "--driver", driver,
             "--all-nodes", "--interval", "0.05", "--kubeconfig", kubeconfig, "--leader-elect",
             "--lease-namespace", "default", "--lease-name", lease, "--lease-duration", "10"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip

    first = replica()
    second: subprocess.Popen[str] | None = None
    try:
        first_out = Output(first)
        first_out.wait_for("out", f"lease default/{lease} as ")
        first_out.wait_for("out", "took the lease: publishing")
        first_out.wait_for("out", "1 create, 0 updates, 0 deletes")
        second = replica()
        second_out = Output(second)
        second_out.wait_for("out", "standby until it holds the lease")
        second_out.wait_for("out", "watching")  # FILE's state from here on is followed
        # The standby follows FILE too; only the leader writes the change.
        devices.append({"name": "port-3"})
        path.write_text(yaml.safe_dump({"pools": {"fabric": {"devices": devices}}}))
        first_out.wait_for("out", "0 creates, 1 update, 0 deletes")
        second_out.wait_for("out", "changed: 1 pool, 1 slice, 4 devices")
        # Stopping the leader releases the Lease: the standby takes over without waiting
        # for it to expire, and has nothing to write.
        first.send_signal(signal.SIGINT)
        first_out.wait_for("out", "stopping")
        assert first.wait(TIMEOUT) == 0
        second_out.wait_for("out", "took the lease: publishing")
        second_out.wait_for("out", "0 creates, 0 updates, 0 deletes")
        holder = kubernetes.client.CoordinationV1Api(kube_client).read_namespaced_lease(
            lease, "default"
        )
        assert holder.spec.lease_transitions == 1
        assert [len(s["spec"]["devices"]) for s in slices(resource_api, driver)] == [4]
        seen = first_out.seen + second_out.seen
        assert not [line for name, line in seen if name == "err" and line.startswith("error")]
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
        kubernetes.client.CoordinationV1Api(kube_client).delete_namespaced_lease(lease, "default")
