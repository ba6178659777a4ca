"""The asyncio controller's error handler adapter, alone: errors reported from other threads
are awaited on the loop one at a time, in order, and all of them before the stop returns.
(tests/integration/test_aio.py does the same with the apiserver's own errors.)"""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from resourceslice.aio import _HandlerOnLoop


def report_from_threads(handler: _HandlerOnLoop, count: int) -> None:
    for i in range(count):  # one after the other: the order of the reports is known
        thread = threading.Thread(target=handler, args=(ValueError(i), f"error {i}"))
        thread.start()
        thread.join()


def test_errors_reported_before_the_drain_are_awaited_in_order() -> None:
    events: list[str] = []

    async def on_error(exc: BaseException, message: str) -> None:
        events.append(f"begin {message}")
        await asyncio.sleep(0)  # another handler would start here if they overlapped
        events.append(f"end {message}")

    async def main() -> None:
        handler = _HandlerOnLoop(on_error, asyncio.get_running_loop())
        # The reports are queued on the loop, not yet delivered, when the drain starts.
        report_from_threads(handler, 3)
        await handler.drain()

    asyncio.run(main())
    assert events == [f"{step} error {i}" for i in range(3) for step in ("begin", "end")]


def test_a_failing_handler_is_logged_and_the_next_still_awaited(
    caplog: pytest.LogCaptureFixture,
) -> None:
    handled: list[str] = []

    async def on_error(exc: BaseException, message: str) -> None:
        if message == "error 0":
            raise RuntimeError("the handler's own bug")
        handled.append(message)

    async def main() -> None:
        handler = _HandlerOnLoop(on_error, asyncio.get_running_loop())
        report_from_threads(handler, 2)
        await handler.drain()

    with caplog.at_level(logging.ERROR, logger="resourceslice"):
        asyncio.run(main())
    assert handled == ["error 1"]
    assert "the error handler failed" in caplog.text
