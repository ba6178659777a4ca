"""``async with kubeletplugin.start(...)``: coroutine callbacks run on the driver's own loop,
where what the driver bound to it works, with kubelet's code and the real apiserver."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import kubernetes.client
import pytest

from resourceslice import kubeletplugin
from resourceslice.testing.kubelet import KubeletHarness
from support.kubelet_env import allocated_claim, delete_claim, uid

pytestmark = pytest.mark.integration

DRIVER = "loop.example.com"


class LoopBoundPlugin:
    """Prepares once ``ready`` (a future of the driver's loop) is done, as a driver waits for
    its own initialisation; records the loop and thread of each callback."""

    def __init__(self, ready: asyncio.Future[None]) -> None:
        self.ready = ready
        self.entered = threading.Event()
        self.ran_on: list[tuple[asyncio.AbstractEventLoop, int]] = []

    async def prepare_resource_claims(
        self, claims: list[kubeletplugin.ResourceClaim]
    ) -> dict[str, kubeletplugin.PrepareResult]:
        self.ran_on.append((asyncio.get_running_loop(), threading.get_ident()))
        self.entered.set()
        await self.ready  # pending: a future of another loop would raise here
        return kubeletplugin.prepare_each(
            claims, lambda c: [d.prepared() for d in kubeletplugin.allocated_devices(c, DRIVER)]
        )

    async def unprepare_resource_claims(
        self, claims: list[kubeletplugin.ClaimRef]
    ) -> dict[str, BaseException | None]:
        self.ran_on.append((asyncio.get_running_loop(), threading.get_ident()))
        return {claim.uid: None for claim in claims}


def test_async_with_runs_coroutine_callbacks_on_the_running_loop(
    kube_client: kubernetes.client.ApiClient, node_dir: Path, kubelet: KubeletHarness
) -> None:
    claim = allocated_claim(kube_client, DRIVER, "on-my-loop", ["dev-0"])

    async def driver() -> None:
        loop = asyncio.get_running_loop()
        plugin = LoopBoundPlugin(loop.create_future())
        async with kubeletplugin.start(
            plugin,
            driver=DRIVER,
            api_client=kube_client,
            registrar_dir=str(node_dir / "registry"),
            plugin_data_dir=str(node_dir / "plugins"),
        ):
            await asyncio.to_thread(kubelet.wait_registered, DRIVER)
            # kubelet's calls block: on a thread, while this loop serves the callbacks.
            call = asyncio.create_task(asyncio.to_thread(kubelet.prepare, DRIVER, [claim]))
            assert await asyncio.to_thread(plugin.entered.wait, 60)
            plugin.ready.set_result(None)
            answer = await call
            assert answer["claims"][uid(claim)]["error"] == ""
            assert [d["deviceName"] for d in answer["claims"][uid(claim)]["devices"]] == ["dev-0"]
            answer = await asyncio.to_thread(kubelet.unprepare, DRIVER, [claim])
            assert answer["claims"][uid(claim)]["error"] == ""
        assert plugin.ran_on == [(loop, threading.get_ident())] * 2

    try:
        asyncio.run(driver())
    finally:
        delete_claim(kube_client, "on-my-loop")
