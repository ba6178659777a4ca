"""How long an event loop goes without running its other tasks.

For asyncio drivers (and this package's own asyncio tests): a task that wakes every
millisecond records the longest gap between two of its wake-ups, and how many times it
ran, while the code under test runs on the same loop::

    async with LoopTicker() as ticker:
        await ctrl.update(resources)
    print(ticker.worst, ticker.ticks)
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from types import TracebackType


class LoopTicker:
    """A task of the running loop that ticks every ``interval`` seconds while entered.

    ``worst``: the longest time between two ticks, in seconds (``interval`` at best);
    ``ticks``: how many times it ran. Zero ticks during an await means the awaited call held
    the loop the whole time.
    """

    def __init__(self, interval: float = 0.001) -> None:
        self.interval = interval
        self.worst = 0.0
        self.ticks = 0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(self.interval)
            now = time.perf_counter()
            self.worst = max(self.worst, now - last)
            self.ticks += 1
            last = now

    async def __aenter__(self) -> LoopTicker:
        self._task = asyncio.get_running_loop().create_task(self._run())
        await asyncio.sleep(0)  # let it take its first time stamp
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
