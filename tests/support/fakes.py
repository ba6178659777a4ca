"""Stand-ins shared by the controller unit tests."""

from __future__ import annotations

from dataclasses import dataclass


class FakeClock:
    """Time that moves only when a test says so."""

    def __init__(self, start: float = 1000.0) -> None:
        self.t = start

    def now(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


@dataclass(frozen=True)
class Rec:
    """The fields of a SliceRecord that the store and the mutation cache read."""

    name: str
    pool: str
    resource_version: str = "1"
    uid: str = ""

    def __post_init__(self) -> None:
        if not self.uid:
            object.__setattr__(self, "uid", f"uid-{self.name}")
