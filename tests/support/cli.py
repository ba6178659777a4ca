"""What the tests of the ``resourceslice`` command share (tests/cli, and the e2e tests that
run it): the examples, the command run in-process or watched as a child process, the slices
it wrote. Their fixtures (a driver of the test's own, the kubeconfig, the slices API, a Node)
are tests/cli/conftest.py's."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest

from resourceslice import cli

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TIMEOUT = 60.0


def slices(api: kubernetes.client.ResourceV1Api, driver: str) -> list[dict[str, Any]]:
    response = api.list_resource_slice(
        field_selector=f"spec.driver={driver}", _preload_content=False
    )
    items: list[dict[str, Any]] = json.loads(response.data)["items"]
    return items


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


class Output:
    """A child process's stdout and stderr lines, as they come, for waiting on."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: queue.Queue[tuple[str, str | None]] = queue.Queue()
        self.seen: list[tuple[str, str]] = []
        self.open_streams = 2
        for name, stream in (("out", process.stdout), ("err", process.stderr)):
            threading.Thread(target=self._pump, args=(name, stream), daemon=True).start()

    def _pump(self, name: str, stream: Any) -> None:
        with stream:
            for line in stream:
                self.lines.put((name, line.rstrip("\n")))
        self.lines.put((name, None))

    def wait_for(self, stream: str, text: str) -> str:
        """The next line of ``stream`` containing ``text``; fails after TIMEOUT or at exit."""
        while self.open_streams:
            try:
                name, line = self.lines.get(timeout=TIMEOUT)
            except queue.Empty:
                break
            if line is None:
                self.open_streams -= 1
                continue
            self.seen.append((name, line))
            if name == stream and text in line:
                return line
        pytest.fail(f"no {stream} line with {text!r}; saw {self.seen}")


def device(i: int, speed: str = "400G") -> dict[str, Any]:
    return {"name": f"port-{i}", "attributes": {"speed": {"string": speed}}}
