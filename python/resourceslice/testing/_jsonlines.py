"""A Go helper process spoken to in JSON lines: commands on its stdin, answers (with the
command's ``id``) and events (with an ``event`` name) on its stdout.

The kubelet harness and the DRA cluster are such processes (their side of it is the Go module
``jsonlines/``): events are collected as they come, in order; a call waits for its own answer.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

Event = dict[str, Any]


class JsonLinesProcess:
    """One process; ``what`` names it in errors."""

    def __init__(self, args: Sequence[str], *, log_path: Path, what: str) -> None:
        self.what = what
        self.log_path = log_path
        self._log: IO[bytes] = open(log_path, "ab")  # noqa: SIM115 - lives as long as the process
        self._process = subprocess.Popen(
            list(args), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log
        )
        self._ids = itertools.count(1)
        self._cond = threading.Condition()
        self._events: list[Event] = []
        self._answers: dict[int, Event] = {}
        self._reader = threading.Thread(target=self._read, name=what, daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self._process.pid

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            message: Event = json.loads(line)
            with self._cond:
                if "id" in message:
                    self._answers[message["id"]] = message
                else:
                    self._events.append(message)
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def _log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def wait_for(self, found: Callable[[], Any], timeout: float, what: str) -> Any:
        """Call ``found`` (under the lock, after each message) until it returns something
        truthy; AssertionError after ``timeout`` seconds or if the process exits."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                result = found()
                if result:
                    return result
                if self._process.poll() is not None:
                    raise AssertionError(
                        f"{self.what} exited ({self._process.returncode}) while waiting for "
                        f"{what}; its log ends:\n{self._log_tail()}"
                    )
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(
                        f"no {what} within {timeout}s; events: {self._events[-20:]}"
                    )
                self._cond.wait(remaining)

    def events(self, kind: str | None = None) -> list[Event]:
        """The events so far (of ``kind``, when given), oldest first."""
        with self._cond:
            return [e for e in self._events if kind is None or e.get("event") == kind]

    def wait_event(
        self, match: Callable[[Event], bool], *, after: int = 0, timeout: float = 60.0
    ) -> Event:
        """The first event from index ``after`` on that ``match`` accepts; waits for it."""

        def found() -> Event | None:
            return next((e for e in self._events[after:] if match(e)), None)

        result: Event = self.wait_for(found, timeout, "matching event")
        return result

    def call(self, command: Mapping[str, Any], *, timeout: float = 60.0) -> Event:
        """Send ``command`` (an ``id`` is added) and return its answer."""
        number = next(self._ids)
        assert self._process.stdin is not None
        with self._cond:
            self._process.stdin.write(json.dumps({**command, "id": number}).encode() + b"\n")
            self._process.stdin.flush()
        answer: Event = self.wait_for(
            lambda: self._answers.pop(number, None), timeout, f"{command.get('op')} answer"
        )
        return answer

    def close(self) -> None:
        """End the process (stdin closed, then a kill if it does not exit)."""
        if self._process.stdin is not None:
            with contextlib.suppress(OSError):
                self._process.stdin.close()
        try:
            self._process.wait(10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._reader.join(10)
        if self._process.stdout is not None:
            self._process.stdout.close()
        self._log.close()
