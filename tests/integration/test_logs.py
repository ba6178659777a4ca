"""What the controller logs, on the real apiserver: one INFO line per sync that wrote, the
plan at DEBUG, reconnects at INFO, the error handler's traceback only at DEBUG."""

from __future__ import annotations

import logging

import pytest

import resourceslice as rs
from resourceslice.testing import wait_until
from support.controller_env import (
    SYNC_TIMEOUT,
    ControllerEnv,
    device,
    node_pools,
    pools,
)

pytestmark = pytest.mark.integration


def messages(caplog: pytest.LogCaptureFixture, logger: str, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == logger and r.levelno == level]


def test_one_info_line_per_sync_that_wrote_and_the_plan_at_debug(
    env: ControllerEnv, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="resourceslice")
    ctrl = env.start_synced(pools(p=rs.Pool(devices=[device(i) for i in range(200)])))
    (line,) = messages(caplog, "resourceslice.controller", logging.INFO)
    assert line.startswith("pool 'p': generation 1, 2 creates, 0 updates, 0 deletes in ")
    plans = messages(caplog, "resourceslice.controller", logging.DEBUG)
    assert plans[0].startswith("pool 'p': 200 devices in 2 slices, generation 1 (in the")
    assert "cluster: none); delete none, update none, create [" in plans[0]
    assert messages(caplog, "resourceslice.informer", logging.INFO)[0].startswith(
        "listed 0 ResourceSlices (spec.driver="
    )

    caplog.clear()
    env.update_synced(ctrl, pools(p=rs.Pool(devices=[device(i) for i in range(199)])))
    (line,) = messages(caplog, "resourceslice.controller", logging.INFO)
    assert line.startswith("pool 'p': generation 1, 0 creates, 1 update")

    # A sync that writes nothing says so at DEBUG only.
    caplog.clear()
    assert ctrl.wait_idle(SYNC_TIMEOUT)
    env.restart(ctrl, pools(p=rs.Pool(devices=[device(i) for i in range(199)])))
    assert messages(caplog, "resourceslice.controller", logging.INFO) == []
    assert any("delete none, update none, create none" in m for m in caplog.messages)


def test_a_dropped_watch_is_an_info_line_and_the_watch_resumes(
    env: ControllerEnv, caplog: pytest.LogCaptureFixture
) -> None:
    ctrl = env.start_synced(pools(p=rs.Pool(devices=[device(0)])))
    caplog.set_level(logging.INFO, logger="resourceslice")
    informer = ctrl._informer
    wait_until(informer.interrupt_watch)
    line = wait_until(
        lambda: [m for m in messages(caplog, "resourceslice.informer", logging.INFO)
                 if m.startswith(("watching ResourceSlices in", "relisting ResourceSlices in"))]
    )  # fmt: skip
    assert line
    wait_until(lambda: informer.connected)


@pytest.mark.parametrize("level", [logging.INFO, logging.DEBUG])
def test_the_default_error_handler_logs_the_traceback_at_debug_only(
    env: ControllerEnv, caplog: pytest.LogCaptureFixture, level: int
) -> None:
    caplog.set_level(level, logger="resourceslice")
    # The Node owner does not exist: each sync fails looking it up.
    env.start(
        node_pools(p=rs.Pool(devices=[device(0)])),
        owner=rs.Owner(api_version="v1", kind="Node", name="no-such-node"),
        error_handler=None,
    )
    record = wait_until(
        lambda: next((r for r in caplog.records if r.levelno == logging.ERROR), None)
    )
    assert record.name == "resourceslice.controller"
    assert record.getMessage().startswith("syncing ResourceSlices of pool 'p': (404)")
    assert (record.exc_info is not None) == (level == logging.DEBUG)
